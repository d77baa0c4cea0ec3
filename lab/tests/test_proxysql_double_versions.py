"""The double answering as ProxySQL 2.5, 2.6, 2.7 or 3.0, held to the facts read from ProxySQL's own source at
each tag (lab/reference/versions/proxysql-<v>.json, not from running binaries), and the 2.7 facts held to the
schema captured on a real 2.7.1 (lab/proxysql_double/schema/): the extraction itself is checked once. The double's
2.5 is also held to what a real 2.5.5 showed (lab/reference/versions/proxysql-2.5.5-captured.json, captured by
capture.py from a binary built from v2.5.5; the tests read the file, never the binary), and its 3.0 to what a real 3.0
built from the v3.0 branch head showed (proxysql-3.0-captured.json, the same way)."""

import json
from pathlib import Path

import MySQLdb
import pytest

from lab.proxysql_double import versions
from conftest import missing

FACTS = Path(__file__).resolve().parents[1] / "reference" / "versions"
SCHEMA = Path(__file__).resolve().parents[1] / "proxysql_double" / "schema"
CAPTURED_2_5 = FACTS / "proxysql-2.5.5-captured.json"
CAPTURED_3_0 = FACTS / "proxysql-3.0-captured.json"
# one node's own values (its version string, its listeners, the admin credentials it was started with), not the
# version's defaults
NODE_VALUES = {
    "admin-version",
    "admin-mysql_ifaces",
    "mysql-interfaces",
    "admin-admin_credentials",
    "admin-pgsql_ifaces",
    "pgsql-interfaces",
}


def facts(version):
    return json.loads((FACTS / f"proxysql-{version}.json").read_text())


def captured_2_5():
    return json.loads(CAPTURED_2_5.read_text())


def captured_3_0():
    return json.loads(CAPTURED_3_0.read_text())


def rows(double, sql):
    conn = MySQLdb.connect(**double.connect_kwargs())
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return [tuple(v.decode() if isinstance(v, bytes) else v for v in r) for r in cur.fetchall()], cur.description
    finally:
        conn.close()


def test_source_facts_of_2_7_are_what_the_real_2_7_1_showed():
    """The extraction from source (tables, columns, variables) agrees with the capture from the 2.7.1 binary."""
    f = facts("2.7")
    captured_tables = sorted(p.name[len("main.") : -len(".sql")] for p in SCHEMA.glob("main.*.sql"))
    assert sorted(f["tables"]["admin"]) == captured_tables
    captured_vars = {line.split("\t")[0] for line in (SCHEMA / "global_variables.tsv").read_text().splitlines()[1:]}
    from_source = {f"mysql-{n}" for n in f["variables"]["mysql"]} | {f"admin-{n}" for n in f["variables"]["admin"]}
    assert captured_vars - from_source == set(versions.TRACKED)
    assert from_source <= captured_vars


@pytest.mark.parametrize("proxysql_double", ["2.5", "2.6", "2.7", "3.0"], indirect=True)
def test_double_answers_as_its_version(proxysql_double):
    version = proxysql_double.version
    f = facts(version)
    (answer,), _ = rows(proxysql_double, "SELECT @@version")
    assert answer[0].startswith(versions.FULL[version] + "-")
    assert rows(proxysql_double, "SELECT variable_value FROM global_variables WHERE variable_name='admin-version'")[
        0
    ] == [answer]
    tables = [r[0] for r in rows(proxysql_double, "SHOW TABLES")[0]]
    assert tables == sorted(f["tables"]["admin"])
    for table in tables:
        _, description = rows(proxysql_double, f"SELECT * FROM {table} LIMIT 0")
        assert [d[0] for d in description] == f["tables"]["admin"][table], table
    names = {r[0] for r in rows(proxysql_double, "SELECT variable_name FROM global_variables")[0]}
    expected = {f"mysql-{n}" for n in f["variables"]["mysql"]} | {f"admin-{n}" for n in f["variables"]["admin"]}
    # (3.0's pgsql- variables are not in the source facts: they are held to the real 3.0's below)
    assert {n for n in names if not n.startswith("pgsql-")} == expected | set(versions.TRACKED)
    checksums = {r[0] for r in rows(proxysql_double, "SELECT name FROM runtime_checksums_values")[0]}
    assert ("mysql_servers_v2" in checksums) == (version != "2.5")


def test_what_differs_between_2_5_and_2_7():
    """The differences the product relies on, per the source: 2.5 lacks mysql_servers_ssl_params, the
    hostgroup_settings column, admin-cluster_mysql_servers_sync_algorithm and mysql-handle_warnings."""
    old, new = facts("2.5"), facts("2.7")
    assert "mysql_servers_ssl_params" not in old["tables"]["admin"]
    assert "hostgroup_settings" not in old["tables"]["admin"]["mysql_hostgroup_attributes"]
    assert "hostgroup_settings" in new["tables"]["admin"]["mysql_hostgroup_attributes"]
    assert "cluster_mysql_servers_sync_algorithm" not in old["variables"]["admin"]
    assert "handle_warnings" not in old["variables"]["mysql"]
    for table in (
        "mysql_servers",
        "mysql_users",
        "mysql_query_rules",
        "mysql_galera_hostgroups",
        "mysql_replication_hostgroups",
        "scheduler",
    ):  # the tables the product writes: alike in all four
        assert {v: facts(v)["tables"]["admin"][table] for v in versions.FULL} == {
            v: new["tables"]["admin"][table] for v in versions.FULL
        }, table


@pytest.mark.parametrize("proxysql_double", ["2.5"], indirect=True)
def test_a_variable_the_version_lacks_is_refused_as_proxysql_does(proxysql_double):
    """ProxySQL answers SET of a variable it does not know with an OK carrying the error text, and writes
    nothing (admin_handler_command_set, v2.5.5 lib/ProxySQL_Admin.cpp); a table it lacks is SQLite's error."""
    conn = MySQLdb.connect(**proxysql_double.connect_kwargs())
    try:
        cur = conn.cursor()
        assert cur.execute("SET mysql-handle_warnings=1") == 0
        assert conn.info() == "ERROR: Unknown global variable: 'mysql-handle_warnings'."
        cur.execute("SELECT COUNT(*) FROM global_variables WHERE variable_name='mysql-handle_warnings'")
        assert int(cur.fetchone()[0]) == 0
        assert cur.execute("SET mysql-default_tx_isolation='READ-COMMITTED'") == 1  # 2.5 has it, 2.6 dropped it
        with pytest.raises(MySQLdb.OperationalError, match="no such table: mysql_servers_ssl_params"):
            cur.execute("SELECT * FROM mysql_servers_ssl_params")
        for statement in (
            "LOAD MYSQL SERVERS TO RUNTIME",
            "SAVE MYSQL SERVERS TO DISK",
            "LOAD MYSQL VARIABLES TO RUNTIME",
            "SAVE MYSQL VARIABLES TO DISK",
        ):
            cur.execute(statement)
    finally:
        conn.close()


# Replaying the 2.7.1 transcripts on another version, only the steps that meet what that version differs in fail.
# (2.5 and 3.0: what a real 2.5.5 and a real 3.0 did, test_the_2_7_1_transcripts_differ_on_<v>_where_a_real_<v>_did)
EXPECTED_DIFFERENCES = {
    ("2.6", "admin-statements.jsonl"): {},
    ("2.6", "config-statements.jsonl"): {},
}


@pytest.mark.parametrize("version,transcript", sorted(EXPECTED_DIFFERENCES))
def test_the_2_7_1_transcripts_differ_on_another_version_only_where_its_source_does(version, transcript):
    from lab.fixtures_proxysql import new_double
    from lab.tests.test_proxysql_double import REFERENCE, replay_transcript

    path = REFERENCE / "transcripts" / transcript
    if not path.exists():
        missing(f"reference folder not found at {REFERENCE}")
    with new_double(version=version) as double:
        _, failures, _ = replay_transcript(double, path)
    assert {int(f.split()[1].rstrip(":")) for f in failures} == set(EXPECTED_DIFFERENCES[(version, transcript)]), (
        failures
    )


# ------------------------------------------------------------------------------------------ checked on a real 2.5.5
# What the double answers unlike the real 2.5.5 AND unlike the real 2.7.1 (the same capture on both binaries), and
# the product does not send: left as it is (lab/reference/versions/README.md, "Checked against a real 2.5.5").
NOT_MODELLED_PROBES = {"SHOW CREATE TABLE mysql_servers_ssl_params", "SHOW CREATE TABLE no_such_table"}


@pytest.mark.parametrize("proxysql_double", ["2.5"], indirect=True)
def test_double_2_5_shows_the_tables_checksums_and_statements_a_real_2_5_5_showed(proxysql_double):
    """Tables and columns of main, stats and monitor, the CREATE TABLE of each main table, the variable names,
    runtime_checksums_values' rows, the stats_mysql_global names (no mysql_listener_paused) and the answers to a
    few statements, as the real 2.5.5 showed them."""
    # SET of a 2.6+ variable (an OK carrying "ERROR: Unknown global variable", nothing written), a 2.6+ table or
    # column (SQLite's error), SET of the 2.5-only mysql-default_tx_isolation: the real 2.5.5's answers, exactly
    _shows_what_the_real_one_showed(proxysql_double, captured_2_5())


def _shows_what_the_real_one_showed(double, cap):
    """The double's tables and columns of main, stats and monitor, CREATE TABLE of each main table, variable names,
    runtime_checksums_values rows, stats_mysql_global names and answers to capture.py's probes, against a capture."""
    for schema in ("main", "stats", "monitor"):
        tables = [r[0] for r in rows(double, f"SHOW TABLES FROM {schema}")[0]]
        assert sorted(tables) == sorted(cap["tables"][schema]), schema
        for table in tables:
            _, description = rows(double, f"SELECT * FROM {schema}.{table} LIMIT 0")
            assert [d[0] for d in description] == cap["tables"][schema][table], (schema, table)
    assert [r[0] for r in rows(double, "SHOW TABLES")[0]] == cap["show_tables"]
    capture = _capture_module()
    for table, digest in cap["create_sha1"].items():
        (row,), _ = rows(double, f"SHOW CREATE TABLE {table}")
        assert capture.create_digest(row[1]) == digest, table
    names = {r[0] for r in rows(double, "SELECT variable_name FROM global_variables")[0]}
    assert names == set(cap["global_variables"])
    checksums = rows(double, "SELECT name, version FROM runtime_checksums_values ORDER BY name")[0]
    assert checksums == [tuple(r[:2]) for r in cap["runtime_checksums_values"]["rows"]]
    status = sorted(r[0] for r in rows(double, "SELECT Variable_Name FROM stats_mysql_global")[0])
    assert status == cap["stats_mysql_global"]
    probes = [p for p in cap["probes"] if p["sql"] not in NOT_MODELLED_PROBES]
    assert _answers(double, [p["sql"] for p in probes]) == probes


@pytest.mark.parametrize("proxysql_double", ["2.5"], indirect=True)
def test_double_2_5_has_the_variable_defaults_and_handshake_a_real_2_5_5_showed(proxysql_double):
    """Every variable's default as a fresh real 2.5.5 showed it (2.5.5's own, where 2.6.0 changed them:
    mysql-server_version 5.5.30, have_ssl false, monitor_history 600000, set_parser_algorithm 1,
    use_tcp_keepalive false, tcp_keepalive_time 0, query_digests_groups_grouping_limit 0, server_capabilities),
    and the admin's handshake version (mysql-server_version)."""
    _has_the_defaults_and_handshake(proxysql_double, captured_2_5())


def _has_the_defaults_and_handshake(double, cap):
    """Every variable's value but a node's own, and the admin's handshake version, as in a capture; the variables
    as the double holds them."""
    variables = dict(rows(double, "SELECT variable_name, variable_value FROM global_variables")[0])
    assert {k: v for k, v in variables.items() if k not in NODE_VALUES} == {
        k: v for k, v in cap["global_variables"].items() if k not in NODE_VALUES
    }
    conn = MySQLdb.connect(**double.connect_kwargs())
    try:
        assert conn.get_server_info().split(" ")[0] == cap["server_info"]
    finally:
        conn.close()
    return variables


def _capture_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("capture", FACTS / "capture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _answers(double, statements):
    """Each statement's answer in capture.py's form, on one connection."""
    capture = _capture_module()
    conn = MySQLdb.connect(**double.connect_kwargs())
    try:
        return [{"sql": sql, **capture.run(conn, sql)} for sql in statements]
    finally:
        conn.close()


@pytest.mark.parametrize("proxysql_double", ["2.5"], indirect=True)
def test_double_2_5_hashes_passwords_at_load_as_a_real_2_5_5(proxysql_double):
    """admin-hash_passwords=true (2.5's default; the variable is gone in 2.6): LOAD MYSQL USERS TO RUNTIME puts
    '*'+SHA1(SHA1(password)) in runtime_mysql_users for a cleartext password, keeps an already hashed one, and
    an empty or NULL one becomes ''; memory and disk keep what was written until SAVE MYSQL USERS TO MEMORY brings
    the hashes back. With the variable false, runtime keeps cleartext (NULL still becomes ''). Every answer of the
    sequence the real 2.5.5 was given, exactly."""
    cap = captured_2_5()
    sequence = cap["sequences"]["hash_passwords"]
    assert _answers(proxysql_double, [s["sql"] for s in sequence]) == sequence


@pytest.mark.parametrize("proxysql_double", ["2.7"], indirect=True)
def test_double_2_7_puts_users_at_runtime_as_a_real_2_7_1(proxysql_double):
    """The same sequence on a real 2.7.1 (proxysql-2.7.1-captured.json, the same capture.py): no hashing (SET
    admin-hash_passwords is an unknown variable there), and a NULL password is '' at runtime and in memory after
    SAVE MYSQL USERS TO MEMORY, as on 2.5.5."""
    cap = json.loads((FACTS / "proxysql-2.7.1-captured.json").read_text())
    sequence = cap["sequences"]["hash_passwords"]
    assert _answers(proxysql_double, [s["sql"] for s in sequence]) == sequence


def _replay_like_the_real_one(version, captured):
    """Replayed on the double's `version`, each 2.7.1 transcript fails at the steps it failed at on the real binary
    (`captured`: its capture.py --transcript results), with the real binary's answer at each of those steps."""
    from lab.fixtures_proxysql import new_double
    from lab.tests.test_proxysql_double import REFERENCE

    capture = _capture_module()
    for transcript, real in sorted(captured["replay"].items()):
        path = REFERENCE / "transcripts" / transcript
        if not path.exists():
            missing(f"reference folder not found at {REFERENCE}")
        with new_double(version=version) as double:
            conn = MySQLdb.connect(**double.connect_kwargs())
            try:
                mine = capture.replay_transcript(conn, path, REFERENCE / "replay.py")
            finally:
                conn.close()
        assert sorted(mine["failed"], key=int) == sorted(real["failed"], key=int), transcript
        assert mine["passed"] == real["passed"], transcript
        for step, answer in real["failed"].items():
            assert {k: mine["failed"][step][k] for k in ("columns", "rows", "rowcount", "error")} == {
                k: answer[k] for k in ("columns", "rows", "rowcount", "error")
            }, (transcript, step)


def test_the_2_7_1_transcripts_differ_on_2_5_where_a_real_2_5_5_did():
    """Replayed on the double's 2.5, the 2.7.1 transcripts fail at the steps they failed at on a real 2.5.5 and
    nowhere else (SHOW TABLES; admin-hash_passwords listed; hashed passwords in runtime, memory after SAVE ... TO
    MEMORY, and disk; 158 mysql variables saved; no hostgroup_settings; no mysql_servers_v2 checksum), with the
    real 2.5.5's answer at each of those steps."""
    _replay_like_the_real_one("2.5", captured_2_5())


# ------------------------------------------------------------------------------------------- checked on a real 3.0
@pytest.mark.parametrize("proxysql_double", ["3.0"], indirect=True)
def test_double_3_0_shows_the_tables_checksums_and_statements_a_real_3_0_showed(proxysql_double):
    """Tables and columns of main, stats and monitor (the pgsql ones too), the CREATE TABLE of each main table, the
    variable names (the 133 pgsql- ones too), runtime_checksums_values' rows (pgsql_query_rules, pgsql_servers and
    pgsql_users at version 1, pgsql_variables at version 0), the stats_mysql_global names (Client_Connections_*_pass,
    Client_Connections_sha2cached, mysql_whitelisted_sqli_fingerprint for whitelisted_sqli_fingerprint) and the
    answers to a few statements, as the real 3.0 showed them."""
    _shows_what_the_real_one_showed(proxysql_double, captured_3_0())
    (pgsql_variables,), _ = rows(
        proxysql_double, "SELECT epoch, checksum FROM runtime_checksums_values WHERE name='pgsql_variables'"
    )
    assert pgsql_variables == ("0", "")


@pytest.mark.parametrize("proxysql_double", ["3.0"], indirect=True)
def test_double_3_0_has_the_variable_defaults_and_handshake_a_real_3_0_showed(proxysql_double):
    """Every variable's default as a fresh real 3.0 showed it: the mysql- and admin- ones are 2.7.1's, the pgsql- ones
    (pgsql-server_version 16.1, pgsql-threads 4, pgsql-monitor_username monitor...) 3.0's own; and the admin's
    handshake version."""
    variables = _has_the_defaults_and_handshake(proxysql_double, captured_3_0())
    runtime = dict(
        rows(
            proxysql_double,
            "SELECT variable_name, variable_value FROM runtime_global_variables WHERE variable_name LIKE 'pgsql-%'",
        )[0]
    )
    assert runtime == {k: v for k, v in variables.items() if k.startswith("pgsql-")}


@pytest.mark.parametrize("proxysql_double", ["3.0"], indirect=True)
def test_double_3_0_puts_users_at_runtime_as_a_real_3_0(proxysql_double):
    """capture.py's users sequence, every answer as the real 3.0 gave it (the same as 2.7.1: no hashing, a NULL
    password is '' at runtime)."""
    sequence = captured_3_0()["sequences"]["hash_passwords"]
    assert _answers(proxysql_double, [s["sql"] for s in sequence]) == sequence


def test_the_2_7_1_transcripts_differ_on_3_0_where_a_real_3_0_did():
    """Replayed on the double's 3.0, the 2.7.1 transcripts fail at the steps they failed at on the real 3.0 and
    nowhere else, with its answer there: SHOW TABLES of main, stats and monitor (the pgsql tables); the mirror rules
    at runtime (mirror_hostgroup shown, and used, as mirror_flagOUT and the other way round: sysown/proxysql#4867 in
    that build); SAVE ADMIN VARIABLES TO DISK writes 50 rows (admin-pgsql_ifaces); runtime_checksums_values lists
    the pgsql_* modules."""
    _replay_like_the_real_one("3.0", captured_3_0())
