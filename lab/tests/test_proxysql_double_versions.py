"""The double answering as ProxySQL 2.5, 2.6, 2.7 or 3.0, held to the facts read from ProxySQL's own source at
each tag (lab/reference/versions/proxysql-<v>.json, not from running binaries), and the 2.7 facts held to the
schema captured on a real 2.7.1 (lab/proxysql_double/schema/): the extraction itself is checked once."""
import json
from pathlib import Path

import MySQLdb
import pytest

from lab.proxysql_double import versions
from conftest import missing

FACTS = Path(__file__).resolve().parents[1] / "reference" / "versions"
SCHEMA = Path(__file__).resolve().parents[1] / "proxysql_double" / "schema"


def facts(version):
    return json.loads((FACTS / f"proxysql-{version}.json").read_text())


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
    captured_tables = sorted(p.name[len("main."):-len(".sql")] for p in SCHEMA.glob("main.*.sql"))
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
    assert rows(proxysql_double, "SELECT variable_value FROM global_variables WHERE variable_name='admin-version'"
                )[0] == [answer]
    tables = [r[0] for r in rows(proxysql_double, "SHOW TABLES")[0]]
    assert tables == sorted(f["tables"]["admin"])
    for table in tables:
        _, description = rows(proxysql_double, f"SELECT * FROM {table} LIMIT 0")
        assert [d[0] for d in description] == f["tables"]["admin"][table], table
    names = {r[0] for r in rows(proxysql_double, "SELECT variable_name FROM global_variables")[0]}
    expected = {f"mysql-{n}" for n in f["variables"]["mysql"]} | {f"admin-{n}" for n in f["variables"]["admin"]}
    assert names == expected | set(versions.TRACKED)
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
    for table in ("mysql_servers", "mysql_users", "mysql_query_rules", "mysql_galera_hostgroups",
                  "mysql_replication_hostgroups", "scheduler"):   # the tables the product writes: alike in all four
        assert {v: facts(v)["tables"]["admin"][table] for v in versions.FULL} == {
            v: new["tables"]["admin"][table] for v in versions.FULL}, table


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
        assert cur.execute("SET mysql-default_tx_isolation='READ-COMMITTED'") == 1   # 2.5 has it, 2.6 dropped it
        with pytest.raises(MySQLdb.OperationalError, match="no such table: mysql_servers_ssl_params"):
            cur.execute("SELECT * FROM mysql_servers_ssl_params")
        for statement in ("LOAD MYSQL SERVERS TO RUNTIME", "SAVE MYSQL SERVERS TO DISK",
                          "LOAD MYSQL VARIABLES TO RUNTIME", "SAVE MYSQL VARIABLES TO DISK"):
            cur.execute(statement)
    finally:
        conn.close()


# Replaying the 2.7.1 transcripts on another version, only the steps that meet what that version differs in fail.
EXPECTED_DIFFERENCES = {
    ("2.5", "admin-statements.jsonl"): {3: "SHOW TABLES: no mysql_servers_ssl_params (+ runtime_)"},
    ("2.5", "config-statements.jsonl"): {3: "admin-hash_passwords is still a variable",
                                         75: "SAVE MYSQL VARIABLES TO DISK writes 158 rows, not 163 (5 fewer)",
                                         87: "mysql_hostgroup_attributes has no hostgroup_settings",
                                         103: "runtime_checksums_values has no mysql_servers_v2"},
    ("2.6", "admin-statements.jsonl"): {},
    ("2.6", "config-statements.jsonl"): {},
    ("3.0", "admin-statements.jsonl"): {3: "SHOW TABLES: the pgsql_* tables"},
    ("3.0", "config-statements.jsonl"): {76: "SAVE ADMIN VARIABLES TO DISK writes 50 rows (admin-pgsql_ifaces)"},
}


@pytest.mark.parametrize("version,transcript", sorted(EXPECTED_DIFFERENCES))
def test_the_2_7_1_transcripts_differ_on_another_version_only_where_its_source_does(version, transcript):
    from lab.proxysql_double import ProxySQLDouble
    from lab.tests.test_proxysql_double import REFERENCE, replay_transcript

    path = REFERENCE / "transcripts" / transcript
    if not path.exists():
        missing(f"reference folder not found at {REFERENCE}")
    with ProxySQLDouble(version=version) as double:
        _, failures, _ = replay_transcript(double, path)
    assert {int(f.split()[1].rstrip(":")) for f in failures} == set(EXPECTED_DIFFERENCES[(version, transcript)]), failures
