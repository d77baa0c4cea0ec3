"""Configuration never moves the writer (issue 21): who writes and which servers are drained belong to operations.
On the lab pair: a revert across a switchover keeps the writer and says so; a change set or a file that moves the
writer, drains or restores a server is refused with the operation to use; a node running another writer counts."""

import re

import pytest
from django.urls import reverse

from apps.audit.actor import Actor
from apps.configuration import files, services
from apps.configuration.change_set import plan_change_set
from apps.fleet.models import Server
from apps.configuration import change_set
from apps.operations import drain, executor, switchover
from apps.operations import services as operations
from apps.operations.models import Operation

from .test_change_sets import run, sql, versioned_lab  # noqa: F401 (versioned_lab is a fixture)
from .test_files import command, edited

pytestmark = pytest.mark.django_db(transaction=True)

WRITER_ROW = re.compile(r"mysql_servers .*(VALUES \(100,|hostgroup_id=100 )")


def row(content, hg, port):
    return next(r for r in content["mysql_servers"] if (r["hostgroup_id"], r["port"]) == (hg, port))


def run_operation(plan, user):
    """An operation (switchover, drain) planned, confirmed and run as a worker runs it."""
    op = operations.save_plan(plan, actor=Actor.command(user))
    operations.confirm(op, actor=Actor.command(user), enqueue=False)
    executor.run(op.pk)
    op = Operation.objects.get(pk=op.pk)
    assert op.state == "done", op.error


def runtime_writers(double):
    return sql(double, "SELECT port, status FROM runtime_mysql_servers WHERE hostgroup_id=100")


def test_a_revert_across_a_switchover_keeps_the_writer_and_says_so(versioned_lab, operator_user, live_redis, client):
    cluster, doubles, v1 = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="lighter reader")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_servers",
            "key": [101, "127.0.0.1", 3313],
            "row": {**row(v1.content, 101, 3313), "weight": 5},
        },
        actor=Actor.command(operator_user),
    )
    op, plan = run(cs, operator_user)  # an ordinary weight change plans and applies
    assert op.state == "done", op.error
    assert not [g for g in plan.guards if g.key.startswith("operational")]
    v2 = services.latest(cluster)
    for d in doubles:
        d.traffic.clear_sessions()
    run_operation(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    v3 = services.latest(cluster)
    assert (v3.number, [r["port"] for r in v3.content["mysql_servers"] if r["hostgroup_id"] == 100]) == (3, [3312])

    # Version 2 differs from version 3 only in the writer: nothing to revert.
    with pytest.raises(services.Refused) as refused:
        services.revert_to(cluster, v2, actor=Actor.command(operator_user), reason="")
    assert "nothing to revert" in str(refused.value) and "keeps the writer 127.0.0.1:3312" in str(refused.value)

    # The version's page says what a revert keeps, before one is planned.
    client.force_login(operator_user)
    page = client.get(v1.get_absolute_url()).content.decode()
    assert "<li>The revert keeps the writer 127.0.0.1:3312 (moved since version 1 by operations" in page

    revert = services.revert_to(cluster, v1, actor=Actor.command(operator_user), reason="")
    assert revert.reason.startswith(
        "revert to version 1. The revert keeps the writer 127.0.0.1:3312 (moved since "
        "version 1 by operations, last in version 3: "
    )
    assert revert.reason.endswith("version 1's writer was 127.0.0.1:3311.")
    op, plan = run(revert, operator_user)
    assert op.state == "done", op.error
    # The title says what the change set does (issue 36 item 11); its reason is kept beside it.
    assert plan.title == f"Change set #{revert.pk} on galera-lab: 1 server row (version 3 → 4)"
    assert plan.facts["reason"].startswith("revert to version 1. The revert keeps the writer 127.0.0.1:3312")
    assert [line["key"] for line in plan.facts["intended_diff"]] == [[101, "127.0.0.1", 3313]]
    statements = [s for n in plan.steps[0].nodes.values() for s in n["sql"] + n["rollback"]]
    assert any("3313" in s for s in statements) and not [s for s in statements if WRITER_ROW.search(s)]
    assert not [f for f in plan.facts["findings"] if f["key"].startswith("operational")]
    for d in doubles:
        assert runtime_writers(d) == (("3312", "ONLINE"),)
        assert sql(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == (("10000",),)
    v4 = services.latest(cluster)
    assert v4.number == 4 and [r["port"] for r in v4.content["mysql_servers"] if r["hostgroup_id"] == 100] == [3312]


def test_a_revert_across_a_drain_keeps_the_server_drained_and_says_so(versioned_lab, operator_user):
    cluster, doubles, v1 = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="heavier reader")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_servers",
            "key": [101, "127.0.0.1", 3312],
            "row": {**row(v1.content, 101, 3312), "weight": 20000},
        },
        actor=Actor.command(operator_user),
    )
    assert run(cs, operator_user)[0].state == "done"
    run_operation(drain.plan_drain(Server.objects.get(port=3313), drain_timeout_ms=2000), operator_user)
    assert row(services.latest(cluster).content, 101, 3313)["status"] == "OFFLINE_SOFT"

    revert = services.revert_to(cluster, v1, actor=Actor.command(operator_user), reason="back to one")
    assert revert.reason == (
        "back to one. The revert keeps 127.0.0.1:3313 in hostgroup 101 OFFLINE_SOFT (version 1 "
        "had it ONLINE); keeps 127.0.0.1:3313 in hostgroup 102 OFFLINE_SOFT (version 1 had it "
        "ONLINE)."
    )
    op, plan = run(revert, operator_user)
    assert op.state == "done", op.error
    assert [line["key"] for line in plan.facts["intended_diff"]] == [[101, "127.0.0.1", 3312]]
    for d in doubles:
        assert sql(d, "SELECT hostgroup_id, status FROM runtime_mysql_servers WHERE port=3313 ORDER BY 1") == (
            ("101", "OFFLINE_SOFT"),
            ("102", "OFFLINE_SOFT"),
        )
        assert sql(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3312") == (("10000",),)


def test_a_change_set_that_moves_the_writer_is_refused_with_use_a_switchover(
    versioned_lab, operator_user, admin_user_role, client
):
    cluster, doubles, v1 = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="new writer")
    services.add_edit(
        cs,
        {"op": "delete", "table": "mysql_servers", "key": [100, "127.0.0.1", 3311]},
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        cs,
        {"op": "upsert", "table": "mysql_servers", "row": {**row(v1.content, 100, 3311), "port": 3312}},
        actor=Actor.command(operator_user),
    )
    op = change_set.plan_and_save(cs, actor=Actor.command(operator_user))
    guards = [g for g in Operation.objects.get(pk=op.pk).plan["guards"] if not g["passed"]]
    writer = [g for g in guards if g["key"] == "operational_writer"]
    assert len(writer) == 1 and not writer[0]["overridable"], guards
    assert writer[0]["label"] == (
        "Moves the writer from 127.0.0.1:3311 to 127.0.0.1:3312: use a switchover to 127.0.0.1:3312 "
        "(the cluster's page → Planned switchover) instead"
    )
    with pytest.raises(operations.NotAllowed, match="cannot be overridden: Moves the writer"):
        operations.confirm(op, actor=Actor.command(admin_user_role), override_reason="I know", enqueue=False)
    client.force_login(operator_user)  # the plan page's effect check names it
    page = client.get(reverse("operations:detail", args=[op.pk])).content.decode()
    assert (
        'data-finding="operational_writer"' in page
        and "use a switchover to 127.0.0.1:3312 (the cluster&#x27;s page" in page
    )
    for d in doubles:
        assert runtime_writers(d) == (("3311", "ONLINE"),)
    assert services.latest(cluster).number == 1


def test_a_change_set_that_drains_a_server_is_refused_with_use_a_maintenance_drain(versioned_lab, operator_user):
    cluster, doubles, v1 = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="maintenance")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_servers",
            "key": [101, "127.0.0.1", 3313],
            "row": {**row(v1.content, 101, 3313), "status": "OFFLINE_SOFT"},
        },
        actor=Actor.command(operator_user),
    )
    plan, _ = plan_change_set(cs)
    failed = [g for g in plan.failed_guards if g.key.startswith("operational")]
    assert [(g.key, g.label, g.overridable) for g in failed] == [
        (
            "operational_drain",
            "Drains 127.0.0.1:3313 in hostgroup 101 (ONLINE → OFFLINE_SOFT): use a maintenance "
            "drain (the server's page → Maintenance drain) instead",
            False,
        )
    ]
    assert [f["key"] for f in plan.facts["findings"]].count("operational_drain") == 1  # on the plan page


def test_a_file_that_moves_the_writer_is_refused(versioned_lab, operator_user, tmp_path):
    cluster, doubles, v1 = versioned_lab

    def move(doc):
        for r in doc["mysql_servers"]:
            if r["hostgroup_id"] == 100:
                r["port"] = 3313

    path = tmp_path / "cluster.yaml"
    path.write_text(edited(files.export(v1), move))
    code, out = command("plan", cluster.name, str(path), "--user", operator_user.username)
    assert code == 2, out
    assert "Moves the writer from 127.0.0.1:3311 to 127.0.0.1:3313: use a switchover to 127.0.0.1:3313 " in out
    code, out = command("apply", cluster.name, str(path), "--user", operator_user.username, "--yes")
    assert code == 2 and "use a switchover" in out, out
    for d in doubles:
        assert runtime_writers(d) == (("3311", "ONLINE"),)
    assert services.latest(cluster).number == 1


def test_a_node_running_another_writer_refuses_a_change_that_loads_its_servers(versioned_lab, operator_user):
    """proxysql-2's writer was moved by hand: a weight change would load its mysql_servers and move its writer
    back to the version's, without a drain. Refused for a change set that loads mysql_servers; a variable change
    (no mysql_servers statement) is not refused; the write-back (the repair to the version) names it and is not refused."""
    cluster, (first, second), v1 = versioned_lab
    sql(second, "UPDATE mysql_servers SET port=3312 WHERE hostgroup_id=100")
    sql(second, "LOAD MYSQL SERVERS TO RUNTIME")
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="lighter reader")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_servers",
            "key": [101, "127.0.0.1", 3313],
            "row": {**row(v1.content, 101, 3313), "weight": 5},
        },
        actor=Actor.command(operator_user),
    )
    plan, _ = plan_change_set(cs)
    failed = [g for g in plan.failed_guards if g.key.startswith("operational")]
    assert [(g.label, g.overridable) for g in failed] == [
        (
            "On proxysql-2, this change moves the writer from 127.0.0.1:3312 to 127.0.0.1:3311: use a switchover to "
            "127.0.0.1:3311 (the cluster's page → Planned switchover) instead",
            False,
        )
    ]

    variables = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="connections")
    services.add_edit(
        variables,
        {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"},
        actor=Actor.command(operator_user),
    )
    plan, _ = plan_change_set(variables)
    # A change set writes its diff's rows only (h-config-rows): a variable change loads no mysql_servers, so it
    # leaves proxysql-2's writer as the node has it (drift, for a switchover or a write-back) and is not refused.
    assert not [g for g in plan.failed_guards if g.key.startswith("operational")]
    second_sql = next(n["sql"] for n in plan.steps[0].nodes.values() if n["name"] == "proxysql-2")
    assert second_sql and not [s for s in second_sql if WRITER_ROW.search(s) or "MYSQL SERVERS" in s]

    back = services.write_back(
        cluster, actor=Actor.command(operator_user), nodes=[cluster.proxysql_nodes.get(name="proxysql-2")]
    )
    plan, _ = plan_change_set(back)
    assert not [g for g in plan.failed_guards if g.key.startswith("operational")]
    told = [f for f in plan.facts["findings"] if f["key"] == "operational_writer"]
    assert len(told) == 1 and not told[0]["blocking"] and "On proxysql-2" in told[0]["label"]


def test_taking_in_a_runtime_with_another_writer_is_refused(versioned_lab, operator_user):
    """proxysql-2's writer moved by hand: taking its runtime into a new version would move the writer of every
    other node without a drain."""
    cluster, (first, second), v1 = versioned_lab
    sql(second, "UPDATE mysql_servers SET port=3312 WHERE hostgroup_id=100")
    sql(second, "LOAD MYSQL SERVERS TO RUNTIME")
    cs = services.take_runtime(
        cluster, cluster.proxysql_nodes.get(name="proxysql-2"), actor=Actor.command(operator_user), reason=""
    )
    plan, _ = plan_change_set(cs)
    assert [(g.key, g.label.split(": ")[0]) for g in plan.failed_guards if g.key.startswith("operational")] == [
        ("operational_writer", "Moves the writer from 127.0.0.1:3311 to 127.0.0.1:3312")
    ]  # proxysql-1's too: said once


def test_a_write_back_to_nodes_that_all_run_another_writer_is_refused(versioned_lab, operator_user):
    """Issue 39: every node writes to 3312 (a switchover whose record was lost), the version names 3311: writing the
    version back would move the writer of the whole cluster without a drain, as a repair would. Refused; the nodes'
    rows are recorded instead (operations/record_nodes.py) or a switchover is planned."""
    cluster, doubles, v1 = versioned_lab
    for double in doubles:
        sql(double, "UPDATE mysql_servers SET port=3312 WHERE hostgroup_id=100")
        sql(double, "LOAD MYSQL SERVERS TO RUNTIME")
    back = services.write_back(cluster, actor=Actor.command(operator_user))
    plan, _ = plan_change_set(back)
    failed = [g for g in plan.failed_guards if g.key == "operational_writer"]
    assert (
        failed
        and not failed[0].overridable
        and "moves the writer from 127.0.0.1:3312 to 127.0.0.1:3311" in failed[0].label
    )
