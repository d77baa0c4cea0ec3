"""Configuration change sets for one of two clusters behind one ProxySQL pair (the Galera lab in 100-102, the DR
lab's dc1 in 200-202): its own hostgroups' rows only; node-wide tables are refused with the reason."""

import pytest

from apps.audit.actor import Actor
from apps.configuration import services
from apps.configuration.models import ChangeSet
from apps.configuration.change_set import plan_change_set
from apps.operations import executor
from apps.operations import services as operations
from apps.operations.models import Operation
from apps.operations.shared import GUARD_KEY
from lab import demo

pytestmark = pytest.mark.django_db(transaction=True)


def lab_rows(double):
    return demo.admin_sql(
        double.port,
        "SELECT * FROM runtime_mysql_servers WHERE hostgroup_id < 200 ORDER BY hostgroup_id, port",
        user=double.user,
        password=double.password,
    )


def test_a_change_to_one_clusters_servers_leaves_the_other_clusters_rows_alone(adopted_shared, operator_user):
    lab, dc1, doubles = adopted_shared
    before = [lab_rows(d) for d in doubles]
    v1 = services.latest(dc1)
    row = next(r for r in v1.content["mysql_servers"] if r["hostgroup_id"] == 201 and r["port"] == 3332)
    cs = services.start_change_set(dc1, actor=Actor.command(operator_user), reason="more weight")
    services.add_edit(
        cs,
        {"op": "upsert", "table": "mysql_servers", "key": [201, "127.0.0.1", 3332], "row": {**row, "weight": 20000}},
        actor=Actor.command(operator_user),
    )
    plan, collector = plan_change_set(cs)
    guard = next(g for g in plan.guards if g.key == GUARD_KEY)
    assert guard.passed and "galera-lab's 6 row(s) untouched" in guard.value
    assert "verify_others" in [s.key for s in plan.steps]
    collector.save()
    op = operations.save_plan(plan, actor=Actor.command(operator_user))
    ChangeSet.objects.filter(pk=cs.pk).update(state=ChangeSet.State.PLANNED, operation=op)
    operations.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    executor.run(op.pk)
    op = Operation.objects.get(pk=op.pk)
    assert op.state == "done", op.error
    for double, rows in zip(doubles, before):
        assert demo.admin_sql(
            double.port,
            "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=201 AND port=3332",
            user=double.user,
            password=double.password,
        ) == (("20000",),)
        assert lab_rows(double) == rows


def test_node_wide_tables_on_a_shared_proxysql_are_refused_with_the_reason(adopted_shared, operator_user):
    lab, dc1, doubles = adopted_shared
    cs = services.start_change_set(dc1, actor=Actor.command(operator_user), reason="a variable")
    services.add_edit(
        cs,
        {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"},
        actor=Actor.command(operator_user),
    )
    plan, _ = plan_change_set(cs)
    guard = next(g for g in plan.guards if g.key == "shared_node_wide_tables")
    assert not guard.passed and not guard.overridable
    assert guard.value == "global_variables on proxysql-1, proxysql-2: change them on the node itself"
