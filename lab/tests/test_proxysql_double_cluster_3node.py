"""ProxySQL Cluster on three doubles, held to what three real ProxySQL 2.7.1 nodes did
(lab/reference/cluster-sync-3node.jsonl and its summary; facts in lab/reference/README.md).

Each test runs one step of the capture (lab/capture_cluster_sync.py) at the default sync settings, with the
capture's own changes and row reads, and compares the timings (with margin for a loaded machine) and the rows
each node holds in runtime, memory and disk.
"""

import json
import time
from pathlib import Path

from lab.capture_cluster_sync import LAYERS, MODULES
from lab.fixtures_proxysql import join_cluster

SUMMARY = json.loads(
    (Path(__file__).resolve().parents[1] / "reference" / "cluster-sync-3node-summary.json").read_text()
)


def rows(d, sql):
    return [list(r) for r in d.query(sql)[1]]


def layers(d, module):
    return {layer: rows(d, MODULES[module]["rows"].format(layer=prefix)) for layer, prefix in LAYERS.items()}


def checksum(d, name):
    return rows(d, f"SELECT version, epoch, checksum FROM runtime_checksums_values WHERE name='{name}'")[0]


def variable(d, name):
    return rows(d, f"SELECT variable_value FROM runtime_global_variables WHERE variable_name='{name}'")[0][0]


def change(d, module, n):
    for sql in MODULES[module]["change"](n, d.port):
        d.query(sql)
    d.query(MODULES[module]["load"])
    return time.monotonic()


def pulled_after(origin, peers, name, t_load, timeout):
    """Seconds from t_load until each peer's runtime checksum of `name` equals the origin's (None: not pulled)."""
    target = checksum(origin, name)[2]
    got = {}
    while time.monotonic() - t_load < timeout and len(got) < len(peers):
        for p in peers:
            if p not in got and checksum(p, name)[2] == target:
                got[p] = time.monotonic() - t_load
        time.sleep(0.02)
    return [got.get(p) for p in peers]


def settle():
    time.sleep(1.2)  # two LOADs in one second share an epoch


def cluster(factory):
    a, b, c = join_cluster(factory(3), sync=True)
    settle()
    return a, b, c


def test_every_module_pulled_like_the_capture(proxysql_double_factory):
    """Step 1: a LOAD on a of each module, never saved on a: each peer pulls it 2-3 s later (measured 2.35-2.97 s)
    into runtime, memory and disk; a's disk keeps nothing. mysql_users: two runtime rows, one memory row."""
    a, b, c = cluster(proxysql_double_factory)
    captured = {m: SUMMARY["propagation"][m]["peer_layers_after"] for m in MODULES if m != "proxysql_servers"}
    for module in MODULES:
        settle()
        t_load = change(a, module, 3)
        times = pulled_after(a, [b, c], MODULES[module]["names"][0], t_load, timeout=4.5)
        assert all(t is not None and 1.9 <= t <= 3.6 for t in times), (module, times)
        time.sleep(0.2)
        if module in captured:
            for name, d in (("a", a), ("b", b), ("c", c)):
                assert layers(d, module) == captured[module][name], (module, name)
        else:  # proxysql_servers: the capture's ports differ; the weights are what a changed
            for d in (b, c):
                assert {r[1]: r[2] for r in layers(d, module)["runtime"]} == {
                    str(a.port): "3",
                    str(b.port): "0",
                    str(c.port): "0",
                }
                assert layers(d, module)["disk"] == layers(d, module)["runtime"]
    for name in MODULES["mysql_servers"]["names"]:
        assert checksum(b, name)[1:] == checksum(a, name)[1:] == checksum(c, name)[1:]


def test_save_to_disk_false_travels_and_peers_keep_the_old_disk(proxysql_double_factory):
    """Step 2: admin-cluster_mysql_servers_save_to_disk=false loaded on c reaches a and b (the variable is in the
    admin_variables checksum); after a LOAD on a, b and c hold the change in runtime and memory, their disk the
    previous state."""
    a, b, c = cluster(proxysql_double_factory)
    change(a, "mysql_servers", 3)
    time.sleep(3.5)
    settle()
    c.query("SET admin-cluster_mysql_servers_save_to_disk='false'")
    c.query("LOAD ADMIN VARIABLES TO RUNTIME")
    t_load = time.monotonic()
    assert pulled_after(c, [a, b], "admin_variables", t_load, timeout=4.5)[0] is not None
    assert [variable(d, "admin-cluster_mysql_servers_save_to_disk") for d in (a, b, c)] == ["false"] * 3
    settle()
    t_load = change(a, "mysql_servers", 50)
    times = pulled_after(a, [b, c], "mysql_servers", t_load, timeout=4.5)
    assert all(t is not None and 1.9 <= t <= 3.6 for t in times), times
    time.sleep(0.3)
    for name, d in (("a", a), ("b", b), ("c", c)):
        assert layers(d, "mysql_servers") == SUMMARY["save_to_disk_false"]["layers"][name], name


def test_a_hold_on_one_node_holds_every_node(proxysql_double_factory):
    """Step 4: diffs_before_sync=0 loaded on b travels to a and c: nobody pulls a's LOAD (diff_check climbs to 8
    in 8 s); back to 3 on b: b pulls at its next check (measured 0.59 s), c once it has b's variables (3.6 s)."""
    a, b, c = cluster(proxysql_double_factory)
    b.query("SET admin-cluster_mysql_servers_diffs_before_sync=0")
    b.query("LOAD ADMIN VARIABLES TO RUNTIME")
    t_hold = time.monotonic()
    pulled_after(b, [a, c], "admin_variables", t_hold, timeout=4.5)
    assert [variable(d, "admin-cluster_mysql_servers_diffs_before_sync") for d in (a, b, c)] == ["0"] * 3
    settle()
    t_load = change(a, "mysql_servers", 60)
    assert pulled_after(a, [b, c], "mysql_servers", t_load, timeout=5.0) == [None, None]
    diff = rows(
        b, f"SELECT diff_check FROM stats_proxysql_servers_checksums WHERE port={a.port} AND name='mysql_servers'"
    )
    assert int(diff[0][0]) >= 4
    b.query("SET admin-cluster_mysql_servers_diffs_before_sync=3")
    b.query("LOAD ADMIN VARIABLES TO RUNTIME")
    t_restore = time.monotonic()
    b_time, c_time = pulled_after(a, [b, c], "mysql_servers", t_restore, timeout=6.0)
    assert b_time is not None and b_time <= 1.3, b_time
    assert c_time is not None and 1.9 <= c_time <= 4.8, c_time
    assert [variable(d, "admin-cluster_mysql_servers_diffs_before_sync") for d in (a, b, c)] == ["3"] * 3


def test_restarts_version_1_and_the_freeze(proxysql_double_factory):
    """Step 3: c restarted from its disk while a changed comes back at version 1 in every module and pulls a's
    newer mysql_servers 1.6 s after its admin answers (its first check runs at start); all three restarted with
    different disks: every module at version 1, nobody pulls (diff_check climbs) until a LOAD on a, then the
    others pull a's state at their next check (measured 0.74 and 0.87 s), even a's empty one."""
    a, b, c = cluster(proxysql_double_factory)
    for d in (a, b, c):
        d.query("SET admin-cluster_mysql_servers_save_to_disk='false'")
        d.query("LOAD ADMIN VARIABLES TO RUNTIME")
        d.query("SAVE ADMIN VARIABLES TO DISK")  # as the capture's pulls of admin_variables did
    settle()
    change(a, "mysql_servers", 3)
    time.sleep(3.5)
    for d in (b, c):
        d.query("SAVE MYSQL SERVERS TO DISK")  # the capture's peers saved layout 3 before save_to_disk went off
    c.set_mode("refuse")
    settle()
    t_load = change(a, "mysql_servers", 70)
    assert pulled_after(a, [b], "mysql_servers", t_load, timeout=4.5)[0] is not None
    c.restart()
    c.set_mode("normal")
    t_up = time.monotonic()
    assert [v for v in rows(c, "SELECT version FROM runtime_checksums_values")] == [["1"]] * 7
    [t_pull] = pulled_after(a, [c], "mysql_servers", t_up, timeout=4.0)
    assert t_pull is not None and 1.0 <= t_pull <= 2.6, t_pull
    assert checksum(c, "mysql_servers")[0] == "2" and checksum(c, "mysql_users")[0] == "1"
    assert layers(c, "mysql_servers")["disk"] == SUMMARY["restart_all"]["disk_servers"]["c"]

    for d in (a, b, c):
        d.restart()
    t_up = time.monotonic()
    assert {d.port: [v[0] for v in rows(d, "SELECT version FROM runtime_checksums_values")] for d in (a, b, c)} == {
        d.port: ["1"] * 7 for d in (a, b, c)
    }
    assert [layers(d, "mysql_servers")["disk"] for d in (a, b, c)] == [
        SUMMARY["restart_all"]["disk_servers"][n] for n in "abc"
    ]
    assert pulled_after(a, [b, c], "mysql_servers", t_up, timeout=5.0) == [None, None]
    diff = rows(
        c, f"SELECT diff_check FROM stats_proxysql_servers_checksums WHERE port={a.port} AND name='mysql_servers'"
    )
    assert int(diff[0][0]) >= 5
    a.query("LOAD MYSQL SERVERS TO RUNTIME")
    t_load = time.monotonic()
    times = pulled_after(a, [b, c], "mysql_servers", t_load, timeout=3.0)
    assert all(t is not None and t <= 1.3 for t in times), times
    assert [layers(d, "mysql_servers")["runtime"] for d in (b, c)] == [[], []]  # a's empty state went everywhere
