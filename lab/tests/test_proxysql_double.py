"""Tests of the ProxySQL admin LAB DOUBLE, over the real MySQL wire protocol with mysqlclient.

The conformance tests replay the reference transcripts captured on a real ProxySQL 2.7.1
(<repo>/../shared/proxysql-reference, or $PROXYSQL_REFERENCE_DIR) and judges it with the reference's
own replay.py rules. The other tests hold the traffic model to the measured behaviour in the
reference's samples (drain.jsonl, mirror.jsonl) and check the lab-only controls.
"""

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import MySQLdb
import psutil
import pytest

from lab.fixtures_proxysql import new_double
from lab.proxysql_double import DoubleServer, ProxySQLDouble
from conftest import missing

REPO = Path(__file__).resolve().parents[2]
REFERENCE = Path(os.environ.get("PROXYSQL_REFERENCE_DIR", REPO.parent / "shared" / "proxysql-reference"))
SCHEMA_COPY = REPO / "lab" / "proxysql_double" / "schema"


def connect(double, **kw):
    return MySQLdb.connect(**double.connect_kwargs(**kw))


class Admin:
    """A tiny admin client over the wire."""

    def __init__(self, double):
        self.conn = connect(double)

    def q(self, sql):
        cur = self.conn.cursor()
        cur.execute(sql)
        rows = cur.fetchall() if cur.description else cur.rowcount
        cur.close()
        return rows

    def one(self, sql):
        return self.q(sql)[0][0]

    def lab(self, command, **args):
        return json.loads(self.one(f"LAB {command} {json.dumps(args)}" if args else f"LAB {command}"))

    def global_var(self, name):
        return int(self.one(f"SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name='{name}'"))

    def conn_used(self, hg, status="OFFLINE_SOFT"):
        return int(
            self.one(
                f"SELECT IFNULL(SUM(ConnUsed),0) FROM stats_mysql_connection_pool "
                f"WHERE status='{status}' AND hostgroup={hg}"
            )
        )


def galera_servers(admin):
    """The Galera lab's nodes as backends (tests that send traffic to them take the galera_lab fixture:
    the double really connects to the backends its sessions use, and shuns one that does not answer)."""
    admin.q(
        "INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight) VALUES "
        "(100,'127.0.0.1',3311,10000),(101,'127.0.0.1',3312,10000),(101,'127.0.0.1',3313,10000),"
        "(102,'127.0.0.1',3312,1000)"
    )
    admin.q("LOAD MYSQL SERVERS TO RUNTIME")


def set_writer_status(admin, status):
    admin.q(f"UPDATE mysql_servers SET status='{status}' WHERE hostgroup_id=100 AND port=3311")
    admin.q("LOAD MYSQL SERVERS TO RUNTIME")


# ---------------------------------------------------------------------------------------- reference
def load_replay():
    spec = importlib.util.spec_from_file_location("proxysql_reference_replay", REFERENCE / "replay.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_conformance_transcript(proxysql_double):
    """114 reference statements, judged by the reference's replay.py rules: all pass, all type 253."""
    transcript = REFERENCE / "transcripts" / "admin-statements.jsonl"
    if not transcript.exists():
        missing(f"reference folder not found at {REFERENCE}")
    passed, failures, type_codes = replay_transcript(proxysql_double, transcript)
    assert failures == [], "\n".join(failures)
    assert passed == 114
    assert type_codes == {253}


def replay_transcript(double, transcript):
    """Replay a reference transcript in order on a fresh double with replay.py's own run/judge:
    (passed, failures, column type codes seen)."""
    replay = load_replay()
    conn = connect(double, connect_timeout=3)
    passed, failures, type_codes = 0, [], set()
    for line in transcript.read_text().splitlines():
        step = json.loads(line)
        cur = conn.cursor()
        cols, rows, rowcount, error = replay.run(cur, step["sql"])
        cur.close()
        type_codes.update(c[1] for c in cols or [])
        problem = replay.judge(step, cols or [], rows, rowcount, error)
        if problem:
            failures.append(f"step {step['step']} {step['sql'][:80]}: {problem}")
        else:
            passed += 1
    conn.close()
    return passed, failures, type_codes


def test_conformance_config_transcript(proxysql_double):
    """106 configuration statements (users, query rules, variables, replication hostgroups, hostgroup
    attributes, BEGIN/ROLLBACK, checksums, aliases), judged by replay.py's rules: all pass, all type 253."""
    transcript = REFERENCE / "transcripts" / "config-statements.jsonl"
    if not transcript.exists():
        missing(f"reference folder not found at {REFERENCE}")
    passed, failures, type_codes = replay_transcript(proxysql_double, transcript)
    assert failures == [], "\n".join(failures)
    assert passed == 106
    assert type_codes == {253}


def test_packaged_schema_is_the_reference():
    """The DDL and data files the double ships (so it runs without shared/) equal the reference's."""
    if not (REFERENCE / "schema").is_dir():
        missing(f"reference folder not found at {REFERENCE}")
    ref = {p.name: p.read_bytes() for p in (REFERENCE / "schema").iterdir()}
    mine = {p.name: p.read_bytes() for p in SCHEMA_COPY.iterdir()}
    assert mine == ref


# ---------------------------------------------------------------------------------------- protocol
def test_wrong_password_is_1045(proxysql_double):
    with pytest.raises(MySQLdb.OperationalError) as e:
        MySQLdb.connect(host="127.0.0.1", port=proxysql_double.port, user="admin", passwd="nope", connect_timeout=3)
    assert e.value.args[0] == 1045
    assert "ProxySQL Admin Error: Access denied for user 'admin'" in e.value.args[1]


def test_basics_and_errors(proxysql_double):
    a = Admin(proxysql_double)
    assert a.one("SELECT @@version") == "2.7.1-lab-double"
    assert a.q("SELECT 1") == (("1",),)
    assert a.q("SET NAMES utf8mb4") == 0 and a.q("SET autocommit=0") == 0
    assert a.q("SET mysql-mirror_max_concurrency=100") == 1
    assert a.q("SET mysql-no_such_variable=1") == 0
    assert len(a.q("SHOW MYSQL VARIABLES")) == 163
    assert len(a.q("SELECT * FROM stats_mysql_global")) == 108
    assert a.q("SHOW CREATE TABLE mysql_servers")[0][1].startswith("CREATE TABLE mysql_servers (")
    assert a.q("SELECT COUNT(*) FROM disk.mysql_servers") == (("0",),)
    for bad, msg in [
        ("SELECT * FROM nope", "no such table: nope"),
        ("LOAD MYSQL NOTHING TO RUNTIME", 'near "LOAD": syntax error'),
        ("SAVE MYSQL NOTHING TO DISK", 'near "SAVE": syntax error'),
        ("INSERT INTO scheduler (interval_ms, filename) VALUES (1, 'x')", "CHECK constraint failed"),
    ]:
        with pytest.raises(MySQLdb.MySQLError) as e:
            a.q(bad)
        assert e.value.args[0] == 1045 and e.value.args[1].startswith("ProxySQL Admin Error: ")
        assert msg in e.value.args[1]
    # runtime_* tables are regenerated by ProxySQL: a write to them changes nothing
    a.q("INSERT INTO runtime_mysql_servers (hostgroup_id, hostname) VALUES (1, 'x')")
    assert a.q("SELECT COUNT(*) FROM runtime_mysql_servers") == (("0",),)


def test_hostile_strings_are_stored_as_values(proxysql_double):
    a = Admin(proxysql_double)
    hostile = [
        'it\'s "quoted"; DROP TABLE mysql_servers; -- é中',
        "back\\slash \\' \\\" %_",
        "😀 utf8mb4",
        "line\nbreak\ttab",
        "x" * 5000,
        "'); DELETE FROM mysql_servers; --",
        "NULL",
        "",
    ]
    cur = a.conn.cursor()
    for i, text in enumerate(hostile):
        cur.execute(
            "INSERT INTO mysql_servers (hostgroup_id, hostname, port, comment) VALUES (%s, %s, %s, %s)",
            (i, "127.0.0.1", 3306, text),
        )
    a.q("LOAD MYSQL SERVERS TO RUNTIME")
    cur.execute("SELECT comment FROM runtime_mysql_servers ORDER BY hostgroup_id")
    assert [r[0] for r in cur.fetchall()] == hostile
    cur.execute("SET mysql-monitor_password = %s", ("pa'ss\"w;rd",))
    assert (
        a.one("SELECT variable_value FROM global_variables WHERE variable_name='mysql-monitor_password'")
        == "pa'ss\"w;rd"
    )


def test_statement_log_records_what_was_sent(proxysql_double):
    a = Admin(proxysql_double)
    proxysql_double.clear_statements()
    a.q("SELECT 1")
    a.q("LAB STATUS")
    a.q("LOAD MYSQL SERVERS TO RUNTIME")
    assert proxysql_double.statements() == ["SELECT 1", "LOAD MYSQL SERVERS TO RUNTIME"]
    log = a.lab("STATEMENTS")
    assert [e["sql"] for e in log] == ["SELECT 1", "LOAD MYSQL SERVERS TO RUNTIME"]
    assert a.lab("STATEMENTS", since=log[0]["seq"])[0]["sql"] == "LOAD MYSQL SERVERS TO RUNTIME"


# ---------------------------------------------------------------------------------------- layers
def test_variables_invalid_and_read_only_values_are_not_applied(proxysql_double):
    a = Admin(proxysql_double)
    a.q("SET mysql-mirror_max_concurrency='lots'")
    a.q("SET mysql-threads=8")  # only read at start: needs a restart
    a.q("LOAD MYSQL VARIABLES TO RUNTIME")
    rt = dict(
        a.q(
            "SELECT * FROM runtime_global_variables WHERE variable_name IN "
            "('mysql-mirror_max_concurrency','mysql-threads')"
        )
    )
    assert rt == {"mysql-mirror_max_concurrency": "16", "mysql-threads": "2"}
    # as ProxySQL does, memory is reset to the value in force
    assert (
        a.one("SELECT variable_value FROM global_variables WHERE variable_name='mysql-mirror_max_concurrency'") == "16"
    )


def test_disk_layer_survives_restart(tmp_path):
    with new_double(datadir=tmp_path / "node1") as d:
        a = Admin(d)
        a.q("INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'10.0.0.1',3306)")
        a.q("SET mysql-threads=4")
        a.q("SAVE MYSQL SERVERS TO DISK")
        a.q("SAVE MYSQL VARIABLES TO DISK")
        a.q("INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'10.0.0.2',3306)")
        assert (tmp_path / "node1" / "proxysql.db").exists()
        a.q("PROXYSQL RESTART")
        a = Admin(d)
        assert a.q("SELECT hostname FROM runtime_mysql_servers") == (("10.0.0.1",),)
        assert a.one("SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-threads'") == "4"
        assert a.global_var("MySQL_Thread_Workers") == 4


def test_users_show_frontend_and_backend_rows_at_runtime(proxysql_double):
    a = Admin(proxysql_double)
    a.q("INSERT INTO mysql_users (username, password, default_hostgroup) VALUES ('app', 'secret', 100)")
    a.q("LOAD MYSQL USERS TO RUNTIME")
    assert a.q("SELECT username, frontend, backend FROM runtime_mysql_users ORDER BY backend") == (
        ("app", "1", "0"),
        ("app", "0", "1"),
    )
    # as on ProxySQL 2.7.1 (config-statements.jsonl): memory gets both runtime rows back, not one merged row
    a.q("DELETE FROM mysql_users")
    a.q("SAVE MYSQL USERS TO MEMORY")
    assert a.q("SELECT username, frontend, backend FROM mysql_users ORDER BY frontend") == (
        ("app", "0", "1"),
        ("app", "1", "0"),
    )
    # an inactive user is not at runtime
    a.q("UPDATE mysql_users SET active=0")
    a.q("LOAD MYSQL USERS TO RUNTIME")
    assert a.q("SELECT COUNT(*) FROM runtime_mysql_users") == (("0",),)


def test_only_active_users_reach_the_runtime(proxysql_double):
    """As the reference's config-statements.jsonl (steps 6, 13, 15, 19) shows on ProxySQL 2.7.1."""
    a = Admin(proxysql_double)
    a.q("INSERT INTO mysql_users (username, password, default_hostgroup) VALUES ('app1', 's1', 100)")
    a.q("INSERT INTO mysql_users (username, password, default_hostgroup, active) VALUES ('app3', 's3', 100, 0)")
    a.q("LOAD MYSQL USERS TO RUNTIME")
    assert a.q("SELECT DISTINCT username FROM runtime_mysql_users") == (("app1",),)
    a.q("SAVE MYSQL USERS FROM RUNTIME")  # the inactive user stays in memory; the active one comes back as
    assert a.q("SELECT username, active, frontend, backend FROM mysql_users ORDER BY username, frontend") == (
        ("app1", "1", "0", "1"),
        ("app1", "1", "1", "0"),
        ("app3", "0", "1", "1"),
    )  # its two runtime rows (step 15)


def test_cluster_pair_sees_each_others_checksums(proxysql_double_pair):
    a, b = (Admin(d) for d in proxysql_double_pair)
    for x in (a, b):
        galera_servers(x)
    time.sleep(1.05)  # admin-cluster_check_interval_ms
    rows = b.q(
        f"SELECT name, checksum, diff_check FROM stats_proxysql_servers_checksums "
        f"WHERE port={proxysql_double_pair[0].port} AND name='mysql_servers'"
    )
    mine = b.one("SELECT checksum FROM runtime_checksums_values WHERE name='mysql_servers'")
    assert rows == (("mysql_servers", mine, "0"),) and mine != "0x0000000000000000"
    a.q("UPDATE mysql_servers SET weight=1 WHERE port=3313")
    a.q("LOAD MYSQL SERVERS TO RUNTIME")
    # b sees a's new checksum at its next check, as real peers do (samples/cluster-sync.jsonl), not before
    query = (
        f"SELECT checksum, diff_check FROM stats_proxysql_servers_checksums "
        f"WHERE port={proxysql_double_pair[0].port} AND name='mysql_servers'"
    )
    assert b.q(query) == ((mine, "0"),)
    deadline = time.monotonic() + 1.1
    while b.q(query)[0][0] == mine and time.monotonic() < deadline:
        time.sleep(0.02)
    theirs, diff = b.q(query)[0]
    assert theirs != mine and diff == "1"


# ---------------------------------------------------------------------------------------- drain
def test_drain_stuck_with_default_auto_increment_delay(proxysql_double, galera_lab):
    """samples/drain.jsonl, auto_increment_delay_multiplex=5: ConnUsed stays 4 of 4 after OFFLINE_SOFT."""
    a = Admin(proxysql_double)
    galera_servers(a)
    a.lab("SET_SESSIONS", hostgroup=100, count=4, pinned_reason="auto_increment")
    a.lab("SET_SESSIONS", hostgroup=101, count=4)
    set_writer_status(a, "OFFLINE_SOFT")
    t0 = time.monotonic()
    samples = []
    while time.monotonic() - t0 < 1.2:
        samples.append(a.conn_used(100))
        time.sleep(0.05)
    assert min(samples) == 4
    queries = [int(a.one("SELECT Queries FROM stats_mysql_connection_pool WHERE hostgroup=100")) for _ in range(2)]
    assert queries[0] > 0  # pinned sessions keep running on the draining server
    a.q("SET mysql-show_processlist_extended=1")
    a.q("LOAD MYSQL VARIABLES TO RUNTIME")
    rows = a.q("SELECT hostgroup, srv_host, srv_port, extended_info FROM stats_mysql_processlist WHERE hostgroup=100")
    assert len(rows) == 4
    for hg, host, port, ext in rows:
        assert (host, port) == ("127.0.0.1", "3311")
        conn = json.loads(ext)["backends"][0]["conn"]
        assert conn["MultiplexDisabled"] is True and conn["auto_increment_delay_token"] > 0
        assert conn["mysql"]["port"] == 3311
    assert a.q("SELECT COUNT(*) FROM stats_mysql_processlist WHERE extended_info IS NULL") == (("0",),)


def test_drain_completes_with_auto_increment_delay_zero(proxysql_double, galera_lab):
    """samples/drain.jsonl, auto_increment_delay_multiplex=0: ConnUsed 0 within ~25 ms; the
    sessions move to the other ONLINE writer, with no client error."""
    a = Admin(proxysql_double)
    galera_servers(a)
    a.q("INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight) VALUES (100,'127.0.0.1',3312,1)")
    a.q("UPDATE mysql_servers SET weight=100000 WHERE hostgroup_id=100 AND port=3311")
    a.q("LOAD MYSQL SERVERS TO RUNTIME")
    a.q("SET mysql-auto_increment_delay_multiplex=0")
    a.q("LOAD MYSQL VARIABLES TO RUNTIME")
    a.lab("SET_SESSIONS", hostgroup=100, count=4, pinned_reason="auto_increment", busy=1)
    assert a.conn_used(100, "ONLINE") == 4
    set_writer_status(a, "OFFLINE_SOFT")
    t0 = time.monotonic()
    while a.conn_used(100) > 0:
        assert time.monotonic() - t0 < 0.1, "drain did not complete within 100 ms"
        time.sleep(0.005)
    status = a.lab("STATUS")
    assert status["counters"]["client_errors"] == 0
    assert status["workloads"][0]["on_servers"] == ["127.0.0.1:3312"]


def test_other_pin_reasons_hold_regardless_of_auto_increment_delay(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.q("SET mysql-auto_increment_delay_multiplex=0")
    a.q("SET mysql-show_processlist_extended=2")
    a.q("LOAD MYSQL VARIABLES TO RUNTIME")
    proxysql_double.traffic.set_sessions(
        hostgroup=100, count=4, kind="write", pinned_reason="user_variable", pinned_fraction=0.5
    )
    set_writer_status(a, "OFFLINE_SOFT")
    time.sleep(0.2)
    assert a.conn_used(100) == 2
    flags = [
        json.loads(r[0])["backends"][0]["conn"]["status"]
        for r in a.q("SELECT extended_info FROM stats_mysql_processlist WHERE srv_port=3311")
    ]
    assert len(flags) == 2 and all(f["user_variable"] for f in flags)


def test_hostgroup_without_multiplexing_pins_every_session(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.q("SET mysql-auto_increment_delay_multiplex=0")
    a.q("LOAD MYSQL VARIABLES TO RUNTIME")
    a.q("INSERT INTO mysql_hostgroup_attributes (hostgroup_id, multiplex) VALUES (100, 0)")
    a.lab("SET_SESSIONS", hostgroup=100, count=3, kind="write")
    set_writer_status(a, "OFFLINE_SOFT")
    time.sleep(0.1)
    assert a.conn_used(100) == 3


def test_no_online_server_holds_queries_then_times_out(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.q("SET mysql-connect_timeout_server_max=300")
    a.q("LOAD MYSQL VARIABLES TO RUNTIME")
    a.lab("SET_SESSIONS", hostgroup=100, count=2, kind="write")
    set_writer_status(a, "OFFLINE_SOFT")
    time.sleep(0.1)
    rows = a.q("SELECT command, srv_host, time_ms FROM stats_mysql_processlist WHERE hostgroup=100")
    assert [r[:2] for r in rows] == [("Query", None), ("Query", None)]  # held, waiting, no error
    assert a.lab("STATUS")["counters"]["client_errors"] == 0
    time.sleep(0.3)
    assert a.lab("STATUS")["counters"]["held_timeouts"] >= 2
    set_writer_status(a, "ONLINE")
    assert a.lab("STATUS")["workloads"][0]["held"] == 0


def test_held_queries_record_how_long_they_waited(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.lab("SET_SESSIONS", hostgroup=100, count=2, kind="write")
    assert a.lab("TAKE_HOLDS") == []
    start = time.monotonic()
    set_writer_status(a, "OFFLINE_SOFT")
    time.sleep(0.15)  # the sessions leave the draining writer after their transaction (<= 24 ms), then wait
    set_writer_status(a, "ONLINE")
    elapsed_ms = (time.monotonic() - start) * 1000
    holds = a.lab("TAKE_HOLDS", hostgroup=100)
    assert len(holds) == 2 and all(150 - 24 <= ms <= elapsed_ms for ms in holds), (holds, elapsed_ms)
    assert a.lab("TAKE_HOLDS") == []  # taken once


def test_offline_hard_cuts_and_counts(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.lab("SET_SESSIONS", hostgroup=100, count=4, pinned_reason="auto_increment", reconnect=False)
    set_writer_status(a, "OFFLINE_HARD")
    assert a.global_var("Client_Connections_aborted") == 4
    assert a.global_var("Client_Connections_connected") == 0
    assert a.lab("STATUS")["counters"]["sessions_cut"] == 4
    assert a.conn_used(100, "OFFLINE_HARD") == 0
    # removing a server from runtime cuts as well
    a.lab("SET_SESSIONS", hostgroup=101, count=3)
    a.q("DELETE FROM mysql_servers WHERE hostgroup_id=101")
    a.q("LOAD MYSQL SERVERS TO RUNTIME")
    assert a.lab("STATUS")["counters"]["sessions_cut"] == 7


# ---------------------------------------------------------------------------------------- mirror, digests
def saturated_insert_mirror(a, mirror_hostgroup):
    """Rule 10 mirrors the writer's INSERTs with the sample's settings: one mirror slot, 50 queued a thread."""
    a.q(
        "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,mirror_hostgroup,apply) "
        f"VALUES (10,1,'^INSERT',100,{mirror_hostgroup},1)"
    )
    a.q("LOAD MYSQL QUERY RULES TO RUNTIME")
    a.q("SET mysql-mirror_max_concurrency=1")
    a.q("SET mysql-mirror_max_queue_length=50")
    a.q("LOAD MYSQL VARIABLES TO RUNTIME")


@contextlib.contextmanager
def saturated_writer_mirror():
    """A double (2 threads) whose 4 writer sessions' INSERTs saturate rule 10's one mirror slot to hostgroup 101."""
    with new_double(variables={"mysql-threads": "2"}) as d:
        a = Admin(d)
        galera_servers(a)
        saturated_insert_mirror(a, 101)
        a.lab("SET_SESSIONS", hostgroup=100, count=4, pinned_reason="auto_increment")
        time.sleep(0.5)
        yield a


def test_mirror_saturation_matches_sample(galera_lab):
    """samples/mirror.jsonl: threads=2, mirror_max_concurrency=1, mirror_max_queue_length=50 ->
    Mirror_concurrency 1 and Mirror_queue_length ~100 (total over threads). Prepared statements
    are not mirrored."""
    with saturated_writer_mirror() as a:
        seen = []
        # A reading is under the cap one time in four (the sample: 7 of 29). Six readings, with the model's old 35 %
        # and a full queue read as 99, were all under it about once in 300 runs (CI at 62cd6da); twelve at 25 % are
        # all under it once in 17 million.
        for _ in range(12):
            seen.append(
                dict(
                    a.q(
                        "SELECT Variable_Name, Variable_Value FROM stats_mysql_global "
                        "WHERE Variable_Name IN ('Mirror_concurrency','Mirror_queue_length')"
                    )
                )
            )
            time.sleep(0.05)
        assert all(s["Mirror_concurrency"] == "1" for s in seen)
        assert all(80 <= int(s["Mirror_queue_length"]) <= 100 for s in seen)
        assert max(int(s["Mirror_queue_length"]) for s in seen) == 100
        assert int(a.one("SELECT hits FROM stats_mysql_query_rules WHERE rule_id=10")) > 0
        assert a.lab("STATUS")["mirror"]["dropped"] > 0
        a.lab("SET_SESSIONS", hostgroup=100, count=4, prepared_fraction=1.0)
        time.sleep(0.6)  # the queue drains at 200/s and nothing new is mirrored
        assert a.global_var("Mirror_queue_length") == 0


def test_a_running_mirror_copy_is_a_mirror_internal_session_of_its_own(galera_lab):
    """As a real 2.7.1 lists it (lab/tests/test_real_mirror_processlist.py): each copy that runs is a session of its
    own in the mirror hostgroup, client 'mirror_internal' with no port, the application's user, schema and query
    text; as many as Mirror_concurrency says (one slot here, always busy)."""
    with saturated_writer_mirror() as a:
        rows = a.q(
            "SELECT SessionID, user, db, cli_host, cli_port, hostgroup, srv_port, command, info"
            " FROM stats_mysql_processlist ORDER BY SessionID"
        )
        clients = [r for r in rows if r[3] != "mirror_internal"]
        copies = [r for r in rows if r[3] == "mirror_internal"]
        assert len(clients) == 4 and len(copies) == 1 == int(a.global_var("Mirror_concurrency")), rows
        sid, user, db, _, port, hostgroup, srv_port, command, info = copies[0]
        assert (user, db, port, hostgroup, command) == ("app", "sbtest", None, "101", "Query"), copies
        assert info.startswith("INSERT") and srv_port in ("3311", "3312", "3313") and sid not in {r[0] for r in clients}
        a.lab("SET_SESSIONS", hostgroup=100, count=4, prepared_fraction=1.0)
        time.sleep(0.6)  # prepared statements are never mirrored: the queue drains and no copy runs
        assert a.one("SELECT COUNT(*) FROM stats_mysql_processlist WHERE cli_host='mirror_internal'") == "0"


def test_mirror_hits_count_every_match_and_digests_only_the_copies_that_ran(galera_lab):
    """A saturated mirror (seed 004, samples/mirror.jsonl): the rule's hits count every query it matches,
    prepared executions included; the mirror hostgroup's stats_mysql_query_digest rows count only the
    copies that really ran there: not those the full queue dropped, not prepared statements (never
    mirrored). Mirror sessions count in Questions; Com_frontend_stmt_execute counts the prepared ones."""
    with new_double(variables={"mysql-threads": "2"}) as d:
        a = Admin(d)
        galera_servers(a)
        saturated_insert_mirror(a, 102)
        a.lab("SET_SESSIONS", hostgroup=100, count=4, pinned_reason="auto_increment", prepared_fraction=0.25)
        time.sleep(1.0)
        a.lab("SET_SESSIONS", hostgroup=100, count=0)
        # The queue (100 copies) drains at 200/s: read the counters once it is empty (a fixed 0.7 s was not enough
        # on a loaded machine: copies still ran between the digest read and the Questions read).
        deadline = time.monotonic() + 10
        while a.lab("STATUS")["mirror"]["queue"] > 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert a.lab("STATUS")["mirror"]["queue"] == 0, "the mirror queue did not drain in 10 s"

        def questions():
            return a.one("SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name='Questions'")

        # ... and the stopped sessions' last statements counted (a loaded machine ran 19 of them between the digest
        # read and the Questions read once): read once Questions stays put for 0.3 s.
        last, now = None, questions()
        while now != last and time.monotonic() < deadline + 10:
            time.sleep(0.3)
            last, now = now, questions()
        assert now == last, "Questions still moved 20 s after the sessions stopped"

        def digests(hostgroup):
            return dict(
                (text, int(n))
                for text, n in a.q(
                    "SELECT digest_text, count_star FROM stats_mysql_query_digest WHERE hostgroup=%d" % hostgroup
                )
            )

        original, copies = digests(100), digests(102)
        hits = int(a.one("SELECT hits FROM stats_mysql_query_rules WHERE rule_id=10"))
        inserts = sum(n for text, n in original.items() if text.startswith("INSERT"))
        assert hits == pytest.approx(inserts, abs=3)  # every matching query, prepared ones too
        assert set(copies) == {t for t in original if t.startswith("INSERT")}  # only the rule's digests
        rule = a.lab("STATUS")["mirror"]["by_rule"]["10"]
        assert rule["skipped_prepared"] == pytest.approx(0.25 * hits, rel=0.02)
        assert rule["arrived"] == pytest.approx(0.75 * hits, rel=0.02)
        assert rule["dropped"] > 0.4 * rule["arrived"]  # the queue was full
        assert sum(copies.values()) == pytest.approx(rule["executed"], abs=3)
        assert rule["executed"] + rule["dropped"] == pytest.approx(rule["arrived"], abs=1)
        g = dict(
            a.q(
                "SELECT Variable_Name, Variable_Value FROM stats_mysql_global WHERE Variable_Name IN "
                "('Questions','Com_frontend_stmt_execute')"
            )
        )
        client = sum(original.values())
        # Each digest counts whole queries that add up to its group's count, as Questions does: at most one apart
        # per group (hostgroups 100 and 102).
        assert int(g["Questions"]) == pytest.approx(client + sum(copies.values()), abs=2)
        assert int(g["Com_frontend_stmt_execute"]) == pytest.approx(0.25 * client, rel=0.02)
        a.q("LOAD MYSQL QUERY RULES TO RUNTIME")  # new rules: counters start at 0
        assert a.one("SELECT hits FROM stats_mysql_query_rules WHERE rule_id=10") == "0"


def test_digest_reset(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.lab("SET_SESSIONS", hostgroup=100, count=4, kind="write")
    a.lab("SET_SESSIONS", hostgroup=101, count=4)
    time.sleep(0.2)
    a.lab("SET_SESSIONS", hostgroup=100, count=0)
    a.lab("SET_SESSIONS", hostgroup=101, count=0)
    top = a.q(
        "SELECT hostgroup, digest_text, count_star, sum_time FROM stats_mysql_query_digest ORDER BY sum_time DESC"
    )
    assert len(top) == 20  # sysbench oltp_read_write on two tables
    texts = {r[1] for r in top}
    assert {"COMMIT", "BEGIN", "SELECT c FROM sbtest1 WHERE id=?"} <= texts
    first = a.q("SELECT COUNT(*), SUM(count_star) FROM stats_mysql_query_digest")
    assert a.q("SELECT COUNT(*), SUM(count_star) FROM stats_mysql_query_digest_reset") == first
    assert a.q("SELECT COUNT(*) FROM stats_mysql_query_digest") == (("0",),)


def test_hundred_thousand_digests(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.lab("SET_SESSIONS", hostgroup=101, count=1, rate=0.001)
    a.lab("SET_DIGESTS", count=100000, queries=10000000)
    t0 = time.monotonic()
    assert a.one("SELECT COUNT(*) FROM stats_mysql_query_digest") == "100000"
    top = a.q("SELECT digest, digest_text, count_star FROM stats_mysql_query_digest ORDER BY count_star DESC LIMIT 3")
    # How fast the product reads them is measured by `manage.py bench_digests` (docs/benchmarks.md), not
    # here: this only guards against a double that takes minutes (2 s flaked under a loaded CI machine).
    assert time.monotonic() - t0 < 10
    assert top[0][1] == "SELECT c FROM sbtest1 WHERE id=?"
    assert len(a.q("SELECT DISTINCT digest FROM stats_mysql_query_digest")) == 100000


# ---------------------------------------------------------------------------------------- endpoints
def test_many_endpoints_in_one_process():
    server = DoubleServer().start_background()
    rss0 = psutil.Process().memory_info().rss
    try:
        doubles = [ProxySQLDouble(server=server).start() for _ in range(200)]
        rss = psutil.Process().memory_info().rss - rss0
        ports = {d.port for d in doubles}
        assert len(ports) == 200
        for d in doubles:
            c = connect(d, connect_timeout=3)
            cur = c.cursor()
            cur.execute("SELECT 1")
            assert cur.fetchall() == (("1",),)
            c.close()
        # each endpoint is its own ProxySQL
        a, b = Admin(doubles[0]), Admin(doubles[1])
        a.q("INSERT INTO mysql_servers (hostgroup_id, hostname) VALUES (1, 'only-in-a')")
        assert b.one("SELECT COUNT(*) FROM mysql_servers") == "0"
        assert rss / 200 < 3 * 1024 * 1024, f"{rss / 200 / 1024:.0f} KiB per endpoint"
    finally:
        server.stop()


def test_hanging_endpoint_times_out_a_client(proxysql_double):
    proxysql_double.set_mode("hang")
    t0 = time.monotonic()
    with pytest.raises(MySQLdb.OperationalError):
        MySQLdb.connect(host="127.0.0.1", port=proxysql_double.port, user="admin", passwd="admin", connect_timeout=1)
    assert 0.8 <= time.monotonic() - t0 <= 2.5
    proxysql_double.set_mode("refuse")
    time.sleep(0.1)
    t0 = time.monotonic()
    with pytest.raises(MySQLdb.OperationalError) as e:
        MySQLdb.connect(host="127.0.0.1", port=proxysql_double.port, user="admin", passwd="admin", connect_timeout=1)
    assert e.value.args[0] == 2002 and time.monotonic() - t0 < 0.5
    proxysql_double.set_mode("normal")
    time.sleep(0.1)
    assert Admin(proxysql_double).q("SELECT 1") == (("1",),)


def port_answers(port):
    """Whether a TCP connect to the port is accepted (False: refused)."""
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            return True
        except ConnectionRefusedError:
            return False


def test_a_mode_set_has_taken_effect_when_set_mode_or_its_lab_statement_returns(proxysql_double):
    """set_mode used to return before the loop closed (or reopened) the listening socket: a test's next connect could
    reach a 'refused' node, or be refused by a 'normal' one (a digest poll read 'timeout' for 'unreachable')."""
    wrong = []
    for i in range(150):
        proxysql_double.set_mode("refuse")
        wrong += ["refuse accepted"] if port_answers(proxysql_double.port) else []
        proxysql_double.set_mode("normal")
        wrong += [] if port_answers(proxysql_double.port) else ["normal refused"]
    assert wrong == []
    with connect(proxysql_double) as admin:  # over the wire: LAB SET_MODE answers once the socket is closed
        for i in range(50):
            admin.cursor().execute('LAB SET_MODE {"mode": "refuse"}')
            wrong += ["refuse accepted (wire)"] if port_answers(proxysql_double.port) else []
            proxysql_double.set_mode("normal")
    assert wrong == []


def test_cli_serves_several_endpoints_and_obeys_lab_statements(tmp_path, galera_lab):
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab.proxysql_double", "--port", "0", "--port", "0", "--datadir", str(tmp_path)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(3)]
        ports = [int(l.split(" ready on 127.0.0.1:")[1].split()[0]) for l in lines[:2]]
        assert "2 endpoint(s) ready" in lines[2]

        class Remote:
            host, user, password = "127.0.0.1", "admin", "admin"

            def __init__(self, port):
                self.port = port

            def connect_kwargs(self, **kw):
                return dict(host=self.host, port=self.port, user="admin", passwd="admin", connect_timeout=3, **kw)

        a = Admin(Remote(ports[0]))
        galera_servers(a)
        a.lab("SET_SESSIONS", hostgroup=100, count=3, pinned_reason="auto_increment")
        assert a.conn_used(100, "ONLINE") == 3
        # a LAB statement can target another endpoint of the same process
        a.lab("SET_MODE", endpoint=ports[1], latency_ms=1)
        assert a.lab("STATUS", endpoint=ports[1])["endpoint"]["latency_ms"] == 1
        assert a.lab("ENDPOINTS") == sorted(ports)
        assert (tmp_path / str(ports[0]) / "proxysql.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and "stopped" in out


# ---------------------------------------------------------------------------------------- query stats (issue 23 §4)
def reference_columns(table):
    """Column names of a stats table as the reference's SHOW CREATE TABLE (schema/stats.<table>.sql) defines it."""
    ddl = (REFERENCE / "schema" / f"stats.{table}.sql").read_text()
    lines = ddl[ddl.index("(") + 1 :].splitlines()
    return [line.split()[0].rstrip(");,") for line in lines if line.split() and line.split()[0].upper() != "PRIMARY"]


def test_query_stats_tables_have_the_reference_columns_and_string_values(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.q("INSERT INTO mysql_users (username,password,default_hostgroup,max_connections) VALUES ('app','x',100,50)")
    a.q("LOAD MYSQL USERS TO RUNTIME")
    a.lab("SET_SESSIONS", hostgroup=100, count=3, pinned_reason="auto_increment")
    a.lab("SET_SESSIONS", hostgroup=101, count=2)
    set_writer_status(a, "OFFLINE_HARD")  # the pinned writer sessions lose their backend: errors
    set_writer_status(a, "ONLINE")
    time.sleep(0.2)
    for table in (
        "stats_mysql_users",
        "stats_mysql_processlist",
        "stats_mysql_errors",
        "stats_mysql_commands_counters",
    ):
        cur = a.conn.cursor()
        cur.execute(f"SELECT * FROM {table}")
        rows = cur.fetchall()
        assert [d[0] for d in cur.description] == reference_columns(table), table
        assert {d[1] for d in cur.description} == {253}, table  # every column a string, as 2.7.1 sends
        assert rows, f"{table} is empty under sessions"
        assert all(v is None or isinstance(v, str) for r in rows for v in r), table
    # The values come from the double's own sessions.
    assert a.q("SELECT username, frontend_connections, frontend_max_connections FROM stats_mysql_users") == (
        ("app", "5", "50"),
    )
    assert a.one("SELECT COUNT(*) FROM stats_mysql_processlist") == "5"
    errors = a.q("SELECT hostgroup, hostname, port, username, schemaname, errno, count_star FROM stats_mysql_errors")
    assert errors == (("100", "127.0.0.1", "3311", "app", "sbtest", "2013", "3"),)
    assert int(a.one("SELECT Total_cnt FROM stats_mysql_commands_counters WHERE Command='SELECT'")) > 0
    # Reading the _reset view empties the table, as stats_mysql_query_digest_reset does.
    assert len(a.q("SELECT * FROM stats_mysql_errors_reset")) == 1 and a.q("SELECT * FROM stats_mysql_errors") == ()


def test_kill_connection_closes_that_client_session(proxysql_double, galera_lab):
    a = Admin(proxysql_double)
    galera_servers(a)
    a.lab("SET_SESSIONS", hostgroup=101, count=3, reconnect=False)
    ids = [r[0] for r in a.q("SELECT SessionID FROM stats_mysql_processlist ORDER BY SessionID")]
    assert len(ids) == 3
    a.q(f"KILL CONNECTION {ids[1]}")
    assert [r[0] for r in a.q("SELECT SessionID FROM stats_mysql_processlist ORDER BY SessionID")] == [ids[0], ids[2]]
    assert a.lab("STATUS")["counters"]["sessions_killed"] == 1
    # An application that reconnects comes back with a new session id.
    a.lab("SET_SESSIONS", hostgroup=100, count=1)
    writer = a.one("SELECT SessionID FROM stats_mysql_processlist WHERE hostgroup=100")
    a.q(f"KILL CONNECTION {writer}")
    again = a.q("SELECT SessionID FROM stats_mysql_processlist WHERE hostgroup=100")
    assert len(again) == 1 and again[0][0] != writer
    # As ProxySQL_Admin.cpp answers: an id no session has is refused; KILL QUERY is no admin command (SQLite's error).
    with pytest.raises(MySQLdb.OperationalError, match=f"Unknown thread id: {ids[1]}"):
        a.q(f"KILL CONNECTION {ids[1]}")
    with pytest.raises(MySQLdb.OperationalError, match='near "KILL": syntax error'):
        a.q(f"KILL QUERY {ids[0]}")
