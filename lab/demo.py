"""The demo: the Galera lab plus two ProxySQL admin doubles set up like the seeds' ProxySQL pair (writer
hostgroup 100, readers 101, backup writers 102, offline 9101), with lab traffic running, and the product
(Redis, the Celery worker and beat, the writer watch, the console under gunicorn) in front of them.

    python -m lab.demo run       what bin/demo runs: lab, database, demo user, adoption, the product;
                                 a process that dies is restarted (backoff 1 s .. 30 s, wait());
                                 Ctrl-C stops every process it started (the Galera lab stays up)
    python -m lab.demo product   the product part alone (Redis if none answers, worker, beat, watch, web), until Ctrl-C
    python -m lab.demo up        start what is not running of the lab, configure the doubles if empty
    python -m lab.demo down      stop whatever a demo left running (pid files, then the demo's ports) and the lab

The doubles are configured through their admin port with plain admin SQL, exactly as an operator would
have configured a real ProxySQL before adopting it into the product. How the processes are started
and stopped (one process group each, pid files): lab/demo_processes.py.
"""

import argparse
import http.client
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import MySQLdb

from lab.demo_processes import Processes, listening, stop_leftovers

REPO = Path(__file__).resolve().parent.parent
STATE_DIR = REPO / "var" / "lab" / "proxysql-demo"
RUN_DIR = REPO / "var" / "run" / "demo"
LOG_DIR = REPO / "var" / "log"
# Pid files of earlier demos, which `down` still honours: the doubles' and a daemonised redis-server's.
OLD_PID_FILES = (STATE_DIR / "doubles.pid", REPO / "var" / "redis" / "redis.pid")
DOUBLE_PORTS = (16032, 16033)
PORT = int(os.environ.get("PORT") or 8000)
REDIS_PORT = int(os.environ.get("REDIS_PORT") or 6379)
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
        statements.append(
            "INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections,comment)"
            f" VALUES ({hg},'127.0.0.1',{backend_ports[GALERA_PORTS.index(port)]},{weight},2000,'{comment}')"
        )
    statements += [
        "SET mysql-monitor_username='monitor'",
        "SET mysql-monitor_password='monitor'",
        "LOAD MYSQL SERVERS TO RUNTIME",
        "SAVE MYSQL SERVERS TO DISK",
        "LOAD MYSQL VARIABLES TO RUNTIME",
        "SAVE MYSQL VARIABLES TO DISK",
    ]
    if peers:
        statements.append("DELETE FROM proxysql_servers")
        statements += [
            f"INSERT INTO proxysql_servers (hostname,port,weight,comment) VALUES ('127.0.0.1',{p},0,'peer')"
            for p in peers
        ]
        statements += ["LOAD PROXYSQL SERVERS TO RUNTIME", "SAVE PROXYSQL SERVERS TO DISK"]
    return statements


def plain_layout_statements(backend_ports=GALERA_PORTS, writer=100, reader=101, user="utest"):
    """Admin SQL for a ProxySQL laid out by hand as in the seed's replication tutorial (seed 001): the
    writer alone in `writer`, the other backends in `reader` (the writer is not a reader), the application
    user's default hostgroup the writer, locking reads to the writer and plain SELECTs to the readers.
    No native hostgroup table: the roles are only in this layout."""
    first, *rest = backend_ports
    row = "INSERT INTO mysql_servers (hostgroup_id,hostname,port,max_connections,comment) VALUES ({},'127.0.0.1',{},2000,'{}')"
    return [
        "DELETE FROM mysql_servers",
        "DELETE FROM mysql_users",
        "DELETE FROM mysql_query_rules",
        row.format(writer, first, "writer"),
        *[row.format(reader, port, "reader") for port in rest],
        f"INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('{user}','p{user}',{writer})",
        "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply) VALUES"
        f" (10,1,'^SELECT.*FOR UPDATE$',{writer},1),(20,1,'^SELECT',{reader},1)",
        "SET mysql-monitor_username='monitor'",
        "SET mysql-monitor_password='monitor'",
        "LOAD MYSQL SERVERS TO RUNTIME",
        "SAVE MYSQL SERVERS TO DISK",
        "LOAD MYSQL USERS TO RUNTIME",
        "SAVE MYSQL USERS TO DISK",
        "LOAD MYSQL QUERY RULES TO RUNTIME",
        "SAVE MYSQL QUERY RULES TO DISK",
        "LOAD MYSQL VARIABLES TO RUNTIME",
        "SAVE MYSQL VARIABLES TO DISK",
    ]


def start_doubles(processes):
    """Start the two doubles (one process) unless they answer already; returns whether it started them."""
    if all(listening(p) for p in DOUBLE_PORTS):
        return False
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    args = [
        sys.executable,
        "-m",
        "lab.proxysql_double",
        "--user",
        ADMIN_USER,
        "--password",
        ADMIN_PASSWORD,
        "--datadir",
        str(STATE_DIR),
    ]
    for port in DOUBLE_PORTS:
        args += ["--port", str(port)]
    proc = processes.start("doubles", args, log_path=STATE_DIR / "doubles.log")
    _wait_for(DOUBLE_PORTS, proc, f"the ProxySQL doubles did not start; see {STATE_DIR / 'doubles.log'}")
    return True


def _wait_for(ports, proc, failure, timeout=30):
    deadline = time.monotonic() + timeout
    while not all(listening(p) for p in ports):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(failure)
        time.sleep(0.1)


def configure_doubles():
    """Seed each double once (an empty runtime means a fresh double), then start its lab traffic."""
    for port in DOUBLE_PORTS:
        if admin_sql(port, "SELECT COUNT(*) FROM runtime_mysql_servers")[0][0] == "0":
            admin_sql(port, *seed_statements(peers=DOUBLE_PORTS), *DEMO_USERS)
        start_traffic(port)


# The application's user, as any ProxySQL in front of an application has it (the lab traffic's sessions log in as
# "app"): the node and cluster pages show its connections against its max_connections.
DEMO_USERS = [
    "INSERT INTO mysql_users (username,password,default_hostgroup,max_connections) VALUES ('app','app-demo-pw',100,200)",
    "LOAD MYSQL USERS TO RUNTIME",
    "SAVE MYSQL USERS TO DISK",
]


# Lab-only statements of the double (never sent by the product): a steady sysbench-like load, with the
# writer's sessions pinned by auto-increment tokens as on a real ProxySQL 2.7 under OLTP writes.
DEMO_TRAFFIC = [
    'LAB SET_SESSIONS {"hostgroup": 100, "count": 4, "kind": "write", "pinned_reason": "auto_increment"}',
    'LAB SET_SESSIONS {"hostgroup": 101, "count": 8, "kind": "read"}',
    'LAB SET_DIGESTS {"count": 400}',
]


def start_traffic(port):
    admin_sql(port, *DEMO_TRAFFIC)


def up(processes=None):
    """The lab: Galera (left running), the doubles configured like the seeds' pair. Without `processes`
    the doubles keep running after this returns (`down` stops them by their pid file)."""
    from lab.galera import GaleraLab

    GaleraLab().up()
    start_doubles(processes or Processes(RUN_DIR))
    configure_doubles()
    print(
        f"lab up: Galera on 127.0.0.1:{','.join(map(str, GALERA_PORTS))}; ProxySQL admin doubles on "
        f"127.0.0.1:{','.join(map(str, DOUBLE_PORTS))} (user {ADMIN_USER}, password {ADMIN_PASSWORD})"
    )


def product(processes, *, port=PORT, redis_port=REDIS_PORT, log_dir=LOG_DIR):
    """Redis (unless one answers on redis_port), the Celery worker and beat, the writer watch, and the console on
    `port`."""
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}
    if not listening(redis_port):
        redis_dir = processes.run_dir / "redis"
        redis_dir.mkdir(exist_ok=True)
        proc = processes.start(
            "redis",
            [
                "redis-server",
                "--port",
                str(redis_port),
                "--bind",
                "127.0.0.1",
                "--dir",
                str(redis_dir),
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            log_path=log_dir / "redis.log",
        )
        _wait_for([redis_port], proc, f"redis-server did not start; see {log_dir / 'redis.log'}")
    celery = [sys.executable, "-m", "celery", "-A", "controlplane"]
    processes.start(
        "worker",
        celery + ["worker", "--loglevel", "INFO", "--concurrency", "2"],
        env=env,
        log_path=log_dir / "worker.log",
    )
    processes.start(
        "beat",
        celery + ["beat", "--loglevel", "INFO", "--schedule", str(processes.run_dir / "celerybeat-schedule")],
        env=env,
        log_path=log_dir / "beat.log",
    )
    # The writer watch: an idle connection to each auto-failover cluster's writer, a poll queued the moment one closes.
    processes.start(
        "watch",
        [sys.executable, "manage.py", "watch_writers"],
        env=env,
        log_path=log_dir / "watch.log",
    )
    web = processes.start(
        "web",
        [
            sys.executable,
            "-m",
            "gunicorn",
            "controlplane.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
            "--threads",
            "4",
            "--graceful-timeout",
            "5",
            "--access-logfile",
            str(log_dir / "access.log"),
        ],
        env=env,
        log_path=log_dir / "web.log",
    )
    _wait_for([port], web, f"the console did not start; see {log_dir / 'web.log'}", timeout=60)
    _wait_answers(port, web, f"the console does not answer; see {log_dir / 'web.log'}", timeout=90)


def _wait_answers(port, proc, failure, timeout):
    """Until the console answers a page: gunicorn's master listens at once, its workers import Django after (over
    10 s on a loaded machine), and "up" must mean a browser gets a page."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as response:
                if response.status == 200:
                    return
        except (OSError, http.client.HTTPException):
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(failure)
        time.sleep(0.2)


def manage(*args, env=None):
    subprocess.run([sys.executable, "manage.py", *args], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)


def run(port=PORT, redis_port=REDIS_PORT):
    """bin/demo: everything, until Ctrl-C; then every process started here stops (the Galera lab stays)."""
    processes = Processes(RUN_DIR)
    with stopped_on_exit(processes):
        print("--- lab: Galera cluster and ProxySQL admin doubles")
        up(processes)
        print("--- database and demo user")
        manage("migrate", "--noinput")
        password_file = REPO / "var" / "demo-admin-password"
        if not password_file.exists() or not password_file.read_text().strip():
            import secrets

            password_file.write_text(secrets.token_urlsafe(12) + "\n")
        password = password_file.read_text().strip()
        manage("ensure_user", "admin", "--role", "admin", "--password", password)
        print("--- adopting the lab's ProxySQL nodes (skipped when already adopted)")
        for n, double_port in enumerate(DOUBLE_PORTS, start=1):
            manage(
                "adopt_proxysql",
                "--host",
                "127.0.0.1",
                "--port",
                str(double_port),
                "--user",
                ADMIN_USER,
                "--cluster",
                "galera-lab",
                "--node-name",
                f"proxysql-{n}",
                "--yes",
                "--if-new",
                env={**os.environ, "PROXYSQL_ADMIN_PASSWORD": ADMIN_PASSWORD},
            )
        print(f"--- redis on 127.0.0.1:{redis_port}, Celery worker and beat, the writer watch, the console")
        product(processes, port=port, redis_port=redis_port)
        print(
            f"\n  Console:   http://127.0.0.1:{port}/\n  Log in:    admin / {password}\n"
            f"  Logs:      {LOG_DIR}/   Stop: Ctrl-C (then `bin/demo down` also stops the Galera lab)\n",
            flush=True,
        )
        return wait(processes)


# A child that dies is started again (issue 39: a Redis killed mid-operation stopped the whole demo, console
# included): after 1, 2, 4 ... at most 30 s while it keeps dying within a minute of its start; the demo stops
# only when one died that way RESTART_GIVE_UP times in a row (it cannot start: its log says why).
RESTART_FIRST_S, RESTART_CAP_S, RESTART_HEALTHY_S, RESTART_GIVE_UP = 1.0, 30.0, 60.0, 8


def wait(processes, say=lambda line: print(line, flush=True)):
    """Until a signal stops the demo (KeyboardInterrupt); a process that exits by itself is restarted with a
    bounded backoff, and the others (the console among them) stay up."""
    due, quick = {}, {}  # name: when to restart it; name: deaths in a row within RESTART_HEALTHY_S of a start
    while True:
        now = time.monotonic()
        for name, code, ran_s in processes.exited_all():
            if name in due:
                continue
            quick[name] = quick.get(name, 0) + 1 if ran_s < RESTART_HEALTHY_S else 1
            if quick[name] > RESTART_GIVE_UP:
                say(
                    f"{name} exited (code {code}) {quick[name]} times in a row within {RESTART_HEALTHY_S:.0f} s of "
                    f"its start: stopping the demo; see its log"
                )
                return 1
            delay = min(RESTART_CAP_S, RESTART_FIRST_S * 2 ** (quick[name] - 1))
            due[name] = now + delay
            say(
                f"{name} exited (code {code}) after {ran_s:.1f} s: restarting it in {delay:.0f} s "
                f"(restart {quick[name]} in a row); the other processes stay up"
            )
        for name, at in sorted(due.items(), key=lambda item: item[1]):
            if at <= now:
                del due[name]
                say(f"{name} restarted (pid {processes.restart(name).pid})")
        time.sleep(0.2)


class stopped_on_exit:
    """SIGINT (Ctrl-C), SIGTERM and SIGHUP end the `with` block (as KeyboardInterrupt); on the way out, however
    it ends, every process started through `processes` is stopped, and further signals wait for that."""

    def __init__(self, processes):
        self.processes = processes

    def __enter__(self):
        # SIGINT too: a process started with SIGINT ignored (by a script's `&`, by nohup, by a test runner)
        # would otherwise not stop on Ctrl-C, and would hand the ignored SIGINT down to every child.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, _interrupt)
        return self.processes

    def __exit__(self, *exc):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        print("--- stopping what the demo started", flush=True)
        self.processes.stop_all(say=lambda line: print(line, flush=True))
        return exc[0] is KeyboardInterrupt  # an interrupt is the normal way out


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def down(*, port=PORT, redis_port=REDIS_PORT, run_dir=RUN_DIR, product_only=False):
    """Stop what a demo left running: by its pid files (and older demos'), then by its ports; then the
    Galera lab (unless product_only)."""
    ports = [port, redis_port] + ([] if product_only else list(DOUBLE_PORTS))
    stop_leftovers(run_dir, ports, pid_files=() if product_only else OLD_PID_FILES)
    if not product_only:
        from lab.galera import GaleraLab

        GaleraLab().down()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["run", "product", "up", "down"])
    parser.add_argument("--port", type=int, default=PORT, help="the console's port (env PORT, 8000)")
    parser.add_argument("--redis-port", type=int, default=REDIS_PORT, help="env REDIS_PORT, 6379")
    parser.add_argument("--run-dir", type=Path, default=RUN_DIR, help="pid files (product, down)")
    parser.add_argument("--log-dir", type=Path, default=LOG_DIR, help="logs (product)")
    parser.add_argument("--product-only", action="store_true", help="down: leave the lab's doubles and Galera")
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.port, args.redis_port)
    if args.command == "product":
        processes = Processes(args.run_dir)
        with stopped_on_exit(processes):
            product(processes, port=args.port, redis_port=args.redis_port, log_dir=args.log_dir)
            print(f"product up on 127.0.0.1:{args.port}", flush=True)
            return wait(processes)
        return 0
    if args.command == "up":
        return up()
    return down(port=args.port, redis_port=args.redis_port, run_dir=args.run_dir, product_only=args.product_only)


if __name__ == "__main__":
    sys.exit(main())
