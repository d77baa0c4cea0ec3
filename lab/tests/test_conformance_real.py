"""The double held to the real ProxySQL (issue 33, real tier): the reference transcripts and the lab's own statement
scripts (lab/reference/conformance/*.sql, the NULL and defaults script at least) replayed on a fresh double and on a
fresh real node of the same version, 2.7.1 and 2.5.5, in the same run; every answer compared (column names, rows with
NULL against '', affected rows, error texts). A difference fails unless lab/reference/conformance/differences.json
lists it for that version with its reason."""

import pytest

from lab import conformance
from lab.fixtures_real_proxysql import REAL_VERSIONS
from lab.proxysql_double import ProxySQLDouble
from lab.real_proxysql import config_variables


def test_every_script_is_there():
    found = conformance.scripts()
    if not (conformance.REFERENCE / "transcripts").is_dir():
        pytest.fail(
            f"reference transcripts not found at {conformance.REFERENCE} (CI has ../shared beside the checkout)",
            pytrace=False,
        )
    assert {
        "admin-statements.jsonl",
        "config-statements.jsonl",
        "null-defaults.sql",
        "variables-blank.sql",
    } <= found.keys()


@pytest.mark.parametrize("version", REAL_VERSIONS)
def test_the_double_answers_every_script_as_a_real_proxysql(version, real_proxysql_factory, galera_lab):
    # galera_lab: the transcripts' backends are the Galera lab's ports (127.0.0.1:3311-3313), as when captured
    unexplained = []
    for script, statements in conformance.scripts().items():
        node = real_proxysql_factory(version, name=f"conformance-{script.split('.')[0]}")
        try:
            real = conformance.replay(node.port, statements)
        finally:
            node.stop()
        # the double started with the real node's config file's variables, as the real node was
        with ProxySQLDouble(
            version=conformance.DOUBLE_VERSION[version], variables=config_variables(node.client_port)
        ) as double:
            doubled = conformance.replay(double.port, statements)
        assert len(real) == len(doubled) == len(statements)
        unexplained += conformance.unexplained(
            version, script, conformance.differences(script, statements, doubled, real)
        )
    assert unexplained == [], "\n".join(unexplained)


def test_the_null_script_reads_null_as_a_real_node_does_at_runtime():
    """What the double must show (measured on real 2.7.1 and 2.5.5 with null-defaults.sql): NULL default_schema and
    password read '' at runtime, a NULL re_modifiers '' and a lower-case one upper-cased, a '' digest NULL, inactive
    rules absent; main and disk keep what was written."""
    statements = conformance.scripts()["null-defaults.sql"]
    with ProxySQLDouble(version="2.7") as double:
        answers = dict(zip(statements, conformance.replay(double.port, statements)))

    def rows(sql):
        a = answers[sql]
        return [dict(zip(a.columns, r)) for r in a.rows]

    runtime_users = {r["username"]: r for r in rows("SELECT * FROM runtime_mysql_users ORDER BY username, backend")}
    disk_users = {r["username"]: r for r in rows("SELECT * FROM disk.mysql_users ORDER BY username, backend")}
    assert (runtime_users["u_nopass"]["password"], runtime_users["u_nopass"]["default_schema"]) == ("", "")
    assert (disk_users["u_nopass"]["password"], disk_users["u_nopass"]["default_schema"]) == (None, None)
    assert "inactive" not in runtime_users and "inactive" in disk_users
    runtime_rules = {r["rule_id"]: r for r in rows("SELECT * FROM runtime_mysql_query_rules ORDER BY rule_id")}
    memory_rules = {r["rule_id"]: r for r in rows("SELECT * FROM mysql_query_rules ORDER BY rule_id")}
    assert "1" not in runtime_rules  # active 0
    assert runtime_rules["2"]["re_modifiers"] == "" and runtime_rules["3"]["digest"] is None
    assert runtime_rules["4"]["re_modifiers"] == "CASELESS,GLOBAL"
    assert "1" not in memory_rules  # SAVE MYSQL QUERY RULES FROM RUNTIME brought runtime back over memory


def test_a_missing_binary_fails_the_test_never_skips_it():
    from lab.fixtures_real_proxysql import real_binary

    with pytest.raises(pytest.fail.Exception, match=r"real ProxySQL 9\.9\.9 not found at .*shared/proxysql/9\.9\.9"):
        real_binary("9.9.9")
    assert all(real_binary(v).is_file() for v in REAL_VERSIONS)
