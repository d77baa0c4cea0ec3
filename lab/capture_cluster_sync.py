"""Capture ProxySQL Cluster (native sync) on THREE real ProxySQL nodes (issue 24 §1). Run by hand, never a test:

    .venv/bin/python -m lab.capture_cluster_sync /path/to/proxysql [--out lab/reference] [--loads 3]

Starts three ProxySQL processes of its own (datadirs under --workdir, admin 16232/16242/16252, clients
16233/16243/16253, each its own process group), all listed in each one's proxysql_servers, with
admin-cluster_username/password, in front of the Galera lab's 127.0.0.1:3311-3313 (only named as backends; the lab
is never changed). Node a is the origin of changes unless said otherwise. Steps:

1. every module: --loads LOADs on a of mysql_servers, mysql_users, mysql_query_rules, mysql_variables,
   admin_variables and proxysql_servers, never saved on a: when each peer's runtime checksum equals a's (from the
   end of the LOAD statement), and what b's and c's runtime, memory and disk hold then;
2. admin-cluster_mysql_servers_save_to_disk=false on c: a LOAD on a, what c keeps on disk (and whether that admin
   variable itself travels to the peers);
3. restarts: c stopped (SIGTERM) while a changes, started from its datadir without --initial: its versions, whether
   it pulls; then all three restarted with different disks (c's is stale from 2): versions 1 everywhere, nobody
   pulls until a LOAD on a;
4. admin-cluster_mysql_servers_diffs_before_sync=0 on b (the hold): a LOAD on a, c pulls and b does not; restored
   to 3 on b, when b pulls.
A sampler reads every node every ~70 ms over its own connections: the module's runtime, memory and disk rows,
runtime_checksums_values and stats_proxysql_servers_checksums of the module. Output (in --out):
cluster-sync-3node.jsonl, one line per node whenever what it shows changed (`t` seconds since start), `event`
lines for each step, and cluster-sync-3node-summary.json with the measured times. Every process started here is
stopped at the end, also on failure.
"""

import argparse
import json
import os
import platform
import statistics
import threading
import time
from pathlib import Path

import MySQLdb

from lab.demo_processes import port_is_free
from lab.real_proxysql import RealProxySQL, connect, fetch

REPO = Path(__file__).resolve().parents[1]
NODES = {"a": (16232, 16233), "b": (16242, 16243), "c": (16252, 16253)}
BACKENDS = (3311, 3312, 3313)
# Per module: its LOAD statement, the checksum names it moves, the SQL of its rows in one layer ({} is the table's
# schema prefix: "runtime_", "main.", "disk.") and a change that differs on every call (n; origin_port: the admin port
# of the node it is made on, whose own proxysql_servers row it changes).
MODULES = {
    "mysql_servers": {
        "load": "LOAD MYSQL SERVERS TO RUNTIME",
        "names": ["mysql_servers", "mysql_servers_v2"],
        "rows": "SELECT hostgroup_id, port, status, weight FROM {layer}mysql_servers ORDER BY hostgroup_id, port",
        "change": lambda n, origin_port: (
            ["DELETE FROM mysql_servers"]
            + [
                f"INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight) VALUES ({hg}, '127.0.0.1', {p}, {w})"
                for hg, p, w in ((100, 3311, 1000), (101, 3312, 1000 + n), (101, 3313, 1000))
            ]
        ),
    },
    "mysql_users": {
        "load": "LOAD MYSQL USERS TO RUNTIME",
        "names": ["mysql_users"],
        "rows": "SELECT username, active, default_hostgroup, frontend, backend FROM {layer}mysql_users "
        "ORDER BY username, frontend",
        "change": lambda n, origin_port: [
            "DELETE FROM mysql_users",
            f"INSERT INTO mysql_users (username, password, default_hostgroup) "
            f"VALUES ('capture', 'capture', {100 + n % 2})",
        ],
    },
    "mysql_query_rules": {
        "load": "LOAD MYSQL QUERY RULES TO RUNTIME",
        "names": ["mysql_query_rules"],
        "rows": "SELECT rule_id, active, match_digest, destination_hostgroup FROM {layer}mysql_query_rules "
        "ORDER BY rule_id",
        "change": lambda n, origin_port: [
            "DELETE FROM mysql_query_rules",
            f"INSERT INTO mysql_query_rules (rule_id, active, match_digest, destination_hostgroup,"
            f" apply) VALUES (10, 1, '^SELECT {n}', 101, 1)",
        ],
    },
    "mysql_variables": {
        "load": "LOAD MYSQL VARIABLES TO RUNTIME",
        "names": ["mysql_variables"],
        "rows": "SELECT variable_name, variable_value FROM {layer}global_variables "
        "WHERE variable_name='mysql-max_connections'",
        "change": lambda n, origin_port: [f"SET mysql-max_connections={2000 + n}"],
    },
    "admin_variables": {
        "load": "LOAD ADMIN VARIABLES TO RUNTIME",
        "names": ["admin_variables"],
        "rows": "SELECT variable_name, variable_value FROM {layer}global_variables "
        "WHERE variable_name IN ('admin-refresh_interval', 'admin-cluster_mysql_servers_diffs_before_sync',"
        " 'admin-cluster_mysql_servers_save_to_disk') ORDER BY variable_name",
        "change": lambda n, origin_port: [f"SET admin-refresh_interval={2000 + n}"],
    },
    "proxysql_servers": {
        "load": "LOAD PROXYSQL SERVERS TO RUNTIME",
        "names": ["proxysql_servers"],
        "rows": "SELECT hostname, port, weight, comment FROM {layer}proxysql_servers ORDER BY port",
        "change": lambda n, origin_port: [f"UPDATE proxysql_servers SET weight={n} WHERE port={origin_port}"],
    },
}
LAYERS = {"runtime": "runtime_", "memory": "main.", "disk": "disk."}


class Sampler(threading.Thread):
    """Reads every node every ~70 ms on its own connections; writes a node's line when what it shows changed."""

    def __init__(self, nodes, out, t0):
        super().__init__(daemon=True)
        self.nodes, self.out, self.t0 = nodes, out, t0
        self.module = "mysql_servers"
        self.conns, self.last = {}, {}
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    def now(self):
        return round(time.monotonic() - self.t0, 3)

    def write(self, line):
        with self.lock:
            self.out.write(json.dumps(line) + "\n")

    def event(self, text, **extra):
        self.write({"t": self.now(), "event": text, **extra})
        print(f"{self.now():8.2f} {text} {extra or ''}", flush=True)

    def read(self, name, port):
        spec = MODULES[self.module]
        if name not in self.conns:
            self.conns[name] = connect(port, timeout=1)
        conn = self.conns[name]
        names = ", ".join(f"'{n}'" for n in spec["names"])
        line = {"module": self.module}
        for layer, prefix in LAYERS.items():
            line[layer] = fetch(conn, spec["rows"].format(layer=prefix))
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
        return line

    def run(self):
        while not self.stopping.is_set():
            for name, node in self.nodes.items():
                try:
                    line = self.read(name, node.admin_port)
                except MySQLdb.Error:
                    self.conns.pop(name, None)
                    line = {"module": self.module, "down": True}
                if line != self.last.get(name):
                    self.last[name] = line
                    self.write({"t": self.now(), "node": name, **line})
            time.sleep(0.07)


def wait_converged(nodes, origin, module, t_load, timeout=10.0, skip=()):
    """Seconds from t_load until each peer's runtime checksum of the module equals the origin's (None: not by
    timeout). Peers read every 20 ms on the main thread's connections."""
    name = MODULES[module]["names"][0]
    target = origin.checksum(name)[2]
    pulled = {}
    peers = [n for n in nodes.values() if n is not origin and n.name not in skip]
    while time.monotonic() - t_load < timeout and len(pulled) < len(peers):
        for p in peers:
            if p.name not in pulled and p.checksum(name)[2] == target:
                pulled[p.name] = round(time.monotonic() - t_load, 3)
        time.sleep(0.02)
    return {p.name: pulled.get(p.name) for p in peers}


def layers(node, module):
    return {layer: node.sql(MODULES[module]["rows"].format(layer=prefix)) for layer, prefix in LAYERS.items()}


def change(node, module, n):
    """The module's change on node, then its LOAD; returns the monotonic time the LOAD returned."""
    spec = MODULES[module]
    node.sql(*spec["change"](n, node.admin_port))
    node.sql(spec["load"])
    return time.monotonic()


def settle(seconds=1.2):
    """Wait past the current second: two LOADs in one second share an epoch (README, cluster facts)."""
    time.sleep(seconds)


def run(binary, workdir, out_dir, loads):
    peers = {n: admin for n, (admin, _) in NODES.items()}
    nodes = {
        n: RealProxySQL(binary, Path(workdir) / f"node-{n}", admin, client, peers=peers, name=n)
        for n, (admin, client) in NODES.items()
    }
    busy = [p for ports in NODES.values() for p in ports if not port_is_free(p)]
    if busy:
        raise SystemExit(f"ports in use: {busy}")
    summary = {
        "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "loads": loads,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / "cluster-sync-3node.jsonl", "w") as out:
        t0 = time.monotonic()
        sampler = Sampler(nodes, out, t0)
        try:
            for n in nodes.values():
                summary["version"] = n.start(fresh=True)
            sampler.event("three nodes started fresh", version=summary["version"])
            summary["checksum_names"] = [r[0] for r in nodes["a"].sql("SELECT name FROM runtime_checksums_values")]
            summary["fresh_versions"] = {
                k: n.sql("SELECT name, version FROM runtime_checksums_values") for k, n in nodes.items()
            }
            sampler.start()
            time.sleep(2.5)
            a, b, c = nodes["a"], nodes["b"], nodes["c"]

            # 1. every module, LOADs on a, never saved there
            summary["propagation"] = {}
            for module in MODULES:
                sampler.module = module
                times = []
                for i in range(loads):
                    settle()
                    t_load = change(a, module, i + 1)
                    sampler.event(f"1. a: {module} change {i + 1}, LOAD (no SAVE)")
                    got = wait_converged(nodes, a, module, t_load)
                    sampler.event(f"1. {module} pulled", seconds=got)
                    times.append(got)
                    time.sleep(0.3)  # the peers' save to disk follows their LOAD
                summary["propagation"][module] = {
                    "seconds": times,
                    "peer_layers_after": {k: layers(n, module) for k, n in nodes.items()},
                }

            # 2. save_to_disk=false on c
            sampler.module = "admin_variables"
            settle()
            c.sql("SET admin-cluster_mysql_servers_save_to_disk='false'", "LOAD ADMIN VARIABLES TO RUNTIME")
            sampler.event("2. c: admin-cluster_mysql_servers_save_to_disk=false, LOAD ADMIN VARIABLES")
            time.sleep(5)
            summary["save_to_disk_travels"] = {
                k: n.sql(
                    "SELECT variable_value FROM runtime_global_variables "
                    "WHERE variable_name='admin-cluster_mysql_servers_save_to_disk'"
                )[0][0]
                for k, n in nodes.items()
            }
            sampler.module = "mysql_servers"
            settle()
            t_load = change(a, "mysql_servers", 50)
            sampler.event("2. a: mysql_servers change 50, LOAD")
            got = wait_converged(nodes, a, "mysql_servers", t_load)
            time.sleep(1.0)
            sampler.event("2. pulled", seconds=got)
            summary["save_to_disk_false"] = {
                "seconds": got,
                "layers": {k: layers(n, "mysql_servers") for k, n in nodes.items()},
            }

            # 4. the hold: diffs_before_sync=0 on b for mysql_servers
            settle()
            b.sql("SET admin-cluster_mysql_servers_diffs_before_sync=0", "LOAD ADMIN VARIABLES TO RUNTIME")
            sampler.event("4. b: admin-cluster_mysql_servers_diffs_before_sync=0, LOAD ADMIN VARIABLES")
            time.sleep(5)
            summary["diffs_0_travels"] = {
                k: n.sql(
                    "SELECT variable_value FROM runtime_global_variables "
                    "WHERE variable_name='admin-cluster_mysql_servers_diffs_before_sync'"
                )[0][0]
                for k, n in nodes.items()
            }
            settle()
            t_load = change(a, "mysql_servers", 60)
            sampler.event("4. a: mysql_servers change 60, LOAD (b holds)")
            held = wait_converged(nodes, a, "mysql_servers", t_load, timeout=8.0)
            sampler.event("4. after 8 s", seconds=held)
            peers_b = b.sql(
                "SELECT port, diff_check FROM stats_proxysql_servers_checksums WHERE name='mysql_servers' ORDER BY port"
            )
            b.sql("SET admin-cluster_mysql_servers_diffs_before_sync=3", "LOAD ADMIN VARIABLES TO RUNTIME")
            t_restore = time.monotonic()
            sampler.event("4. b: diffs_before_sync back to 3, LOAD ADMIN VARIABLES")
            released = wait_converged({"a": a, "b": b}, a, "mysql_servers", t_restore, timeout=10.0)
            sampler.event("4. b pulled after the restore", seconds=released)
            summary["hold"] = {
                "after_8s": held,
                "b_diff_check_while_held": peers_b,
                "b_pulled_after_restore_s": released["b"],
            }
            time.sleep(5)  # the admin variables LOADs settle
            summary["after_hold_diffs"] = {
                k: n.sql(
                    "SELECT variable_value FROM runtime_global_variables "
                    "WHERE variable_name='admin-cluster_mysql_servers_diffs_before_sync'"
                )[0][0]
                for k, n in nodes.items()
            }

            # 3a. restart of one peer (c) while a changes
            sampler.module = "mysql_servers"
            sampler.event("3a. c: SIGTERM", how=c.stop())
            settle()
            t_load = change(a, "mysql_servers", 70)
            sampler.event("3a. a: mysql_servers change 70, LOAD while c is down")
            wait_converged(nodes, a, "mysql_servers", t_load, skip=("c",))
            time.sleep(1.0)
            t_start = time.monotonic()
            c.start(fresh=False)
            up = time.monotonic()
            sampler.event("3a. c: started from its datadir (no --initial)", seconds=round(up - t_start, 3))
            versions = c.sql("SELECT name, version, checksum FROM runtime_checksums_values ORDER BY name")
            pulled = wait_converged({"a": a, "c": c}, a, "mysql_servers", up, timeout=10.0)
            sampler.event("3a. c pulled", seconds=pulled)
            summary["restart_one"] = {
                "versions_at_start": versions,
                "pulled_after_admin_up_s": pulled["c"],
                "versions_after": c.sql("SELECT name, version FROM runtime_checksums_values"),
            }
            time.sleep(1.0)

            # 3b. all three restarted: c's disk is stale (save_to_disk=false on c), versions 1 everywhere
            for n in nodes.values():
                sampler.event(f"3b. {n.name}: SIGTERM", how=n.stop())
            for n in nodes.values():
                n.start(fresh=False)
            t_up = time.monotonic()
            sampler.event("3b. all three started from their datadirs")
            summary["restart_all"] = {
                "versions": {
                    k: n.sql("SELECT name, version, checksum FROM runtime_checksums_values ORDER BY name")
                    for k, n in nodes.items()
                },
                "disk_servers": {k: layers(n, "mysql_servers")["disk"] for k, n in nodes.items()},
            }
            frozen = wait_converged(nodes, a, "mysql_servers", t_up, timeout=10.0)
            sampler.event("3b. 10 s after the restart", seconds=frozen)
            summary["restart_all"]["converged_within_10s"] = frozen
            summary["restart_all"]["diff_check_on_c"] = c.sql(
                "SELECT port, version, diff_check FROM stats_proxysql_servers_checksums "
                "WHERE name='mysql_servers' ORDER BY port"
            )
            # a LOAD on a candidate (a, same memory) lifts its version to 2: it becomes a source
            a.sql("LOAD MYSQL SERVERS TO RUNTIME")
            t_load = time.monotonic()
            sampler.event("3b. a: LOAD MYSQL SERVERS TO RUNTIME (nothing changed)")
            got = wait_converged(nodes, a, "mysql_servers", t_load)
            sampler.event("3b. pulled after the LOAD", seconds=got)
            summary["restart_all"]["after_load_on_a"] = got
            summary["restart_all"]["versions_after"] = {
                k: n.sql("SELECT version, epoch, checksum FROM runtime_checksums_values WHERE name='mysql_servers'")
                for k, n in nodes.items()
            }
            time.sleep(1.0)
        finally:
            sampler.stopping.set()
            if sampler.is_alive():
                sampler.join(2)
            for n in nodes.values():
                print(n.name, n.stop())
    prop = {}
    for module, got in summary.get("propagation", {}).items():
        secs = [s for run_ in got["seconds"] for s in run_.values() if s is not None]
        missing = sum(s is None for run_ in got["seconds"] for s in run_.values())
        prop[module] = {
            "median": round(statistics.median(secs), 3) if secs else None,
            "max": max(secs) if secs else None,
            "min": min(secs) if secs else None,
            "pulls": len(secs),
            "not_pulled_in_10s": missing,
        }
    summary["propagation_table"] = prop
    (out_dir / "cluster-sync-3node-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps(prop, indent=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--workdir", default="/tmp/capture-cluster-sync")
    parser.add_argument("--out", default=str(REPO / "lab" / "reference"))
    parser.add_argument("--loads", type=int, default=3)
    args = parser.parse_args()
    run(args.binary, args.workdir, Path(args.out), args.loads)


if __name__ == "__main__":
    main()
