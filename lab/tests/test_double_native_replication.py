"""The double's replication manager (lab/proxysql_double/replication_monitor.py) against what real ProxySQL 2.7.1's
Monitor did over the replication lab (lab/reference/native-replication/capture.jsonl, lab/capture_native_replication.py):
every captured case placed the same from its configured servers and the backends' read_only, and over the wire on the
real replication lab (a promotion of node 2, then node 1 back)."""

import json
import time
from contextlib import closing
from pathlib import Path

import MySQLdb
import pytest

from lab.proxysql_double.replication_monitor import ReadOnlyState, ReplicationRow, place
from lab.tests.test_double_native_galera import wait_for

CAPTURE = Path(__file__).resolve().parents[1] / "reference" / "native-replication" / "capture.jsonl"
HEADER, *CASES = [json.loads(line) for line in CAPTURE.read_text().splitlines()]
PORTS = (3321, 3322, 3323)
# The lab's healthy state (node 1 the primary) and what each captured action changes of it.
HEALTHY = {3321: ReadOnlyState(), 3322: ReadOnlyState(read_only=True), 3323: ReadOnlyState(read_only=True)}
ACTION_STATES = {
    "read_only_on": lambda n: {n: ReadOnlyState(read_only=True)},
    "read_only_off": lambda n: {n: ReadOnlyState()},
    "promote": lambda n: {3321: ReadOnlyState(read_only=True), n: ReadOnlyState()},
    "kill": lambda n: {n: ReadOnlyState(reachable=False)},
}


def as_servers(rows):
    return [
        {"hostgroup_id": int(hg), "hostname": "127.0.0.1", "port": int(port), "status": status, "weight": int(weight)}
        for hg, port, status, weight in rows
    ]


def placed(case, current, action=None):
    """place() from `current` (captured rows) with the lab healthy but for what the case's action changed."""
    writer, reader, check_type, _comment = case["replication"]["runtime"][0]
    states = dict(HEALTHY)
    if action:
        what, n = action.split()
        states.update(ACTION_STATES[what](3320 + int(n)))
    also_reader = case["variables"].get("mysql-monitor_writer_is_also_reader", "true") == "true"
    out = place(
        as_servers(current),
        [ReplicationRow(int(writer), int(reader), check_type)],
        {("127.0.0.1", p): s for p, s in states.items()},
        also_reader,
    )
    return [[str(s["hostgroup_id"]), str(s["port"]), s["status"], str(s["weight"])] for s in out]


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_the_double_places_every_captured_case_as_real_monitor(case):
    settled = case["after_load"][-1]["runtime"]
    assert placed(case, case["memory_configured"]) == settled
    assert placed(case, settled) == settled  # a placement Monitor left stays while nothing changes
    if "action" in case:
        assert placed(case, settled, case["action"]) == case["after_action"][-1]["runtime"], case["action"]
    # Monitor acts on runtime only: memory keeps the configured rows, and nothing was saved to disk
    assert case["final"]["memory"] == case["memory_configured"] and case["final"]["disk"] == []
    assert case["replication"]["memory"] == case["replication"]["runtime"] and case["replication"]["disk"] == []


def test_the_capture_covers_what_the_brief_names():
    assert HEADER["version"].startswith("2.7.1")
    assert dict(HEADER["monitor"])["mysql-monitor_read_only_interval"] == "1000"
    names = {c["case"] for c in CASES}
    assert {
        "split",
        "all_in_writer",
        "all_in_reader",
        "writer_is_also_reader_false",
        "promote2",
        "promote2_writer_is_also_reader_false",
        "writer_read_only",
        "writer_killed",
        "check_innodb_read_only",
        "check_super_read_only",
    } <= names
    promote = next(c for c in CASES if c["case"] == "promote2")
    assert {(r[0], r[3]) for r in promote["read_only_log"]} >= {("3321", "1"), ("3322", "0")}
    assert all(r[0] == "3322" or r[3] == "1" for r in promote["read_only_log"])


def test_the_double_over_the_real_replication_lab_follows_a_promotion(proxysql_double, replication_healthy):
    case = next(c for c in CASES if c["case"] == "all_in_writer")
    lab = replication_healthy
    assert [lab.node(n).port for n in (1, 2, 3)] == list(PORTS)
    statements = [
        "DELETE FROM mysql_servers",
        "DELETE FROM mysql_replication_hostgroups",
        "INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup, check_type) "
        "VALUES (10, 20, 'read_only')",
    ]
    statements += [
        f"INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight) VALUES ({hg}, '127.0.0.1', {port}, {weight})"
        for hg, port, _status, weight in case["memory_configured"]
    ]
    with closing(MySQLdb.connect(**proxysql_double.connect_kwargs())) as conn:
        for s in statements + ["LOAD MYSQL SERVERS TO RUNTIME"]:
            conn.cursor().execute(s)
    settled = case["after_load"][-1]["runtime"]
    assert wait_for(proxysql_double, settled) == settled
    promoted = next(c for c in CASES if c["case"] == "promote2")["after_action"][-1]["runtime"]
    lab.promote(2)
    assert wait_for(proxysql_double, promoted) == promoted
    lab.promote(1)  # back: node 1 moves to the writer hostgroup and stays a reader (writer_is_also_reader)
    back = [["10", "3321", "ONLINE", "1000"], *[["20", str(p), "ONLINE", "1000"] for p in PORTS]]
    assert wait_for(proxysql_double, back) == back


def test_a_load_right_after_read_only_flipped_back_is_placed_on_a_fresh_check(proxysql_double, replication_healthy):
    """Monitor checks read_only every mysql-monitor_read_only_interval: what a LOAD's rows become depends on a check
    made after the LOAD, never on one made before. Node 1 read_only ON (the double moves 3321 out of the writer
    hostgroup), then OFF and a LOAD of the configured rows at once: placed as configured (3321 writing, not also
    reading), without a second LOAD. Before, the double placed the LOAD by its last read (read_only ON), and the move
    it made then was never undone (writer_is_also_reader)."""
    lab = replication_healthy
    split = [["10", "3321", "ONLINE", "1000"], ["20", "3322", "ONLINE", "1000"], ["20", "3323", "ONLINE", "1000"]]
    statements = [
        "DELETE FROM mysql_servers",
        "DELETE FROM mysql_replication_hostgroups",
        "INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup, check_type) "
        "VALUES (10, 20, 'read_only')",
    ]
    statements += [
        f"INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight) VALUES ({hg}, '127.0.0.1', {port}, {weight})"
        for hg, port, _status, weight in split
    ]
    with closing(MySQLdb.connect(**proxysql_double.connect_kwargs())) as conn:
        for s in statements + ["LOAD MYSQL SERVERS TO RUNTIME"]:
            conn.cursor().execute(s)
    assert wait_for(proxysql_double, split) == split
    node1 = lab.root_connection(1)
    try:
        node1.cursor().execute("SET GLOBAL read_only=ON")
        moved = [["20", "3321", "ONLINE", "1000"], *split[1:]]
        assert wait_for(proxysql_double, moved) == moved
        node1.cursor().execute("SET GLOBAL read_only=OFF")
        with closing(MySQLdb.connect(**proxysql_double.connect_kwargs())) as conn:
            conn.cursor().execute("LOAD MYSQL SERVERS TO RUNTIME")
        time.sleep(2.5)  # over two of Monitor's checks (1000 ms)
        assert wait_for(proxysql_double, split, seconds=0) == split
    finally:
        node1.cursor().execute("SET GLOBAL read_only=OFF")
        node1.close()
