"""ProxySQL Cluster (native sync) in the ProxySQL admin double, held to what two real ProxySQL 2.7.1 nodes
did (../shared/proxysql-reference/samples/cluster-sync.jsonl and the README's cluster facts).

test_cluster_sync_like_the_sample runs the sample's steps on a pair at the default sync settings and samples
both nodes every 100 ms as the capture did (runtime and disk mysql_servers, runtime_checksums_values,
stats_proxysql_servers_checksums); the shorter tests take admin-cluster_check_interval_ms=200 for the traps.
"""

import json
import time
from pathlib import Path

from lab.capture_cluster_2146 import SERVERS as SERVERS_2146, TABLES as TABLES_2146, galera_row
from lab.capture_cluster_sync import LAYERS
from lab.fixtures_proxysql import join_cluster

SERVERS = "SELECT hostgroup_id, port, status, weight FROM {} ORDER BY hostgroup_id, port"
LAYOUT = [(100, 3411, 1000), (101, 3411, 100), (101, 3412, 1000), (101, 3413, 1000)]


def rows(d, sql):
    return [tuple(r) for r in d.query(sql)[1]]


def checksum(d, name="mysql_servers"):
    """(version, epoch, checksum) of one module in runtime_checksums_values, as ints and the checksum text."""
    ver, epoch, csum = rows(d, f"SELECT version, epoch, checksum FROM runtime_checksums_values WHERE name='{name}'")[0]
    return int(ver), int(epoch), csum


def seen(d, peer, name="mysql_servers"):
    """What d's cluster thread last read from peer: (version, epoch, checksum, diff_check)."""
    ver, epoch, csum, diff = rows(
        d,
        f"SELECT version, epoch, checksum, diff_check FROM stats_proxysql_servers_checksums"
        f" WHERE port={peer.port} AND name='{name}'",
    )[0]
    return int(ver), int(epoch), csum, int(diff)


class Recorder:
    """Samples both nodes every 100 ms, like the capture: t (since start), node, runtime, disk, checksum, peers."""

    def __init__(self, nodes):
        self.nodes = nodes  # {"d": double, "e": double}
        self.paused = set()
        self.t0 = time.monotonic()
        self.lines = []

    def now(self):
        return time.monotonic() - self.t0

    def sample(self):
        """One line a node, its queries all read between two of its cluster checks: a sample that a check fell
        within (its peers' rows read before and after differ: a check that can pull moves a diff_check) is
        taken again, else a loaded machine shows the runtime before a pull beside the diff_check of the pull
        (a CI run at load 19 did)."""
        for name, d in self.nodes.items():
            if name in self.paused:
                continue  # a stopped process does not answer
            for _attempt in range(5):
                peers = {p.port: seen(d, p) for p in self.nodes.values()}
                line = {
                    "t": self.now(),
                    "node": name,
                    "runtime": rows(d, SERVERS.format("runtime_mysql_servers")),
                    "disk": rows(d, SERVERS.format("disk.mysql_servers")),
                    "checksum": checksum(d),
                    "peers": {p.port: seen(d, p) for p in self.nodes.values()},
                }
                if line["peers"] == peers:
                    break
            else:
                raise AssertionError(f"{name}: a cluster check within each of 5 samples in a row")
            self.lines.append(line)

    def until(self, t):
        while self.now() < t:
            self.sample()
            time.sleep(0.1)

    def event(self, text):
        self.lines.append({"t": self.now(), "event": text})

    def of(self, node, since=0.0):
        return [x for x in self.lines if x.get("node") == node and x["t"] >= since]


def load(d, statements):
    for sql in statements:
        d.query(sql)
    d.query("LOAD MYSQL SERVERS TO RUNTIME")


def layout(rows_):
    return ["DELETE FROM mysql_servers"] + [
        f"INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight) VALUES ({hg}, '127.0.0.1', {port}, {w})"
        for hg, port, w in rows_
    ]


def as_strings(rows_, status="ONLINE"):
    return [(str(hg), str(port), status, str(w)) for hg, port, w in rows_]


def first(lines, predicate):
    return next((x for x in lines if predicate(x)), None)


def test_cluster_sync_like_the_sample(proxysql_cluster_pair):
    d, e = proxysql_cluster_pair
    rec = Recorder({"d": d, "e": e})
    rec.until(1.0)
    assert checksum(d)[0] == 1 and checksum(e)[0] == 1  # fresh nodes: version 1, nothing to pull

    # 1. d loads a layout and never saves it: e pulls it 2-3 s later and saves it to its own disk
    e_version = checksum(e)[0]
    rec.event("d: layout, LOAD, no SAVE")
    t_load = rec.now()
    load(d, layout(LAYOUT))
    rec.until(t_load + 4.5)
    pulled = first(rec.of("e", t_load), lambda x: x["runtime"] == as_strings(LAYOUT))
    assert pulled is not None and 1.9 <= pulled["t"] - t_load <= 3.6, pulled
    assert pulled["disk"] == as_strings(LAYOUT)  # the peer saved what the origin never saved
    assert rows(d, SERVERS.format("disk.mysql_servers")) == []
    diffs = [x["peers"][d.port][3] for x in rec.of("e", t_load) if x["t"] < pulled["t"]]
    assert diffs and max(diffs) == 2 and sorted(diffs) == diffs  # 1, 2, then the pull at the third check
    assert pulled["peers"][d.port][3] == 3
    assert checksum(e)[1:] == checksum(d)[1:]  # the origin's epoch and checksum...
    assert checksum(e)[0] == e_version + 1  # ...and its own version counter
    assert seen(d, e)[3] == 0 and seen(e, d)[3] == 0

    # 2. a two-LOAD switchover 0.5 s apart: the peer pulls the final state only
    rec.event("d: drain 3411 OFFLINE_SOFT in 100, LOAD; 0.5 s later 3412 into 100, 3411 out, LOAD")
    t_switch = rec.now()
    load(d, ["UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=100 AND port=3411"])
    half = rows(d, SERVERS.format("runtime_mysql_servers"))
    rec.until(t_switch + 0.5)
    final = [(100, 3412, 1000)] + LAYOUT[1:]
    load(d, layout(final))
    rec.until(t_switch + 4.5)
    assert all(x["runtime"] != half for x in rec.of("e", t_switch))
    assert rec.of("e")[-1]["runtime"] == as_strings(final) == rec.of("e")[-1]["disk"]

    # 3. both nodes LOAD different weights within the same second: same epoch, never converge
    while time.time() % 1 > 0.5:
        time.sleep(0.05)
    rec.event("d weight 111 and e weight 222 on 101/3413, both LOAD at once")
    t_conflict = rec.now()
    load(d, ["UPDATE mysql_servers SET weight=111 WHERE hostgroup_id=101 AND port=3413"])
    load(e, ["UPDATE mysql_servers SET weight=222 WHERE hostgroup_id=101 AND port=3413"])
    rec.until(t_conflict + 6.0)
    assert checksum(d)[1] == checksum(e)[1] and checksum(d)[2] != checksum(e)[2]
    for me, peer in (("d", e), ("e", d)):
        climbing = [x["peers"][peer.port][3] for x in rec.of(me, t_conflict + 1.1)]
        assert sorted(climbing) == climbing and climbing[-1] >= 4  # diff_check only grows
    assert ("101", "3413", "ONLINE", "111") in rows(d, SERVERS.format("runtime_mysql_servers"))
    assert ("101", "3413", "ONLINE", "222") in rows(e, SERVERS.format("runtime_mysql_servers"))

    # 4. e stopped 4 s while d changes: e catches up about 2 s after it resumes
    rec.event("e paused")
    e.set_mode("hang")
    rec.paused.add("e")
    t_pause = rec.now()
    rec.until(t_pause + 1.0)
    load(d, ["UPDATE mysql_servers SET weight=555 WHERE hostgroup_id=101 AND port=3412"])
    rec.until(t_pause + 4.0)
    rec.event("e resumed")
    e.set_mode("normal")
    rec.paused.discard("e")
    t_resume = rec.now()
    assert ("101", "3412", "ONLINE", "1000") in rows(e, SERVERS.format("runtime_mysql_servers"))
    rec.until(t_resume + 4.0)
    caught = first(rec.of("e", t_resume), lambda x: ("101", "3412", "ONLINE", "555") in x["runtime"])
    assert caught is not None and 1.5 <= caught["t"] - t_resume <= 3.6, caught
    assert rows(e, SERVERS.format("runtime_mysql_servers")) == rows(d, SERVERS.format("runtime_mysql_servers"))
    assert ("101", "3413", "ONLINE", "111") in caught["runtime"]  # the newer epoch's whole state came along


FAST = {"admin-cluster_check_interval_ms": 200}


def wait_for(predicate, timeout=3.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_a_module_at_version_1_is_never_a_sync_source(proxysql_double_factory):
    """sysown/proxysql #1173, #3269: nodes just started from disk hold version 1 and never pull from each other,
    whatever their differences, until a LOAD ... TO RUNTIME on one of them."""
    a, b = join_cluster(proxysql_double_factory(2), sync=False, variables=FAST)
    load(a, layout(LAYOUT))
    load(b, layout(LAYOUT[:1]))
    for d in (a, b):
        for module in ("MYSQL SERVERS", "ADMIN VARIABLES", "PROXYSQL SERVERS"):
            if module == "ADMIN VARIABLES":
                d.query("SET admin-cluster_mysql_servers_diffs_before_sync=3")
                d.query("LOAD ADMIN VARIABLES TO RUNTIME")
            d.query(f"SAVE {module} TO DISK")
        d.restart()
    assert checksum(a)[0] == checksum(b)[0] == 1 and checksum(a)[2] != checksum(b)[2]
    assert wait_for(lambda: seen(a, b)[3] >= 8 and seen(b, a)[3] >= 8)
    assert rows(b, SERVERS.format("runtime_mysql_servers")) == as_strings(LAYOUT[:1])  # never synced
    a.query("LOAD MYSQL SERVERS TO RUNTIME")  # the action that clears it
    assert wait_for(lambda: rows(b, SERVERS.format("runtime_mysql_servers")) == as_strings(LAYOUT))
    assert b.engine.sync_history[-1][1:] == ("mysql_servers", "127.0.0.1", a.port)
    status = b.status()["cluster"]
    assert status["syncing"] and tuple(status["pulls"][-1][1:]) == ("mysql_servers", "127.0.0.1", a.port)


def test_a_restarted_node_pulls_from_a_peer_past_version_1(proxysql_double_factory):
    """A node whose own version is 1 takes a peer's newer state whatever the epochs say."""
    a, b = join_cluster(proxysql_double_factory(2), sync=True, variables=FAST)
    for d in (a, b):
        d.query("SAVE ADMIN VARIABLES TO DISK")
        d.query("SAVE PROXYSQL SERVERS TO DISK")
    load(a, layout(LAYOUT))
    assert wait_for(lambda: rows(b, SERVERS.format("disk.mysql_servers")) == as_strings(LAYOUT))
    load(a, layout(LAYOUT[:2]))
    b.set_mode("hang")
    time.sleep(0.1)
    b.restart()  # b comes back from its disk (the older layout), at version 1
    b.set_mode("normal")
    assert checksum(b)[0] == 1
    assert wait_for(lambda: rows(b, SERVERS.format("runtime_mysql_servers")) == as_strings(LAYOUT[:2]))


def test_diffs_before_sync_0_and_save_to_disk_off(proxysql_double_factory):
    a, b, c = join_cluster(proxysql_double_factory(3), sync=True, variables=FAST)
    b.query("SET admin-cluster_mysql_servers_save_to_disk='false'")
    c.query("SET admin-cluster_mysql_servers_diffs_before_sync=0")
    for d in (b, c):
        d.query("LOAD ADMIN VARIABLES TO RUNTIME")
    load(a, layout(LAYOUT))
    assert wait_for(lambda: rows(b, SERVERS.format("runtime_mysql_servers")) == as_strings(LAYOUT))
    assert rows(b, SERVERS.format("mysql_servers")) == as_strings(LAYOUT)  # memory too
    assert rows(b, SERVERS.format("disk.mysql_servers")) == []
    time.sleep(1.0)
    assert rows(c, SERVERS.format("runtime_mysql_servers")) == []  # sync off for that module
    assert seen(c, a)[3] >= 5  # it still sees the difference


def test_every_module_syncs(proxysql_double_factory):
    a, b = join_cluster(proxysql_double_factory(2), sync=True, variables=FAST)
    time.sleep(1.0)  # both just loaded their admin variables: a LOAD in that same second would share its epoch
    a.query("INSERT INTO mysql_users (username, password, default_hostgroup) VALUES ('app', 'secret', 100)")
    a.query(
        "INSERT INTO mysql_query_rules (rule_id, active, match_digest, destination_hostgroup, apply)"
        " VALUES (10, 1, '^SELECT', 101, 1)"
    )
    a.query("SET mysql-max_connections=1234")
    a.query("SET admin-cluster_check_status_frequency=7")
    for module in ("MYSQL USERS", "MYSQL QUERY RULES", "MYSQL VARIABLES", "ADMIN VARIABLES"):
        a.query(f"LOAD {module} TO RUNTIME")
    assert wait_for(
        lambda: all(
            checksum(b, n)[2] == checksum(a, n)[2]
            for n in ("mysql_users", "mysql_query_rules", "mysql_variables", "admin_variables")
        )
    )
    assert rows(b, "SELECT username, frontend, backend FROM runtime_mysql_users ORDER BY frontend") == [
        ("app", "0", "1"),
        ("app", "1", "0"),
    ]
    assert rows(b, "SELECT rule_id, destination_hostgroup FROM runtime_mysql_query_rules") == [("10", "101")]
    assert rows(
        b,
        "SELECT variable_value FROM runtime_global_variables WHERE variable_name IN "
        "('mysql-max_connections', 'admin-cluster_check_status_frequency') ORDER BY 1",
    ) == [("1234",), ("7",)]
    # a node's identity is not configuration: b keeps its own admin interface
    assert rows(b, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='admin-mysql_ifaces'") == [
        (f"127.0.0.1:{b.port}",)
    ]
    assert rows(b, "SELECT variable_value FROM disk.global_variables WHERE variable_name='mysql-max_connections'") == [
        ("1234",)
    ]


# sysown/proxysql #2146 on two real 2.7.1 nodes (lab/reference/cluster-2146.jsonl, its summary; README section
# "sysown/proxysql #2146 on two real 2.7.1 nodes"): the default algorithm's (1) steps, the same rows and reads.
CAPTURE_2146 = json.loads(
    (Path(__file__).resolve().parents[1] / "reference" / "cluster-2146-summary.json").read_text()
)["algorithms"]["1"]


def layers_2146(d):
    """mysql_servers (without the runtime status: the capture's backends were down, SHUNNED) and the galera and
    replication hostgroup tables in runtime, memory and disk, as the capture read them."""
    out = {
        layer: {t: [list(r) for r in rows(d, sql.format(prefix))] for t, sql in TABLES_2146.items()}
        for layer, prefix in LAYERS.items()
    }
    out["runtime"]["servers"] = [r[:2] + r[3:] for r in out["runtime"]["servers"]]
    return out


def captured_layers(step, node):
    got = json.loads(json.dumps(CAPTURE_2146[step]["layers"][node]))
    got["runtime"]["servers"] = [r[:2] + r[3:] for r in got["runtime"]["servers"]]
    return got


def pulled_2146(a, b, timeout=4.5):
    """Seconds until b's own mysql_servers_v2 checksum equals a's, and the highest diff_check b saw for a (per
    name) on the way; mysql_servers' own checksums compared at every read."""
    t0 = time.monotonic()
    target = checksum(a, "mysql_servers_v2")[2]
    most = {"mysql_servers": 0, "mysql_servers_v2": 0}
    servers_equal = True
    while time.monotonic() - t0 < timeout:
        for name in most:
            most[name] = max(most[name], seen(b, a, name)[3])
        servers_equal &= checksum(a)[2] == checksum(b)[2]
        if checksum(b, "mysql_servers_v2")[2] == target:
            took = time.monotonic() - t0
            # The pull can land between this loop's diff_check read and the checksum read; the count that
            # caused it stays in b's row until b's next check, so read it once more.
            for name in most:
                most[name] = max(most[name], seen(b, a, name)[3])
            return took, most, servers_equal
        time.sleep(0.02)
    return None, most, servers_equal


def test_a_hostgroup_table_alone_is_pulled_like_the_2146_capture(proxysql_double_factory):
    """A galera (or replication) hostgroup row alone, LOADed on a, moves a's mysql_servers_v2 and not its
    mysql_servers; b pulls it on mysql_servers_v2's diff_check 3 (measured 2.13-2.26 s galera, 2.52-2.53 s
    replication, every algorithm) into runtime, memory and disk: diff_check does not climb on 2.7.1."""
    a, b = join_cluster(proxysql_double_factory(2), sync=True)
    time.sleep(1.2)
    load(a, layout(SERVERS_2146))
    assert pulled_2146(a, b)[0] is not None
    steps = (
        ("2_galera_on_a", [galera_row("from a")]),
        (
            "4_replication_on_a",
            [
                "DELETE FROM mysql_galera_hostgroups",
                "INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup, "
                "comment) VALUES (300, 301, 'from a')",
            ],
        ),
    )
    for step, statements in steps:
        captured = CAPTURE_2146[step]
        time.sleep(1.2)
        if step == "4_replication_on_a":  # the capture emptied the galera table in a step of its own
            load(a, statements[:1])
            assert pulled_2146(a, b)[0] is not None
            time.sleep(1.2)
            statements = statements[1:]
        csum = checksum(a)[2]
        load(a, statements)
        assert checksum(a)[2] == csum  # mysql_servers: the same checksum...
        assert checksum(a)[0] > 1 and checksum(a, "mysql_servers_v2")[2] != checksum(b, "mysql_servers_v2")[2]
        took, most, servers_equal = pulled_2146(a, b)
        assert captured["equal_from_s"]["mysql_servers"] == 0.0 and servers_equal, step
        assert took is not None and 1.9 <= took <= 3.6, (step, took, captured["equal_from_s"])
        assert most == captured["max_diff_check"]["b"] == {"mysql_servers": 0, "mysql_servers_v2": 3}, step
        time.sleep(0.3)
        for name, d in (("a", a), ("b", b)):
            assert layers_2146(d) == captured_layers(step, name), (step, name)
        # the pulling check leaves 3 shown; the next one (~1 s later) reads equal checksums: 0, as on the real pair
        assert wait_for(lambda: seen(b, a, "mysql_servers_v2")[3] == 0 == seen(a, b, "mysql_servers_v2")[3], 1.5)


def test_a_pull_discards_unloaded_rows_and_a_same_second_conflict_holds_until_a_newer_load(proxysql_double_factory):
    """Steps 5 and 6 of the 2146 capture: a pull writes every hostgroup table to memory (b's unloaded galera row is
    gone); two different galera tables LOADed in one second share an epoch and diff_check on mysql_servers_v2
    climbs on both (15 in 15 s) while mysql_servers stays equal; a later LOAD on a (a weight only) clears it."""
    a, b = join_cluster(proxysql_double_factory(2), sync=True, variables=FAST)
    time.sleep(1.2)
    load(a, layout(SERVERS_2146))
    assert pulled_2146(a, b)[0] is not None
    time.sleep(1.2)
    b.query(galera_row("b memory only", writer=210))
    load(a, ["UPDATE mysql_servers SET weight=1005 WHERE port=3312"])
    assert pulled_2146(a, b)[0] is not None
    time.sleep(0.1)
    assert layers_2146(b) == captured_layers("5_weight_b_memory_differs", "b")

    captured = CAPTURE_2146["6_same_second_galera"]
    assert captured["equal_from_s"]["mysql_servers_v2"] is None and captured["max_diff_check"]["a"] == {
        "mysql_servers": 0,
        "mysql_servers_v2": 15,
    }
    time.sleep(1.0)
    while time.time() % 1 > 0.3:
        time.sleep(0.01)
    load(a, ["DELETE FROM mysql_galera_hostgroups", galera_row("a same second")])
    load(b, ["DELETE FROM mysql_galera_hostgroups", galera_row("b same second", writer=220)])
    assert checksum(a, "mysql_servers_v2")[1] == checksum(b, "mysql_servers_v2")[1]
    climbing = []
    for _ in range(15):
        time.sleep(0.2)
        climbing.append(seen(b, a, "mysql_servers_v2")[3])
        assert seen(b, a)[3] == 0 and seen(a, b)[3] == 0 and checksum(a)[2] == checksum(b)[2]
    assert sorted(climbing) == climbing and climbing[-1] >= 10
    assert layers_2146(b)["runtime"]["galera"] == [["220", "221", "222", "223", "b same second"]]
    time.sleep(1.0)
    load(a, ["UPDATE mysql_servers SET weight=1006 WHERE port=3312"])
    assert pulled_2146(a, b)[0] is not None
    time.sleep(0.1)
    assert layers_2146(b) == captured_layers("6_then_weight_on_a", "b")  # a's galera row, saved to b's disk
    a_now, a_then = layers_2146(a), captured_layers("6_then_weight_on_a", "a")
    # (a's disk there kept a pull from b: the capture's first try of the same-second LOADs straddled a second)
    assert (a_now["runtime"], a_now["memory"]) == (a_then["runtime"], a_then["memory"])


def test_a_load_in_flight_on_a_stopped_node_runs_when_it_answers_again(proxysql_double_factory):
    """LAB FAIL_STATEMENTS {"pause": "on_resume"}: as a real ProxySQL stopped (SIGSTOP) with a LOAD in flight, the node
    stops answering before it runs it and runs it once it answers again, after a peer's LOAD made meanwhile: its epoch
    is then the newer, and a peer whose sync is on pulls it (the real pair's order, lab/tests/test_real_faults.py)."""
    import threading

    import MySQLdb

    a, b = join_cluster(proxysql_double_factory(2), sync=True, variables=FAST)
    b.query('LAB FAIL_STATEMENTS {"text": "LOAD MYSQL SERVERS TO RUNTIME", "pause": "on_resume"}')
    b.query(layout(LAYOUT)[1])
    before = b.engine.checksums["mysql_servers"]
    conn = MySQLdb.connect(**b.connect_kwargs())
    sent = threading.Thread(target=lambda: conn.cursor().execute("LOAD MYSQL SERVERS TO RUNTIME"), daemon=True)
    sent.start()
    assert wait_for(lambda: b.engine.mode == "hang")
    load(a, layout(LAYOUT[2:]))
    time.sleep(1.1)  # resumed a second later: epochs are whole seconds
    assert b.engine.checksums["mysql_servers"] == before  # not run while it is stopped
    b.set_mode("normal")
    sent.join(5)
    assert not sent.is_alive()
    assert rows(b, SERVERS.format("runtime_mysql_servers")) == as_strings(LAYOUT[:1])
    assert checksum(b)[1] > checksum(a)[1]  # run after the resume, the newest
    assert wait_for(lambda: rows(a, SERVERS.format("disk.mysql_servers")) == as_strings(LAYOUT[:1]))  # pulled, saved
    conn.close()
