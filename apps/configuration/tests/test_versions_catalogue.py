"""clients/proxysql_versions.py against the facts read from ProxySQL's source per version (lab/reference/versions)."""

import itertools
import json
from pathlib import Path

from apps.clients import proxysql_versions as versions
from apps.configuration import tables, variables

FACTS = Path(__file__).resolve().parents[3] / "lab" / "reference" / "versions"


def facts(version):
    return json.loads((FACTS / f"proxysql-{version}.json").read_text())


def names(f):
    return {f"mysql-{n}" for n in f["variables"]["mysql"]} | {f"admin-{n}" for n in f["variables"]["admin"]}


def test_the_variables_that_differ_between_versions_are_the_sources():
    per_version = {v: names(facts(v)) for v in versions.KNOWN}
    every = set.union(*per_version.values())
    differing = {
        n: tuple(v for v in versions.KNOWN if n in per_version[v])
        for n in every
        if not all(n in per_version[v] for v in versions.KNOWN)
    }
    assert differing == versions.VARIABLE_VERSIONS


def test_the_tables_the_console_writes_have_the_same_columns_in_every_version():
    for table, (a, b) in itertools.product(tables.TABLES, itertools.combinations(versions.KNOWN, 2)):
        assert facts(a)["tables"]["admin"][table.name] == facts(b)["tables"]["admin"][table.name], (table.name, a, b)
        assert [c.name for c in table.columns] == facts(a)["tables"]["admin"][table.name], table.name


def test_versions_read_from_what_nodes_answer_and_what_each_lacks():
    assert versions.series("2.7.1-16-g2726c27") == "2.7" and versions.series("2.5.5-lab-double") == "2.5"
    assert versions.series("3.0.0-alpha-27-g596d5ba2") == "3.0" and versions.series("") is None
    assert versions.lacks("2.5.5", "mysql-handle_warnings") and not versions.lacks("2.6.6", "mysql-handle_warnings")
    assert versions.lacks("2.7.1", "admin-hash_passwords") and not versions.lacks("unknown", "admin-hash_passwords")
    assert not versions.lacks("2.5.5", "mysql-max_connections")


def test_a_variable_of_another_version_than_2_7_passes_the_variable_check():
    assert variables.check("mysql-default_tx_isolation", "READ-COMMITTED") == ("READ-COMMITTED", None)
    value, why = variables.check("mysql-no_such_thing", "1")
    assert value is None and "nor a 2.5, 2.6 or 3.0 one" in why


def captured(version):
    return json.loads((FACTS / f"proxysql-{version}-captured.json").read_text())["global_variables"]


def test_the_defaults_that_differ_between_versions_are_what_real_nodes_showed():
    """A fresh real 2.5.5, 2.7.1 and 3.0 started with the same configuration (lab/reference/versions, capture.py);
    3.0's mysql- and admin- defaults are 2.7.1's (listeners and version aside)."""
    old, new, v3 = captured("2.5.5"), captured("2.7.1"), captured("3.0")
    differing = {
        n: {"2.5": old[n], "2.6": new[n], "2.7": new[n], "3.0": v3[n]}
        for n in set(old) & set(new)
        if old[n] != new[n] and n != "admin-version"
    }
    assert differing == versions.DEFAULTS
    own = {"admin-version", "admin-mysql_ifaces", "mysql-interfaces"}
    assert {n for n in set(new) & set(v3) if new[n] != v3[n]} == own


def test_a_nodes_own_version_default_against_another_versions_is_no_drift():
    intended = {"global_variables": {"mysql-server_version": "5.5.30", "mysql-max_connections": "2048"}}  # from a 2.5
    assert versions.versions_differ("mysql-server_version", intended, "8.0.11", "2.7.1-0-g2726c27")
    assert versions.versions_differ("mysql-server_version", intended, "8.0.11", "3.0.1-39-g596d5ba")  # 3.0's: 2.7's
    assert not versions.versions_differ("mysql-server_version", intended, "5.7.40", "2.7.1")  # set by hand: drift
    assert not versions.versions_differ("mysql-server_version", intended, "8.0.11", "2.5.5")  # not 2.5's default
    assert not versions.versions_differ("mysql-server_version", intended, "8.0.11", "")  # version unknown
    assert not versions.versions_differ("mysql-max_connections", intended, "1000", "2.7.1")  # same default everywhere
    by_hand = {"global_variables": {"mysql-server_version": "5.7.40"}}  # intent is no version's default
    assert not versions.versions_differ("mysql-server_version", by_hand, "8.0.11", "2.7.1")
    assert versions.versions_differ("mysql-handle_warnings", intended, None, "2.5.5")  # one side lacks it, as before


def test_a_3_0_nodes_postgresql_listener_is_its_own_not_the_clusters():
    """admin-pgsql_ifaces (3.0) is the node's PostgreSQL admin listener, as admin-mysql_ifaces is its MySQL one: a
    real 3.0 lists the one it was started with (proxysql-3.0-captured.json), so a configuration adopted from one
    node must not carry it to the others; pgsql- variables are not managed at all."""
    listener = json.loads((FACTS / "proxysql-3.0-captured.json").read_text())["global_variables"]["admin-pgsql_ifaces"]
    assert listener == "127.0.0.1:16134"  # what the node was started with, not 3.0's default 0.0.0.0:6132
    assert not variables.managed("admin-pgsql_ifaces") and not variables.managed("admin-mysql_ifaces")
    assert variables.check("admin-pgsql_ifaces", "127.0.0.1:6132")[0] is None
    assert not variables.managed("pgsql-interfaces")
