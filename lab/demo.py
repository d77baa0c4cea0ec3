"""The demo lab: the Galera lab plus two ProxySQL admin doubles set up like the seeds' ProxySQL pair
(writer hostgroup 100, readers 101, backup writers 102, offline 9101), with lab traffic running.

    python -m lab.demo up      start what is not running, configure the doubles if they are empty
    python -m lab.demo down    stop the doubles' process and the Galera lab

The doubles are configured through their admin port with plain admin SQL, exactly as an operator would
have configured a real ProxySQL before adopting it into the product.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import MySQLdb

REPO = Path(__file__).resolve().parent.parent
STATE_DIR = REPO / "var" / "lab" / "proxysql-demo"
PID_FILE = STATE_DIR / "doubles.pid"
DOUBLE_PORTS = (16032, 16033)
ADMIN_USER = ADMIN_PASSWORD = "admin"
GALERA_PORTS = (3311, 3312, 3313)

# (hostgroup, backend port, weight, comment): DOMAIN.md's Galera example. The preferred writer has the
# highest weight in 100 and a low one in 101, so reads go elsewhere first.
SEED_ROWS = [
    (100, 3311, 1000000, "writer"),
    (101, 3311, 100, "writer, reads elsewhere first"),
    (101, 3312, 10000, "reader"),
    (101, 3313, 10000, "reader"),
    (102, 3312, 1000, "backup writer 1"),
    (102, 3313, 100, "backup writer 2"),
]


def admin_sql(port, *statements, user=ADMIN_USER, password=ADMIN_PASSWORD):
    conn = MySQLdb.connect(host="127.0.0.1", port=port, user=user, passwd=password, connect_timeout=2)
    try:
        cur = conn.cursor()
        out = []
        for sql in statements:
            cur.execute(sql)
            out = cur.fetchall()
        return out
    finally:
        conn.close()


def seed_statements(backend_ports=GALERA_PORTS, peers=()):
    """Admin SQL that sets up one ProxySQL like the seeds' (servers, monitor user, cluster peers)."""
    statements = ["DELETE FROM mysql_servers"]
    for hg, port, weight, comment in SEED_ROWS:
        statements.append("INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections,comment)"
                          f" VALUES ({hg},'127.0.0.1',{backend_ports[GALERA_PORTS.index(port)]},{weight},2000,'{comment}')")
    statements += ["SET mysql-monitor_username='monitor'", "SET mysql-monitor_password='monitor'",
                   "LOAD MYSQL SERVERS TO RUNTIME", "SAVE MYSQL SERVERS TO DISK",
                   "LOAD MYSQL VARIABLES TO RUNTIME", "SAVE MYSQL VARIABLES TO DISK"]
    if peers:
        statements.append("DELETE FROM proxysql_servers")
        statements += [f"INSERT INTO proxysql_servers (hostname,port,weight,comment) VALUES ('127.0.0.1',{p},0,'peer')"
                       for p in peers]
        statements += ["LOAD PROXYSQL SERVERS TO RUNTIME", "SAVE PROXYSQL SERVERS TO DISK"]
    return statements


def _listening(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.3).close()
        return True
    except OSError:
        return False


def start_doubles():
    if all(_listening(p) for p in DOUBLE_PORTS):
        return False
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    args = [sys.executable, "-m", "lab.proxysql_double", "--user", ADMIN_USER, "--password", ADMIN_PASSWORD,
            "--datadir", str(STATE_DIR)]
    for port in DOUBLE_PORTS:
        args += ["--port", str(port)]
    log = open(STATE_DIR / "doubles.log", "ab")
    proc = subprocess.Popen(args, cwd=REPO, stdout=log, stderr=log, start_new_session=True)
    PID_FILE.write_text(str(proc.pid))
    deadline = time.monotonic() + 15
    while not all(_listening(p) for p in DOUBLE_PORTS):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the ProxySQL doubles did not start; see {STATE_DIR / 'doubles.log'}")
        time.sleep(0.1)
    return True


def configure_doubles():
    """Seed each double once (an empty runtime means a fresh double), then start its lab traffic."""
    for port in DOUBLE_PORTS:
        if admin_sql(port, "SELECT COUNT(*) FROM runtime_mysql_servers")[0][0] == "0":
            admin_sql(port, *seed_statements(peers=DOUBLE_PORTS))
        start_traffic(port)


# Lab-only statements of the double (never sent by the product): a steady sysbench-like load, with the
# writer's sessions pinned by auto-increment tokens as on a real ProxySQL 2.7 under OLTP writes.
DEMO_TRAFFIC = [
    'LAB SET_SESSIONS {"hostgroup": 100, "count": 4, "kind": "write", "pinned_reason": "auto_increment"}',
    'LAB SET_SESSIONS {"hostgroup": 101, "count": 8, "kind": "read"}',
    'LAB SET_DIGESTS {"count": 400}',
]


def start_traffic(port):
    admin_sql(port, *DEMO_TRAFFIC)


def up():
    from lab.galera import GaleraLab

    GaleraLab().up()
    start_doubles()
    configure_doubles()
    print(f"lab up: Galera on 127.0.0.1:{','.join(map(str, GALERA_PORTS))}; ProxySQL admin doubles on "
          f"127.0.0.1:{','.join(map(str, DOUBLE_PORTS))} (user {ADMIN_USER}, password {ADMIN_PASSWORD})")


def down():
    from lab.galera import GaleraLab

    if PID_FILE.exists():
        try:
            os.kill(int(PID_FILE.read_text()), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
        PID_FILE.unlink()
    GaleraLab().down()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["up", "down"])
    args = parser.parse_args(argv)
    up() if args.command == "up" else down()


if __name__ == "__main__":
    main()
