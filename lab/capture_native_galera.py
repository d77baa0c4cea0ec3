"""Capture what ProxySQL's Monitor does to runtime_mysql_servers with a mysql_galera_hostgroups row (issue 33 §4).
Run by hand, never a test, in a network namespace of its own over the Galera lab of a lab set:

    LAB_SET=h-native unshare --net sh -c 'ip link set lo up && .venv/bin/python -m lab.galera up &&
        .venv/bin/python -m lab.capture_native_galera ../shared/proxysql/2.7.1/proxysql; .venv/bin/python -m lab.galera down'

One real ProxySQL (admin 16432, clients 16433; lab/real_proxysql.py: monitor user monitor/monitor, every Monitor
setting at its default: galera healthcheck every 5000 ms) over the three Galera nodes (3311-3313). Each case starts
from a healthy cluster: DELETE the servers and galera rows, the case's servers (all three in the writer hostgroup
100, weights 1000/900/800 unless said) and one galera row (writer 100, backup writer 102, reader 101, offline 9101,
active 1, max_transactions_behind 100), LOAD MYSQL SERVERS TO RUNTIME; then the backend action if any. A sampler reads
runtime_mysql_servers every 100 ms until it has not changed for `--quiet` seconds (default 12, over two healthchecks)
or 60 s passed. Output (--out, default lab/reference/native-galera/): capture.jsonl, one line per case: the case,
its galera row, the placement before the action and each change of it with its time since the LOAD or the action
(`t`), the final runtime, memory (main) and disk rows, and the last mysql_server_galera_log row per backend.
Every node state changed here is restored (read_only, wsrep_desync OFF; a stopped node started again) and the
ProxySQL process stopped, also on failure.
"""

import argparse
import json
import time
from contextlib import closing
from pathlib import Path

from lab.galera import GaleraLab
from lab.real_proxysql import RealProxySQL

REPO = Path(__file__).resolve().parents[1]
WRITER, READER, BACKUP, OFFLINE = 100, 101, 102, 9101
WEIGHTS = {3311: 1000, 3312: 900, 3313: 800}
SERVERS_SQL = "SELECT hostgroup_id, port, status, weight FROM {}mysql_servers ORDER BY hostgroup_id, port"


def galera_row(max_writers=1, writer_is_also_reader=0):
    return (
        f"INSERT INTO mysql_galera_hostgroups (writer_hostgroup, backup_writer_hostgroup, reader_hostgroup, "
        f"offline_hostgroup, active, max_writers, writer_is_also_reader, max_transactions_behind, comment) "
        f"VALUES ({WRITER}, {BACKUP}, {READER}, {OFFLINE}, 1, {max_writers}, {writer_is_also_reader}, 100, "
        f"'capture')"
    )


# name: (galera row kwargs, servers [(hostgroup, port, weight)] or None for all three in the writer hostgroup,
#        backend action (node number, what) or None)
CASES = {
    "wiar0": ({"writer_is_also_reader": 0}, None, None),
    "wiar1": ({"writer_is_also_reader": 1}, None, None),
    "wiar2": ({"writer_is_also_reader": 2}, None, None),
    "max_writers2_wiar1": ({"max_writers": 2, "writer_is_also_reader": 1}, None, None),
    "wiar1_servers_in_reader_hg": (
        {"writer_is_also_reader": 1},
        [(WRITER, 3311, 1000), (READER, 3312, 1000), (READER, 3313, 1000)],
        None,
    ),
    "wiar1_read_only_node3": ({"writer_is_also_reader": 1}, None, (3, "read_only")),
    "wiar1_read_only_writer": ({"writer_is_also_reader": 1}, None, (1, "read_only")),
    "wiar1_desync_node2": ({"writer_is_also_reader": 1}, None, (2, "desync")),
    "wiar1_desync_writer": ({"writer_is_also_reader": 1}, None, (1, "desync")),
    "wiar1_reject_queries_node3": ({"writer_is_also_reader": 1}, None, (3, "reject_queries")),
    "wiar1_writer_stopped": ({"writer_is_also_reader": 1}, None, (1, "stop")),
    "wiar0_writer_stopped": ({"writer_is_also_reader": 0}, None, (1, "stop")),
}
ACTIONS = {
    "read_only": ("SET GLOBAL read_only=ON", "SET GLOBAL read_only=OFF"),
    "desync": ("SET GLOBAL wsrep_desync=ON", "SET GLOBAL wsrep_desync=OFF"),
    "reject_queries": ("SET GLOBAL wsrep_reject_queries=ALL", "SET GLOBAL wsrep_reject_queries=NONE"),
}


def rows(node, prefix=""):
    return [list(r) for r in node.sql(SERVERS_SQL.format(prefix))]


def watch(node, quiet, limit=60.0):
    """The placement's changes from now: [(t, rows)], until unchanged for `quiet` s or `limit` s passed."""
    t0 = time.monotonic()
    last, changes, since = None, [], t0
    while time.monotonic() - t0 < limit:
        now = rows(node, "runtime_")
        if now != last:
            changes.append({"t": round(time.monotonic() - t0, 2), "runtime": now})
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.1)
    return changes


def backend_sql(lab, n, statement):
    with closing(lab.root_connection(n)) as conn:
        conn.cursor().execute(statement)


def run_case(proxy, lab, name, row, servers, action, quiet):
    proxy.sql("DELETE FROM mysql_servers", "DELETE FROM mysql_galera_hostgroups", galera_row(**row))
    for hg, port, weight in servers or [(WRITER, p, w) for p, w in WEIGHTS.items()]:
        proxy.sql(
            f"INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight) "
            f"VALUES ({hg}, '127.0.0.1', {port}, {weight})"
        )
    proxy.sql("LOAD MYSQL SERVERS TO RUNTIME")
    out = {
        "case": name,
        "galera": proxy.sql("SELECT * FROM runtime_mysql_galera_hostgroups"),
        "memory_configured": rows(proxy),
        "after_load": watch(proxy, quiet),
    }
    if action:
        n, what = action
        began = time.monotonic()
        if what == "stop":
            out["stop_s"] = round(lab.stop(n), 2)
        else:
            backend_sql(lab, n, ACTIONS[what][0])
        out["action"] = f"node{n} {what}"
        out["after_action"] = watch(proxy, quiet)
        out["action_took_s"] = round(time.monotonic() - began, 2)
        if what == "stop":
            out["start"] = lab.start(n)
        else:
            backend_sql(lab, n, ACTIONS[what][1])
            lab.wait_synced(n)
        out["after_restore"] = watch(proxy, quiet)
    out["final"] = {"runtime": rows(proxy, "runtime_"), "memory": rows(proxy), "disk": rows(proxy, "disk.")}
    out["galera_log"] = proxy.sql(
        "SELECT port, time_start_us, success_time_us, primary_partition, read_only, wsrep_local_recv_queue, "
        "wsrep_local_state, wsrep_desync, wsrep_reject_queries, wsrep_sst_donor_rejects_queries, pxc_maint_mode, "
        "error FROM monitor.mysql_server_galera_log WHERE (port, time_start_us) IN "
        "(SELECT port, MAX(time_start_us) FROM monitor.mysql_server_galera_log GROUP BY port) ORDER BY port"
    )
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--workdir", default="/tmp/native-galera")
    parser.add_argument("--out", default=str(REPO / "lab" / "reference" / "native-galera"))
    parser.add_argument("--quiet", type=float, default=12.0)
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    args = parser.parse_args()
    lab = GaleraLab()
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
                        "monitor": proxy.sql(
                            "SELECT variable_name, variable_value FROM global_variables "
                            "WHERE variable_name LIKE 'mysql-monitor_galera%'"
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
