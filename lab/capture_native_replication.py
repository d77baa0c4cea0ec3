"""Capture what ProxySQL's Monitor does to runtime_mysql_servers with a mysql_replication_hostgroups row (issue 33 §4).
Run by hand, never a test, in a network namespace of its own over the replication lab of a lab set:

    LAB_SET=h-native unshare --net sh -c 'ip link set lo up && .venv/bin/python -m lab.replication up &&
        .venv/bin/python -m lab.capture_native_replication ../shared/proxysql/2.7.1/proxysql;
        .venv/bin/python -m lab.replication down'

One real ProxySQL (admin 16432, clients 16433; lab/real_proxysql.py: monitor user monitor/monitor, every Monitor
setting at its default: read_only check every 1500 ms, mysql-monitor_writer_is_also_reader true) over the lab's
primary (node 1) and two replicas. Each case starts from the healthy lab (node 1 primary, read_only OFF; nodes 2, 3
read_only ON): DELETE the servers and replication rows, the case's servers (by default node 1 in the writer hostgroup
10 and the replicas in the reader hostgroup 20, weight 1000) and one replication row (10, 20, the case's check_type),
the case's mysql- variables (LOADed), LOAD MYSQL SERVERS TO RUNTIME; then the backend action if any, while a sampler
(its own connection) reads runtime_mysql_servers every 100 ms until the action has returned and the placement has
not changed for `--quiet` seconds (default 6, four checks) or 60 s passed. Output (--out, default
lab/reference/native-replication/): capture.jsonl, one line per case: the case, its replication row in the three
layers, the placement after the LOAD and each change after the action with its time since the action began (`t`),
the final runtime, memory and disk rows, Monitor's mysql_server_read_only_log rows from the action on (or the last
per backend), and the backends' read_only as the lab reads them at the end. Every lab state changed is undone
(heal: node 1 primary again) and the ProxySQL process stopped, also on failure.
"""

import argparse
import json
import threading
import time
from contextlib import closing
from pathlib import Path

from lab.real_proxysql import RealProxySQL, connect, fetch
from lab.replication import ReplicationLab

REPO = Path(__file__).resolve().parents[1]
WRITER, READER = 10, 20
SERVERS_SQL = "SELECT hostgroup_id, port, status, weight FROM {}mysql_servers ORDER BY hostgroup_id, port"
REPLICATION_SQL = "SELECT writer_hostgroup, reader_hostgroup, check_type, comment FROM {}mysql_replication_hostgroups"

# name: (check_type, servers [(hostgroup, node)] or None for node 1 in the writer and 2, 3 in the reader hostgroup,
#        {mysql- variable: value} set for the case, backend action or None)
CASES = {
    "split": ("read_only", None, {}, None),
    "all_in_writer": ("read_only", [(WRITER, 1), (WRITER, 2), (WRITER, 3)], {}, None),
    "all_in_reader": ("read_only", [(READER, 1), (READER, 2), (READER, 3)], {}, None),
    "writer_is_also_reader_false": ("read_only", None, {"mysql-monitor_writer_is_also_reader": "false"}, None),
    "replica3_writable": ("read_only", None, {}, "read_only_off 3"),
    "writer_read_only": ("read_only", None, {}, "read_only_on 1"),
    "promote2": ("read_only", None, {}, "promote 2"),
    "promote2_writer_is_also_reader_false": (
        "read_only",
        None,
        {"mysql-monitor_writer_is_also_reader": "false"},
        "promote 2",
    ),
    "writer_killed": ("read_only", None, {}, "kill 1"),
    "check_innodb_read_only": ("innodb_read_only", None, {}, None),
    "check_super_read_only": ("super_read_only", None, {}, None),
    "check_read_only_or_innodb": ("read_only|innodb_read_only", None, {}, None),
}


def rows(conn, prefix=""):
    return fetch(conn, SERVERS_SQL.format(prefix))


class Sampler(threading.Thread):
    """runtime_mysql_servers every 100 ms on its own connection: its changes [{t, runtime}] from `t0`, until `done`
    is set and nothing changed for `quiet` s, or `limit` s passed."""

    def __init__(self, port, quiet, limit=60.0):
        super().__init__(daemon=True)
        self.conn, self.quiet, self.limit = connect(port), quiet, limit
        self.done, self.changes, self.t0 = threading.Event(), [], time.monotonic()

    def run(self):
        last, since = None, self.t0
        with closing(self.conn):
            while time.monotonic() - self.t0 < self.limit:
                now = rows(self.conn, "runtime_")
                if now != last:
                    self.changes.append({"t": round(time.monotonic() - self.t0, 2), "runtime": now})
                    last, since = now, time.monotonic()
                elif self.done.is_set() and time.monotonic() - since >= self.quiet:
                    break
                time.sleep(0.1)


def watch(port, quiet, action=None):
    sampler = Sampler(port, quiet)
    sampler.start()
    try:
        if action:
            action()
    finally:
        sampler.done.set()
        sampler.join()
    return sampler.changes


def backend_sql(lab, n, statement):
    with closing(lab.root_connection(n)) as conn:
        conn.cursor().execute(statement)


def act(lab, action):
    what, n = action.split()
    n = int(n)
    return {
        "read_only_on": lambda: backend_sql(lab, n, "SET GLOBAL read_only=ON"),
        "read_only_off": lambda: backend_sql(lab, n, "SET GLOBAL read_only=OFF"),
        "promote": lambda: lab.promote(n),
        "kill": lambda: lab.kill(n),
    }[what]


def run_case(proxy, lab, name, check_type, servers, variables, action, quiet):
    port = {n: lab.node(n).port for n in (1, 2, 3)}
    proxy.sql(
        "DELETE FROM mysql_servers",
        "DELETE FROM mysql_replication_hostgroups",
        f"INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup, check_type, comment) "
        f"VALUES ({WRITER}, {READER}, '{check_type}', 'capture')",
    )
    for hg, n in servers or [(WRITER, 1), (READER, 2), (READER, 3)]:
        proxy.sql(
            f"INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight) "
            f"VALUES ({hg}, '127.0.0.1', {port[n]}, 1000)"
        )
    defaults = {}
    for var, value in variables.items():
        defaults[var] = proxy.sql(f"SELECT variable_value FROM global_variables WHERE variable_name='{var}'")[0][0]
        proxy.sql(f"UPDATE global_variables SET variable_value='{value}' WHERE variable_name='{var}'")
    if variables:
        proxy.sql("LOAD MYSQL VARIABLES TO RUNTIME")
    out = {"case": name, "check_type": check_type, "variables": variables, "memory_configured": rows(proxy.conn)}
    out["after_load"] = watch(proxy.admin_port, quiet, lambda: proxy.sql("LOAD MYSQL SERVERS TO RUNTIME"))
    out["replication"] = {
        layer: proxy.sql(REPLICATION_SQL.format(prefix))
        for layer, prefix in (("memory", ""), ("runtime", "runtime_"), ("disk", "disk."))
    }
    began_us = int(time.time() * 1e6)
    if action:
        out["action"] = action
        t0 = time.monotonic()
        out["after_action"] = watch(proxy.admin_port, quiet, act(lab, action))
        out["action_took_s"] = round(time.monotonic() - t0, 2)
    out["final"] = {
        "runtime": rows(proxy.conn, "runtime_"),
        "memory": rows(proxy.conn),
        "disk": rows(proxy.conn, "disk."),
    }
    out["read_only_log"] = proxy.sql(
        f"SELECT port, time_start_us, success_time_us, read_only, error FROM monitor.mysql_server_read_only_log "
        f"WHERE time_start_us >= {began_us} ORDER BY time_start_us, port"
        if action
        else "SELECT port, time_start_us, success_time_us, read_only, error FROM monitor.mysql_server_read_only_log "
        "WHERE (port, time_start_us) IN (SELECT port, MAX(time_start_us) FROM monitor.mysql_server_read_only_log "
        "GROUP BY port) ORDER BY port"
    )
    out["backends_read_only"] = {}
    for n in (1, 2, 3):
        try:
            with closing(lab.root_connection(n, timeout=1, read_timeout=5)) as conn:
                cur = conn.cursor()
                cur.execute("SELECT @@read_only, @@innodb_read_only")
                out["backends_read_only"][port[n]] = list(cur.fetchone())
        except Exception as e:  # a killed node: say so
            out["backends_read_only"][port[n]] = str(e)
    for var, value in defaults.items():
        proxy.sql(f"UPDATE global_variables SET variable_value='{value}' WHERE variable_name='{var}'")
    if defaults:
        proxy.sql("LOAD MYSQL VARIABLES TO RUNTIME")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--workdir", default="/tmp/native-replication")
    parser.add_argument("--out", default=str(REPO / "lab" / "reference" / "native-replication"))
    parser.add_argument("--quiet", type=float, default=6.0)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    lab = ReplicationLab()
    proxy = RealProxySQL(args.binary, Path(args.workdir), 16432, 16433, name="native")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        version = proxy.start(fresh=True)
        with open(out_dir / "capture.jsonl", "w") as out:
            out.write(
                json.dumps(
                    {
                        "version": version,
                        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                        "ports": {n: lab.node(n).port for n in (1, 2, 3)},
                        "monitor": proxy.sql(
                            "SELECT variable_name, variable_value FROM global_variables WHERE variable_name "
                            "LIKE 'mysql-monitor_read_only%' OR variable_name IN "
                            "('mysql-monitor_writer_is_also_reader', 'mysql-monitor_enabled')"
                        ),
                    }
                )
                + "\n"
            )
            for name in args.cases:
                try:
                    line = run_case(proxy, lab, name, *CASES[name], args.quiet)
                finally:
                    lab.heal()
                out.write(json.dumps(line, default=str) + "\n")
                out.flush()
                last = (line.get("after_action") or line["after_load"])[-1]
                print(name, "settled at", last["t"], "s:", last["runtime"], flush=True)
    finally:
        print("proxysql:", proxy.stop())


if __name__ == "__main__":
    main()
