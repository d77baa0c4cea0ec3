"""Issue 9 item 2: repair a ProxySQL node from the inventory, previewed like every operation: the intended
mysql_servers rows of the cluster's hostgroups and the variables operations change, loaded, verified,
saved; nothing outside the cluster's hostgroups is touched; nodes already in sync get no statement."""

import pytest
from django.urls import reverse

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration.drift import cluster_drift
from apps.fleet.drift import AUTOINC
from apps.fleet.models import HostgroupMembership
from apps.fleet.tests.conftest import admin_sql
from apps.configuration import change_set
from apps.configuration import services as config
from apps.operations import repair, services
from apps.operations.choices import OperationState
from apps.operations.models import Operation

from .conftest import finish, run_plan, servers, variable
from conftest import adopt_double

from .test_commands import command

pytestmark = pytest.mark.django_db


def hand_edit(double):
    """What someone typed on proxysql-2: the writer drained, a reader's weight changed, a backup writer row
    deleted, a stray reader added, the auto-increment delay left at 0; and a row of another cluster's hostgroup."""
    admin_sql(
        double,
        "UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=100",
        "UPDATE mysql_servers SET weight=1 WHERE hostgroup_id=101 AND port=3312",
        "DELETE FROM mysql_servers WHERE hostgroup_id=102 AND port=3313",
        "INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (101,'127.0.0.9',3306)",
        "INSERT INTO mysql_servers (hostgroup_id,hostname,port,comment) VALUES (500,'10.0.0.5',3306,'another cluster')",
        f"SET {AUTOINC}=0",
        "LOAD MYSQL SERVERS TO RUNTIME",
        "LOAD MYSQL VARIABLES TO RUNTIME",
    )


def record_a_version_without_autoinc(cluster):
    """A version made before the variable was put in versions (or a hand-written file without it)."""
    latest = config.latest(cluster).content
    return config.record_version(
        cluster,
        {**latest, "global_variables": {k: v for k, v in latest["global_variables"].items() if k != AUTOINC}},
        actor=Actor.system(),
        reason="a version without it",
        source="change",
    )


def test_adoption_records_the_intended_variables_in_the_version(adopted_lab):
    """Issue 35 item 3: the variables operations change live in the configuration version, not on the nodes; a
    re-adoption into a cluster whose version lacks one puts it there (a version made before the variable was)."""
    cluster, (first, _) = adopted_lab
    assert config.latest(cluster).content["global_variables"][AUTOINC] == "5"
    record_a_version_without_autoinc(cluster)
    assert config.versioned_variables(cluster)[AUTOINC][0] is None
    adopt_double(first, cluster.name, "proxysql-1")
    assert config.versioned_variables(cluster)[AUTOINC] == (
        "5",
        f"configuration version {config.latest(cluster).number}",
    )


def test_repair_of_a_hand_changed_node_brings_it_back_and_drift_shows_in_sync(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    hand_edit(second)
    drift = {n.node_name: n for n in cluster_drift(cluster).nodes}
    assert drift["proxysql-1"].in_sync and not drift["proxysql-2"].in_sync
    assert [(v.name, v.intended, v.runtime) for v in drift["proxysql-2"].variables] == [(AUTOINC, "5", "0")]

    plan = repair.plan_repair(cluster)  # every node: proxysql-1 has nothing to do
    assert plan.guards_passed, plan.failed_guards
    by_name = {spec["name"]: spec for spec in plan.steps[0].nodes.values()}
    assert (
        by_name["proxysql-1"]["sql"] == []
        and plan.facts["nodes"][str(cluster.proxysql_nodes.get(name="proxysql-1").pk)]["nothing_to_do"]
    )
    sql = by_name["proxysql-2"]["sql"]
    assert "DELETE FROM mysql_servers WHERE hostgroup_id=101 AND hostname='127.0.0.9' AND port=3306" in sql
    assert sum(s.startswith("REPLACE INTO mysql_servers") for s in sql) == 3  # writer, reader weight, backup row
    assert not any("500" in s.split("VALUES")[-1][:5] or "10.0.0.5" in s for s in sql)  # never another hostgroup
    assert sql[-2:] == [
        f"UPDATE global_variables SET variable_value='5' WHERE variable_name='{AUTOINC}'",
        "LOAD MYSQL VARIABLES TO RUNTIME",
    ]
    rollback = by_name["proxysql-2"]["rollback"]  # what proxysql-2 runs now, back
    assert any("'127.0.0.9',3306" in s and s.startswith("REPLACE") for s in rollback)
    assert f"UPDATE global_variables SET variable_value='0' WHERE variable_name='{AUTOINC}'" in rollback

    op = run_plan(plan, operator_user)
    assert op.state == OperationState.DONE, op.error
    assert cluster_drift(cluster).in_sync
    assert [r for r in servers(second) if r[0] != "500"] == list(servers(first)) and variable(second, AUTOINC) == "5"
    assert admin_sql(second, "SELECT comment FROM runtime_mysql_servers WHERE hostgroup_id=500") == (
        ("another cluster",),
    )
    assert admin_sql(second, f"SELECT variable_value FROM disk.global_variables WHERE variable_name='{AUTOINC}'") == (
        ("5",),
    )
    assert AuditEvent.objects.get(action="repair done").details["operation"] == op.pk


def test_a_node_in_sync_gets_nothing_to_do(adopted_lab, operator_user, client):
    cluster, (first, _) = adopted_lab
    node = cluster.proxysql_nodes.get(name="proxysql-1")
    plan = repair.plan_repair(cluster, [node.pk])
    assert [s.nodes for s in plan.steps if s.key in ("repair", "save")] == [
        {str(node.pk): {"name": "proxysql-1", "sql": [], "rollback": []}}
    ] * 2
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    client.force_login(operator_user)
    assert "nothing to do on this node" in client.get(op.get_absolute_url()).content.decode()
    first.clear_statements()
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    assert finish(op).state == OperationState.DONE
    assert not [s for s in first.statements() if s.startswith(("UPDATE", "REPLACE", "DELETE", "LOAD", "SAVE"))]


def test_an_inventory_without_writer_is_never_written_to_a_node(adopted_lab, admin_user_role):
    cluster, _ = adopted_lab
    HostgroupMembership.objects.filter(hostgroup_id=100).delete()
    plan = repair.plan_repair(cluster)
    guard = next(g for g in plan.failed_guards if g.key == "inventory_writer")
    assert not guard.overridable
    op = services.save_plan(plan, actor=Actor.command(admin_user_role))
    with pytest.raises(services.NotAllowed, match="cannot be overridden"):
        services.confirm(op, actor=Actor.command(admin_user_role), override_reason="sure", enqueue=False)


def test_a_version_without_the_variable_is_no_intent_and_the_disk_layer_is_not_read_as_one(adopted_lab):
    """Issue 35 item 3: intent in one record. A version that does not hold the variable leaves its intent unknown:
    the repair's guard says so and how to record it; the node's disk layer (the old fallback) is not intent."""
    cluster, (_, second) = adopted_lab
    version = record_a_version_without_autoinc(cluster)
    admin_sql(second, f"SET {AUTOINC}=0", "LOAD MYSQL VARIABLES TO RUNTIME")  # the disk layer still says 5
    plan = repair.plan_repair(cluster)
    guard = next(g for g in plan.failed_guards if g.key == "intended_variables_known")
    assert guard.value == f"proxysql-1: {AUTOINC}; proxysql-2: {AUTOINC}"
    node = cluster.proxysql_nodes.get(name="proxysql-2")
    assert plan.steps[1].params["variables"][str(node.pk)] == {}
    assert config.versioned_variables(cluster)[AUTOINC] == (
        None,
        f"not in configuration version {version.number}: record what the nodes run as the next version",
    )


def test_the_latest_configuration_version_says_what_the_variable_should_be(adopted_lab, operator_user):
    """Once a change set sets it, repair and drift hold a node to the version's value, not adoption's."""
    from apps.configuration import services as config
    from apps.operations import executor, services

    cluster, (_, second) = adopted_lab
    cs = config.start_change_set(cluster, actor=Actor.command(operator_user), reason="no delay")
    config.add_edit(
        cs,
        {"op": "set", "table": "global_variables", "name": AUTOINC, "value": "2"},
        actor=Actor.command(operator_user),
    )
    op = change_set.plan_and_save(cs, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    executor.run(op.pk)
    admin_sql(second, f"SET {AUTOINC}=0", "LOAD MYSQL VARIABLES TO RUNTIME")
    plan = repair.plan_repair(cluster)
    node = cluster.proxysql_nodes.get(name="proxysql-2")
    assert "configuration version 2" in " ".join(plan.facts["nodes"][str(node.pk)]["changes"])
    assert plan.steps[1].params["variables"][str(node.pk)] == {AUTOINC: "2"}


def test_the_drift_view_offers_repair_per_node_and_for_all(adopted_lab, operator_client):
    cluster, (_, second) = adopted_lab
    hand_edit(second)
    html = operator_client.get(reverse("pages:cluster_drift", args=[cluster.pk])).content.decode()
    assert 'data-drift="variables"' in html and "Repair proxysql-2 from the inventory" in html
    assert "Repair every node from the inventory" in html and "Repair proxysql-1" not in html
    node = cluster.proxysql_nodes.get(name="proxysql-2")
    response = operator_client.post(reverse("operations:repair", args=[cluster.pk]), {"node": node.pk})
    op = Operation.objects.get(kind="repair")
    assert response["Location"] == op.get_absolute_url() and op.plan["options"] == {"nodes": [node.pk]}
    assert operator_client.post(reverse("operations:repair", args=[cluster.pk]), {"node": "99999"}).status_code == 302
    assert Operation.objects.filter(kind="repair").count() == 1
    assert AuditEvent.objects.filter(action="repair planned", outcome="invalid").exists()


def test_with_a_node_down_the_drift_view_offers_the_nodes_that_answer_not_every_node(adopted_lab, operator_client):
    """A plan for every node is refused while one does not answer: the drift view says so and offers a repair of
    the nodes that answer and differ, one plan for them, whose guards pass."""
    cluster, (first, second) = adopted_lab
    hand_edit(first)
    second.set_mode("refuse")
    html = operator_client.get(reverse("pages:cluster_drift", args=[cluster.pk])).content.decode()
    assert 'data-drift="unreachable"' in html and "Repair every node from the inventory" not in html
    assert 'data-drift="repair-waits"' in html and "proxysql-2\n  does not answer" in html
    assert "Repair proxysql-1 (the node that answers and differs) from the inventory" in html
    node = cluster.proxysql_nodes.get(name="proxysql-1")
    response = operator_client.post(reverse("operations:repair", args=[cluster.pk]), {"node": [node.pk]})
    op = Operation.objects.get(kind="repair")
    assert response["Location"] == op.get_absolute_url() and op.plan["options"] == {"nodes": [node.pk]}
    assert op.state != OperationState.REFUSED and all(g["passed"] for g in op.plan["guards"]), op.plan["guards"]
    second.set_mode("normal")
    both = list(cluster.proxysql_nodes.order_by("pk").values_list("pk", flat=True))
    operator_client.post(reverse("operations:repair", args=[cluster.pk]), {"node": both})
    assert Operation.objects.filter(kind="repair").latest("pk").plan["options"] == {"nodes": both}
    operator_client.post(reverse("operations:repair", args=[cluster.pk]), {"node": [node.pk, 99999]})
    assert Operation.objects.filter(kind="repair").count() == 2  # one unknown node: nothing planned
    assert AuditEvent.objects.filter(action="repair planned", outcome="invalid").exists()


# -- issue 21: three layers ---------------------------------------------------------------------------------
def layers(double):
    """The cluster's mysql_servers rows and the auto-increment delay, in each layer."""
    out = {}
    for layer, prefix in (("memory", ""), ("runtime", "runtime_"), ("disk", "disk.")):
        out[layer] = (
            admin_sql(
                double,
                f"SELECT * FROM {prefix}mysql_servers WHERE hostgroup_id IN (100, 101, 102) "
                "ORDER BY hostgroup_id, port",
            ),
            admin_sql(double, f"SELECT variable_value FROM {prefix}global_variables WHERE variable_name='{AUTOINC}'"),
        )
    return out


@pytest.mark.django_db(transaction=True)  # the command runs the operation on a thread of its own
def test_a_node_whose_disk_alone_differs_is_planned_saved_and_verified(adopted_lab, operator_user, client):
    """Found on the real pair: a switchover rolled back in memory and runtime, but proxysql-1's disk kept the new
    writer; repair said proxysql-1 was fine (its runtime matched) and a restart made it write to 127.0.0.1:3312."""
    cluster, (first, second) = adopted_lab
    intended = layers(first)
    assert intended["memory"] == intended["runtime"] == intended["disk"]
    admin_sql(
        first,
        "UPDATE mysql_servers SET port=3312 WHERE hostgroup_id=100",
        "SAVE MYSQL SERVERS TO DISK",
        "UPDATE mysql_servers SET port=3311 WHERE hostgroup_id=100",
        f"SET {AUTOINC}=0",
        "SAVE MYSQL VARIABLES TO DISK",
        f"SET {AUTOINC}=5",
    )
    assert layers(first)["memory"] == layers(first)["runtime"] == intended["runtime"] != layers(first)["disk"]

    plan = repair.plan_repair(cluster)
    assert plan.guards_passed, plan.failed_guards
    one, two = (str(cluster.proxysql_nodes.get(name=name).pk) for name in ("proxysql-1", "proxysql-2"))
    facts = plan.facts["nodes"]
    assert not facts[one]["nothing_to_do"] and facts[two]["nothing_to_do"]
    assert facts[one]["changes"] == [
        "disk: hg 100 127.0.0.1:3311: missing: a restart would not send writes to 127.0.0.1:3311",
        "disk: hg 100 127.0.0.1:3312: ONLINE, not in the inventory: a restart would send writes to 127.0.0.1:3312",
        f"disk: {AUTOINC}: 0 → 5 (configuration version 1)",
    ]
    steps = {s.key: s for s in plan.steps}
    assert steps["repair"].nodes[one]["sql"] == []  # memory and runtime are right: nothing to write or load
    assert steps["save"].nodes[one]["sql"] == ["SAVE MYSQL SERVERS TO DISK", "SAVE MYSQL VARIABLES TO DISK"]
    assert steps["save"].nodes[two]["sql"] == []
    client.force_login(operator_user)
    shown = client.get(services.save_plan(plan, actor=Actor.command(operator_user)).get_absolute_url()).content.decode()
    assert "disk: hg 100 127.0.0.1:3312: ONLINE, not in the inventory: a restart would send writes to" in shown
    assert 'proxysql-2</strong>: <span class="ok-text">nothing to do</span> (memory, runtime and disk match' in shown

    code, out = command("repair", "galera-lab", "--user", operator_user.username, "--yes")
    assert code == 0, out
    assert f"  proxysql-1: {'; '.join(facts[one]['changes'])}\n" in out and "  proxysql-2: nothing to do\n" in out
    op = Operation.objects.filter(kind="repair").latest("pk")
    assert op.state == OperationState.DONE and op.steps.get(key="verify_disk").state == "done"
    assert layers(first) == intended
    first.restart()  # a restart loads disk: it keeps the writer
    assert layers(first) == intended


def test_the_disk_verify_finds_a_disk_that_differs(adopted_lab, operator_user):
    from apps.operations import executor

    cluster, (first, _) = adopted_lab
    plan = repair.plan_repair(cluster)
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    step = next(s for s in plan.steps if s.key == "verify_disk")
    admin_sql(
        first, "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313", "SAVE MYSQL SERVERS TO DISK"
    )
    run = executor.Run(op)
    try:
        with pytest.raises(
            executor.StepFailed, match="disk differs from the plan: node .*: disk hg 101 127.0.0.1:3313"
        ):
            run.verify(step, {})
    finally:
        run.close()


def test_the_repair_planner_reads_once_then_judges_and_builds_from_the_read_alone(
    adopted_lab, django_assert_num_queries
):
    """Issue 35 item 5, as the switchover's: read_repair reads the nodes, the intent, the lock and pending rows;
    repair_guards and repair_steps make no query and open no connection (both nodes refusing), and give plan_repair's
    guards and steps."""
    cluster, doubles = adopted_lab
    hand_edit(doubles[1])
    read = repair.read_repair(cluster)
    assert len(read.per_node) == 2 and read.intended
    for d in doubles:
        d.set_mode("refuse")
    try:
        with django_assert_num_queries(0):
            guards, operational = repair.repair_guards(cluster, read)
            steps = repair.repair_steps(read)
    finally:
        for d in doubles:
            d.set_mode("normal")
    plan = repair.plan_repair(cluster)
    assert [(g.key, g.passed, g.value) for g in guards] == [(g.key, g.passed, g.value) for g in plan.guards]
    assert [(s.key, s.nodes, s.params) for s in steps] == [(s.key, s.nodes, s.params) for s in plan.steps]
    assert bool(operational) == ("instead" in plan.facts)
