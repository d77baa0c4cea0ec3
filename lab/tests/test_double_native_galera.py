"""The double's Galera manager (lab/proxysql_double/galera_monitor.py) against what real ProxySQL 2.7.1's Monitor did
over the Galera lab (lab/reference/native-galera/capture.jsonl, lab/capture_native_galera.py): every captured case
placed the same from its configured servers and the backends' states, and over the wire on the real Galera lab."""

import json
import time
from contextlib import closing
from pathlib import Path

import MySQLdb
import pytest

from lab.proxysql_double.galera_monitor import BackendState, GaleraRow, place

CAPTURE = Path(__file__).resolve().parents[1] / "reference" / "native-galera" / "capture.jsonl"
CASES = [json.loads(line) for line in CAPTURE.read_text().splitlines()[1:]]
# The backend state each captured action leaves (lab/capture_native_galera.py ACTIONS).
ACTION_STATES = {
    "read_only": BackendState(read_only=True),
    "desync": BackendState(desync=True, local_state=2),
    "reject_queries": BackendState(reject_queries=True),
    "stop": BackendState(reachable=False),
}
PORTS = (3311, 3312, 3313)


def placed(case, action=None):
    """place() over the case's configured servers, every backend healthy but the one its action changed."""
    w, b, r, o, _active, max_writers, wiar, *_ = (int(v) for v in case["galera"][0][:8])
    servers = [
        {"hostgroup_id": int(hg), "hostname": "127.0.0.1", "port": int(port), "status": status, "weight": int(weight)}
        for hg, port, status, weight in case["memory_configured"]
    ]
    states = {("127.0.0.1", p): BackendState() for p in PORTS}
    if action:
        node, what = action.split()
        states[("127.0.0.1", 3310 + int(node[-1]))] = ACTION_STATES[what]
    return [
        [str(s["hostgroup_id"]), str(s["port"]), s["status"], str(s["weight"])]
        for s in place(servers, [GaleraRow(w, b, r, o, max_writers, wiar)], states)
    ]


def after_action(case):
    """The placement Monitor reached after the case's action: the last one seen in its window, or (a clean stop of
    the writer with writer_is_also_reader 0 was not acted on within the window) the first read once the node was
    started again, before Monitor saw it back (README.md)."""
    last = case["after_action"][-1]["runtime"]
    return case["after_restore"][0]["runtime"] if last == case["after_load"][-1]["runtime"] else last


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_the_double_places_every_captured_case_as_real_monitor(case):
    assert placed(case) == case["after_load"][-1]["runtime"]
    if "action" in case:
        assert placed(case, case["action"]) == after_action(case), case["action"]
        assert placed(case) == case["after_restore"][-1]["runtime"]


def test_the_capture_covers_what_the_issue_names():
    names = {c["case"] for c in CASES}
    assert {
        "wiar0",
        "wiar1",
        "wiar2",
        "max_writers2_wiar1",
        "wiar1_read_only_writer",
        "wiar1_desync_node2",
        "wiar1_writer_stopped",
    } <= names


def runtime(double):
    with closing(MySQLdb.connect(**double.connect_kwargs())) as conn:
        cur = conn.cursor()
        cur.execute("SELECT hostgroup_id, port, status, weight FROM runtime_mysql_servers ORDER BY hostgroup_id, port")
        return [[str(v) for v in r] for r in cur.fetchall()]


def wait_for(double, want, seconds=10):
    deadline = time.monotonic() + seconds
    while (got := runtime(double)) != want and time.monotonic() < deadline:
        time.sleep(0.2)
    return got


def test_the_double_over_the_real_galera_lab_follows_a_writer_set_read_only(proxysql_double, galera_healthy):
    case = next(c for c in CASES if c["case"] == "wiar1_read_only_writer")
    statements = [
        "DELETE FROM mysql_servers",
        "DELETE FROM mysql_galera_hostgroups",
        "INSERT INTO mysql_galera_hostgroups (writer_hostgroup, backup_writer_hostgroup, reader_hostgroup, "
        "offline_hostgroup, active, max_writers, writer_is_also_reader, max_transactions_behind) "
        "VALUES (100, 102, 101, 9101, 1, 1, 1, 100)",
    ]
    statements += [
        f"INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight) VALUES ({hg}, '127.0.0.1', {port}, {weight})"
        for hg, port, _status, weight in case["memory_configured"]
    ]
    with closing(MySQLdb.connect(**proxysql_double.connect_kwargs())) as conn:
        for s in statements + ["LOAD MYSQL SERVERS TO RUNTIME"]:
            conn.cursor().execute(s)
    assert wait_for(proxysql_double, case["after_load"][-1]["runtime"]) == case["after_load"][-1]["runtime"]
    with closing(galera_healthy.root_connection(1)) as conn:
        conn.cursor().execute("SET GLOBAL read_only=ON")
    try:
        assert wait_for(proxysql_double, case["after_action"][-1]["runtime"]) == case["after_action"][-1]["runtime"]
    finally:
        with closing(galera_healthy.root_connection(1)) as conn:
            conn.cursor().execute("SET GLOBAL read_only=OFF")
    assert wait_for(proxysql_double, case["after_load"][-1]["runtime"]) == case["after_load"][-1]["runtime"]
