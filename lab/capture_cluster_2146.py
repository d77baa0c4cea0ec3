"""Capture sysown/proxysql #2146 (the hostgroup tables and the mysql_servers sync) on TWO real ProxySQL nodes
(issue 24 §1). Run by hand, never a test:

    .venv/bin/python -m lab.capture_cluster_2146 /path/to/proxysql [--out lab/reference] [--algorithms 1 2 3]

For each value of admin-cluster_mysql_servers_sync_algorithm, a fresh pair a (admin 16332, clients 16333) and b
(16342/16343), datadirs under --workdir, each listing both in proxysql_servers, admin-cluster_username/password set,
every other setting at its default (lab/real_proxysql.py). The algorithm is set on a only (SET + LOAD ADMIN VARIABLES:
it travels to b with admin_variables). The servers name 127.0.0.1:3311-3313 (the Galera lab's ports, never touched);
the galera and replication hostgroup rows name hostgroups 200-203 and 300-301, which hold no server, so ProxySQL's
Monitor moves nothing and every checksum change below is a LOAD or a pull. Steps, each followed by a ~15 s record:

1. a: three servers (hostgroups 100, 101), LOAD: the baseline both nodes share;
2. a: a row in mysql_galera_hostgroups (nothing else changed), LOAD: does b pull it, does diff_check climb;
3. a: mysql_galera_hostgroups emptied again, LOAD;
4. a: a row in mysql_replication_hostgroups, LOAD; then emptied, LOAD;
5. b: a galera row in memory only (no LOAD); a: a weight, LOAD: what b's memory, runtime and disk keep;
6. a and b: different galera rows LOADed within one second (the same epoch: the hostgroup tables differ and neither
   pulls), then a: a weight only, LOAD: what clears it.
A sampler reads both nodes every ~100 ms: runtime_checksums_values and stats_proxysql_servers_checksums for
mysql_servers and mysql_servers_v2, and mysql_servers / mysql_galera_hostgroups / mysql_replication_hostgroups in
runtime, memory and disk; the error log's mysql_servers sync lines. Output (in --out): cluster-2146.jsonl (one line
per node when what it shows changed, `log` lines, `event` lines) and cluster-2146-summary.json. Every process started
here is stopped at the end, also on failure.
"""

import argparse
import json
import os
import platform
import re
import time
from pathlib import Path

import MySQLdb

from lab.capture_cluster_sync import LAYERS, Sampler, settle
from lab.demo_processes import port_is_free
from lab.real_proxysql import RealProxySQL, connect, fetch

REPO = Path(__file__).resolve().parents[1]
NODES = {"a": (16332, 16333), "b": (16342, 16343)}
NAMES = ("mysql_servers", "mysql_servers_v2")
TABLES = {
    "servers": "SELECT hostgroup_id, port, status, weight FROM {}mysql_servers ORDER BY hostgroup_id, port",
    "galera": "SELECT writer_hostgroup, backup_writer_hostgroup, reader_hostgroup, offline_hostgroup, comment "
    "FROM {}mysql_galera_hostgroups ORDER BY writer_hostgroup",
    "replication": "SELECT writer_hostgroup, reader_hostgroup, check_type, comment "
    "FROM {}mysql_replication_hostgroups ORDER BY writer_hostgroup",
}
# The error log lines of the mysql_servers sync (the rest: other modules, "Not syncing yet" of the start).
LOG_LINE = re.compile(
    r"Cluster: (detected a peer .*mysql_servers|Fetch|Fetching|Computed|Writing|Saving|Loading"
    r"|detected a new checksum for mysql_servers)|diff_check is increasing|Sync conflict"
)
SERVERS = [(100, 3311, 1000), (101, 3312, 1000), (101, 3313, 1000)]


def galera_row(comment, writer=200):
    return (
        f"INSERT INTO mysql_galera_hostgroups (writer_hostgroup, backup_writer_hostgroup, reader_hostgroup, "
        f"offline_hostgroup, active, max_writers, writer_is_also_reader, max_transactions_behind, comment) "
        f"VALUES ({writer}, {writer + 1}, {writer + 2}, {writer + 3}, 1, 1, 0, 100, '{comment}')"
    )


class Sampler2146(Sampler):
    """capture_cluster_sync's sampler (every ~70 ms there; the period is its own), reading the hostgroup tables
    of the mysql_servers module in every layer, both checksum names, and the new lines of each node's log."""

    def __init__(self, nodes, out, t0):
        super().__init__(nodes, out, t0)
        self.log_pos = {}

    def read(self, name, port):
        if name not in self.conns:
            self.conns[name] = connect(port, timeout=1)
        conn = self.conns[name]
        names = ", ".join(f"'{n}'" for n in NAMES)
        line = {}
        for layer, prefix in LAYERS.items():
            line[layer] = {t: fetch(conn, sql.format(prefix)) for t, sql in TABLES.items()}
        line["checksum"] = fetch(
            conn,
            f"SELECT name, version, epoch, checksum FROM runtime_checksums_values "
            f"WHERE name IN ({names}) ORDER BY name",
        )
        line["peers"] = fetch(
            conn,
            f"SELECT port, name, version, epoch, checksum, diff_check "
            f"FROM stats_proxysql_servers_checksums WHERE name IN ({names}) ORDER BY port, name",
        )
        self.read_log(name)
        return line

    def read_log(self, name):
        path = self.nodes[name].datadir / "stdout.log"
        try:
            with open(path, "rb") as f:
                f.seek(self.log_pos.get(name, 0))
                data = f.read()
        except OSError:
            return
        end = data.rfind(b"\n") + 1
        self.log_pos[name] = self.log_pos.get(name, 0) + end
        for raw in data[:end].decode(errors="replace").splitlines():
            if LOG_LINE.search(raw):
                self.write({"t": self.now(), "node": name, "log": raw[20:] if raw[:2] == "20" else raw})


def layers(node):
    return {layer: {t: node.sql(sql.format(prefix)) for t, sql in TABLES.items()} for layer, prefix in LAYERS.items()}


def state(nodes):
    """Each node's own checksums and what it sees of the other (diff_check)."""
    out = {}
    for k, n in nodes.items():
        out[k] = {
            "own": n.sql(
                "SELECT name, version, epoch, checksum FROM runtime_checksums_values "
                "WHERE name IN ('mysql_servers','mysql_servers_v2') ORDER BY name"
            ),
            "seen": n.sql(
                "SELECT port, name, version, epoch, checksum, diff_check FROM "
                "stats_proxysql_servers_checksums WHERE name IN ('mysql_servers','mysql_servers_v2') "
                "AND port<>%d ORDER BY name" % n.admin_port
            ),
        }
    return out


def watch(nodes, seconds):
    """Poll every 100 ms for `seconds`: when each node's own (mysql_servers, mysql_servers_v2) checksums first equal
    the other's and stay so, and the highest diff_check each saw for the other per name."""
    t0 = time.monotonic()
    a, b = nodes["a"], nodes["b"]
    equal_since = {n: None for n in NAMES}
    max_diff = {k: {n: 0 for n in NAMES} for k in nodes}
    while time.monotonic() - t0 < seconds:
        st = state(nodes)
        own = {k: {r[0]: r[3] for r in v["own"]} for k, v in st.items()}
        for n in NAMES:
            if own["a"][n] == own["b"][n]:
                if equal_since[n] is None:
                    equal_since[n] = round(time.monotonic() - t0, 2)
            else:
                equal_since[n] = None
        for k, v in st.items():
            for _port, n, _ver, _ep, _cs, diff in v["seen"]:
                max_diff[k][n] = max(max_diff[k][n], int(diff))
        time.sleep(0.1)
    del a, b
    return {"equal_from_s": equal_since, "max_diff_check": max_diff, "end": state(nodes)}


def same_second_loads(x, y, x_sql, y_sql):
    """x's and y's statements and LOADs right after a second boundary, so both LOADs fall in one second."""
    x.sql(*x_sql)
    y.sql(*y_sql)
    while time.time() % 1 > 0.05:
        time.sleep(0.005)
    x.sql("LOAD MYSQL SERVERS TO RUNTIME")
    y.sql("LOAD MYSQL SERVERS TO RUNTIME")
    return round(time.time() % 1, 3)


def run_pair(binary, workdir, algorithm, out, t0, summary):
    peers = {n: admin for n, (admin, _) in NODES.items()}
    nodes = {
        n: RealProxySQL(binary, Path(workdir) / f"algo{algorithm}" / f"node-{n}", admin, client, peers=peers, name=n)
        for n, (admin, client) in NODES.items()
    }
    sampler = Sampler2146(nodes, out, t0)
    res = summary["algorithms"][str(algorithm)] = {}
    try:
        for n in nodes.values():
            summary["version"] = n.start(fresh=True)
        a, b = nodes["a"], nodes["b"]
        sampler.event(f"algorithm {algorithm}: two nodes started fresh", version=summary["version"])
        sampler.start()
        time.sleep(2)
        if algorithm != 1:
            a.sql(f"SET admin-cluster_mysql_servers_sync_algorithm={algorithm}", "LOAD ADMIN VARIABLES TO RUNTIME")
            sampler.event(f"0. a: admin-cluster_mysql_servers_sync_algorithm={algorithm}, LOAD ADMIN VARIABLES")
            time.sleep(6)
        res["algorithm_runtime"] = {
            k: n.sql(
                "SELECT variable_value FROM runtime_global_variables WHERE "
                "variable_name='admin-cluster_mysql_servers_sync_algorithm'"
            )[0][0]
            for k, n in nodes.items()
        }
        sampler.event("0. algorithm in runtime", nodes=res["algorithm_runtime"])

        def step(key, text, statements, seconds=8, keep_layers=False, before=()):
            """settle, (`before` on b,) `statements` and a LOAD on a; the pair watched `seconds`."""
            settle()
            if before:
                b.sql(*before)
            a.sql(*statements, "LOAD MYSQL SERVERS TO RUNTIME")
            sampler.event(f"{text}, LOAD MYSQL SERVERS TO RUNTIME")
            res[key] = watch(nodes, seconds)
            if keep_layers:
                res[key]["layers"] = {k: layers(n) for k, n in nodes.items()}

        step(
            "1_servers",
            "1. a: three servers",
            ["DELETE FROM mysql_servers"]
            + [
                f"INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight) VALUES ({hg}, '127.0.0.1', {p}, {w})"
                for hg, p, w in SERVERS
            ],
        )
        step("2_galera_on_a", "2. a: a mysql_galera_hostgroups row only", [galera_row("from a")], 15, True)
        step("3_galera_emptied", "3. a: mysql_galera_hostgroups emptied", ["DELETE FROM mysql_galera_hostgroups"])
        step(
            "4_replication_on_a",
            "4. a: a mysql_replication_hostgroups row only",
            [
                "INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup, comment) "
                "VALUES (300, 301, 'from a')"
            ],
            15,
            True,
        )
        step(
            "4_replication_emptied",
            "4. a: mysql_replication_hostgroups emptied",
            ["DELETE FROM mysql_replication_hostgroups"],
        )
        step(
            "5_weight_b_memory_differs",
            "5. b: a galera row in memory (no LOAD); a: weight 1005",
            ["UPDATE mysql_servers SET weight=1005 WHERE port=3312"],
            8,
            True,
            before=[galera_row("b memory only", writer=210)],
        )

        for attempt in range(1, 4):  # on a busy machine the two LOADs can straddle a second: then b's is newer
            settle()
            frac = same_second_loads(
                a,
                b,
                ["DELETE FROM mysql_galera_hostgroups", galera_row("a same second")],
                ["DELETE FROM mysql_galera_hostgroups", galera_row("b same second", writer=220)],
            )
            epochs = [n.checksum("mysql_servers_v2")[1] for n in (a, b)]
            sampler.event(
                "6. a and b: different galera rows, LOAD MYSQL SERVERS TO RUNTIME in one second",
                frac=frac,
                epochs=epochs,
                attempt=attempt,
            )
            if epochs[0] == epochs[1]:
                break
            time.sleep(5)  # the newer one is pulled; then again
        res["6_attempts"] = attempt
        res["6_same_second_galera"] = watch(nodes, 15)
        res["6_same_second_galera"]["layers"] = {k: layers(n) for k, n in nodes.items()}
        settle()
        a.sql("UPDATE mysql_servers SET weight=1006 WHERE port=3312", "LOAD MYSQL SERVERS TO RUNTIME")
        sampler.event("6. a: weight 1006 (galera rows still differ), LOAD MYSQL SERVERS TO RUNTIME")
        res["6_then_weight_on_a"] = watch(nodes, 10)
        res["6_then_weight_on_a"]["layers"] = {k: layers(n) for k, n in nodes.items()}
        time.sleep(0.5)
    finally:
        sampler.stopping.set()
        if sampler.is_alive():
            sampler.join(2)
        for conn in sampler.conns.values():
            try:
                conn.close()
            except MySQLdb.Error:
                pass
        for n in nodes.values():
            sampler.event(f"{n.name}: stopped", how=n.stop())
    res["pull_log"] = {
        k: [
            ln.split("[INFO] ", 1)[-1]
            for ln in (n.datadir / "stdout.log").read_text(errors="replace").splitlines()
            if "Fetch mysql_servers_v2:" in ln
            or "Fetching 'MySQL Servers' from peer" in ln
            or "Fetching MySQL Servers v2 from peer" in ln
        ]
        for k, n in nodes.items()
    }


def run(binary, workdir, out_dir, algorithms):
    busy = [p for ports in NODES.values() for p in ports if not port_is_free(p)]
    if busy:
        raise SystemExit(f"ports in use: {busy}")
    summary = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "algorithms": {},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "cluster-2146.jsonl", "w") as out:
        t0 = time.monotonic()
        for algorithm in algorithms:
            run_pair(binary, workdir, algorithm, out, t0, summary)
    (out_dir / "cluster-2146-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    for algorithm, res in summary["algorithms"].items():
        print(
            algorithm,
            {
                k: (v.get("equal_from_s"), v.get("max_diff_check"))
                for k, v in res.items()
                if isinstance(v, dict) and "equal_from_s" in v
            },
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--workdir", default="/tmp/c2146")
    parser.add_argument("--out", default=str(REPO / "lab" / "reference"))
    parser.add_argument("--algorithms", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    run(args.binary, args.workdir, Path(args.out), args.algorithms)


if __name__ == "__main__":
    main()
