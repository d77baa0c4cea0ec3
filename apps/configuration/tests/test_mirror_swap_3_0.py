"""A ProxySQL 3.0 build that exchanges a query rule's mirror_hostgroup and mirror_flagOUT at LOAD (seen on a real
3.0.1-39-g596d5ba, sysown/proxysql#4867; the double's 3.0 does the same): the drift says what it is and that no LOAD
repairs it, and a change set whose rule comes back exchanged is rolled back saying so, never reported as plain drift
to be written back forever."""

import pytest

from apps.audit.actor import Actor
from apps.clients.proxysql_versions import MIRROR_SWAP_WORDS
from apps.configuration import services
from apps.configuration.drift import cluster_drift
from apps.fleet.models import Cluster
from lab import demo

from .test_mixed_versions import run

pytestmark = pytest.mark.django_db(transaction=True)
RULE = (
    "INSERT INTO mysql_query_rules (rule_id, active, match_digest, destination_hostgroup, mirror_hostgroup, "
    "mirror_flagOUT, apply) VALUES (40, 1, '^SELECT', 101, 100, 7, 1)"
)


def three_0(proxysql_double_factory, *statements):
    double = proxysql_double_factory(1, version="3.0")[0]
    demo.admin_sql(double.port, *demo.seed_statements(), *statements, user=double.user, password=double.password)
    return double


def test_the_drift_names_the_exchange_and_that_no_load_repairs_it(proxysql_double_factory, galera_lab):
    """Adopted with the rule loaded: the node's runtime (what adoption records) holds memory's and disk's mirror
    columns exchanged. One finding says so; the per-column differences stay in the table, without words of drift."""
    from conftest import adopt_double

    double = three_0(
        proxysql_double_factory, RULE, "LOAD MYSQL QUERY RULES TO RUNTIME", "SAVE MYSQL QUERY RULES TO DISK"
    )
    adopt_double(double, "galera-lab", "proxysql-30")
    node = next(iter(cluster_drift(Cluster.objects.get(name="galera-lab")).nodes))
    said = [(f.layer, f.words) for f in node.findings if f.table == "mysql_query_rules"]
    assert said == [
        (
            "runtime",
            "proxysql-30 runs query rule 40 with mirror_hostgroup and mirror_flagOUT exchanged "
            "against its memory (memory mirror_hostgroup 100 and mirror_flagOUT 7, runtime 7 and "
            f"100): {MIRROR_SWAP_WORDS}",
        )
    ], said
    assert {d.key for d in node.layers if d.table == "mysql_query_rules"} == {(40,)}  # still shown as differing


def test_a_change_set_whose_rule_comes_back_exchanged_is_rolled_back_saying_so(
    proxysql_double_factory, galera_lab, operator_user
):
    from conftest import adopt_double

    adopt_double(three_0(proxysql_double_factory), "galera-lab", "proxysql-30")
    cluster = Cluster.objects.get(name="galera-lab")
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="mirror the reads")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {
                "rule_id": 40,
                "active": 1,
                "match_digest": "^SELECT",
                "destination_hostgroup": 101,
                "mirror_hostgroup": 100,
                "mirror_flagOUT": 7,
                "apply": 1,
            },
        },
        actor=Actor.command(operator_user),
    )
    op, plan = run(cs, operator_user)
    assert op.state == "rolled_back", (op.error, plan.failed_guards)
    assert f"mirror_hostgroup/mirror_flagOUT exchanged; {MIRROR_SWAP_WORDS}" in op.error, op.error
