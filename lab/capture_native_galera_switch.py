"""What real ProxySQL 2.7.1's Galera manager (mysql_galera_hostgroups, Monitor on) does when a planned switchover is
tried through it, under continuous writes (issue 33 §4). Run by hand, never a test, in a network namespace of its own
over the Galera lab of a lab set:

    LAB_SET=h-native-x unshare --net sh -c 'ip link set lo up && .venv/bin/python -m lab.galera up &&
        .venv/bin/python -m lab.capture_native_galera_switch ../shared/proxysql/2.7.1/proxysql;
        .venv/bin/python -m lab.galera down'

One real ProxySQL (admin 16432, clients 16433) over the three Galera nodes, the layout of the product's tests
(apps/alerts/tests/test_native_galera_drift.NATIVE: all three in writer hostgroup 100, weights 1000/900/800, galera row
writer 100, backup 102, reader 101, offline 9101, max_writers 1, writer_is_also_reader 1) and user app (default
hostgroup 100). Each case starts from that layout placed by Monitor (3311 the writer), two clients inserting through
the client port all along, then loads the case's rows and samples runtime_mysql_servers every 50 ms for --quiet
seconds. Output: one JSON line per case on stdout and in --out: the placement's changes with their times, the clients'
errors and slowest insert, and which backend took the writes.
"""

import argparse
import json
import threading
import time
from pathlib import Path

import MySQLdb

from lab.galera import GaleraLab
from lab.real_proxysql import RealProxySQL

REPO = Path(__file__).resolve().parents[1]
SERVER = (
    "INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections,status) "
    "VALUES ({hg},'127.0.0.1',{port},{weight},2000,'{status}')"
)
LAYOUT = [(100, 3311, 1000, "ONLINE"), (100, 3312, 900, "ONLINE"), (100, 3313, 800, "ONLINE")]
GALERA = (
    "INSERT INTO mysql_galera_hostgroups (writer_hostgroup,backup_writer_hostgroup,reader_hostgroup,"
    "offline_hostgroup,active,max_writers,writer_is_also_reader,max_transactions_behind) "
    "VALUES (100,102,101,9101,1,1,1,100)"
)
# name: the rows loaded (hostgroup, port, weight, status)
CASES = {
    # the old writer OFFLINE_SOFT in its configured row, nothing else
    "configured_soft": [(100, 3311, 1000, "OFFLINE_SOFT"), (100, 3312, 900, "ONLINE"), (100, 3313, 800, "ONLINE")],
    # the new writer's weight above the old one's, nothing else
    "configured_weight": [(100, 3311, 1000, "ONLINE"), (100, 3312, 2000, "ONLINE"), (100, 3313, 800, "ONLINE")],
    # Monitor's placement as loaded rows (no SHUNNED row written), the old writer OFFLINE_SOFT in the writer hostgroup
    "placed_soft": [
        (100, 3311, 1000, "OFFLINE_SOFT"),
        (101, 3311, 1000, "ONLINE"),
        (101, 3312, 900, "ONLINE"),
        (101, 3313, 800, "ONLINE"),
        (102, 3312, 900, "ONLINE"),
        (102, 3313, 800, "ONLINE"),
    ],
    # the same with the weights of 3311 and 3312 swapped
    "placed_soft_swapped": [
        (100, 3311, 900, "OFFLINE_SOFT"),
        (101, 3311, 900, "ONLINE"),
        (101, 3312, 1000, "ONLINE"),
        (101, 3313, 800, "ONLINE"),
        (102, 3312, 1000, "ONLINE"),
        (102, 3313, 800, "ONLINE"),
    ],
    # the placement Monitor would make with the weights swapped: 3312 the writer, 3311 a backup writer
    "placed_moved_swapped": [
        (100, 3312, 1000, "ONLINE"),
        (101, 3311, 900, "ONLINE"),
        (101, 3312, 1000, "ONLINE"),
        (101, 3313, 800, "ONLINE"),
        (102, 3311, 900, "ONLINE"),
        (102, 3313, 800, "ONLINE"),
    ],
    # the configured rows with the weights swapped (what a restart would load after such a switchover)
    "configured_swapped": [(100, 3311, 900, "ONLINE"), (100, 3312, 1000, "ONLINE"), (100, 3313, 800, "ONLINE")],
}


class Writer(threading.Thread):
    def __init__(self, port, tag):
        super().__init__(daemon=True)
        self.port, self.tag, self.stop = port, tag, threading.Event()
        self.rows, self.errors, self.slowest_ms, self.servers = 0, [], 0.0, {}

    def run(self):
        conn, t0 = None, time.monotonic()
        while not self.stop.is_set():
            try:
                if conn is None:
                    conn = MySQLdb.connect(
                        host="127.0.0.1", port=self.port, user="app", passwd="app", db="app", autocommit=True
                    )
                start = time.monotonic()
                cur = conn.cursor()
                cur.execute("INSERT INTO app.switch_load (tag, port) VALUES (%s, @@port)", (self.tag,))
                self.slowest_ms = max(self.slowest_ms, (time.monotonic() - start) * 1000)
                self.rows += 1
            except MySQLdb.MySQLError as exc:
                self.errors.append([round(time.monotonic() - t0, 2), str(exc)])
                conn = None
        if conn is not None:
            conn.close()


def placement(proxy):
    return [
        list(r)
        for r in proxy.sql(
            "SELECT hostgroup_id, port, status, weight FROM runtime_mysql_servers ORDER BY hostgroup_id, port"
        )
    ]


def load(proxy, rows, active=1):
    """The rows, and the Galera manager's row active or not (a product's drain turns it off until its move), loaded
    together (mysql_galera_hostgroups is loaded with the servers)."""
    proxy.sql(
        f"UPDATE mysql_galera_hostgroups SET active={active} WHERE writer_hostgroup=100",
        "DELETE FROM mysql_servers",
        *[SERVER.format(hg=hg, port=p, weight=w, status=s) for hg, p, w, s in rows],
        "LOAD MYSQL SERVERS TO RUNTIME",
    )


def settle(proxy, writer_port, limit=30):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        now = placement(proxy)
        if [r[1] for r in now if r[0] == "100" and r[2] == "ONLINE"] == [str(writer_port)] and any(
            r[0] == "102" for r in now
        ):
            return now
        time.sleep(0.2)
    raise RuntimeError(f"not placed: {placement(proxy)}")


def watch(proxy, quiet, variables_at=None):
    """The placement's changes for `quiet` seconds; `variables_at`: LOAD MYSQL VARIABLES TO RUNTIME then (a node's
    Monitor checks at once after it: the product's healthcheck-during-the-drain test does it)."""
    t0, last, changes = time.monotonic(), None, []
    while time.monotonic() - t0 < quiet:
        if variables_at is not None and time.monotonic() - t0 >= variables_at:
            proxy.sql("LOAD MYSQL VARIABLES TO RUNTIME")
            changes.append({"t": round(time.monotonic() - t0, 3), "loaded": "MYSQL VARIABLES"})
            variables_at = None
        now = placement(proxy)
        if now != last:
            changes.append({"t": round(time.monotonic() - t0, 3), "runtime": now})
            last = now
        time.sleep(0.05)
    return changes


def run_case(proxy, lab, name, rows, quiet, active=1, variables_at=None):
    load(proxy, LAYOUT)
    settle(proxy, 3311)
    with lab.root_connection(1) as conn:
        conn.cursor().execute("TRUNCATE app.switch_load")
    writers = [Writer(proxy.client_port, f"w{n}") for n in (1, 2)]
    for w in writers:
        w.start()
    time.sleep(1.0)
    load(proxy, rows, active)
    changes = watch(proxy, quiet, variables_at)
    for w in writers:
        w.stop.set()
    for w in writers:
        w.join(10)
    with lab.root_connection(1) as conn:
        cur = conn.cursor()
        cur.execute("SELECT port, COUNT(*) FROM app.switch_load GROUP BY port")
        by_port = {str(p): n for p, n in cur.fetchall()}
    return {
        "case": name,
        "galera_row_active": active,
        "loaded": rows,
        "changes": changes,
        "errors": [e for w in writers for e in w.errors][:20],
        "error_count": sum(len(w.errors) for w in writers),
        "rows": sum(w.rows for w in writers),
        "slowest_ms": round(max(w.slowest_ms for w in writers), 1),
        "rows_by_backend_port": by_port,
        "memory": [
            list(r)
            for r in proxy.sql(
                "SELECT hostgroup_id, port, status, weight FROM mysql_servers ORDER BY hostgroup_id, port"
            )
        ],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--workdir", default="/tmp/native-galera-switch")
    parser.add_argument("--out", default=str(REPO / "lab" / "reference" / "native-galera" / "switch.jsonl"))
    parser.add_argument("--quiet", type=float, default=12.0)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument(
        "--inactive", action="store_true", help="load each case with the Galera row inactive (a product's drain)"
    )
    parser.add_argument("--variables-at", type=float, default=None, help="LOAD MYSQL VARIABLES TO RUNTIME at t s")
    args = parser.parse_args()
    lab = GaleraLab()
    with lab.root_connection(1) as conn:
        cur = conn.cursor()
        cur.execute(
            "CREATE TABLE IF NOT EXISTS app.switch_load (id INT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(20), port INT)"
        )
    proxy = RealProxySQL(args.binary, Path(args.workdir), 16432, 16433, name="native-switch")
    try:
        version = proxy.start(fresh=True)
        proxy.sql(
            "DELETE FROM mysql_galera_hostgroups",
            GALERA,
            "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','app',100)",
            "LOAD MYSQL USERS TO RUNTIME",
        )
        with open(args.out, "w") as out:
            out.write(
                json.dumps({"version": version, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}) + "\n"
            )
            for name in args.cases:
                line = run_case(proxy, lab, name, CASES[name], args.quiet, 0 if args.inactive else 1, args.variables_at)
                out.write(json.dumps(line) + "\n")
                out.flush()
                print(json.dumps({k: v for k, v in line.items() if k not in ("loaded", "memory")}), flush=True)
    finally:
        print("proxysql:", proxy.stop())


if __name__ == "__main__":
    main()
