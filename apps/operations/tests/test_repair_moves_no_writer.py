"""Issue 39 §2: a repair never moves the writer and never drains. Found on a real pair: every node wrote to the new
writer (a worker died before recording it) and "Repair every node from the inventory" planned to move the writer back
(REPLACE of the old writer in hostgroup 100, DELETE of the new, LOAD: no drain, no guard). The repair is refused and
says what fits: a planned switchover, or (every node agrees) recording what the nodes run as the next version."""

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import content as C
from apps.configuration import services as configuration
from apps.operations import record_nodes, repair, services, switchover
from lab import demo


pytestmark = pytest.mark.django_db


def move_writer_by_hand(double, to_port=3312, from_port=3311):
    demo.admin_sql(
        double.port,
        f"DELETE FROM mysql_servers WHERE hostgroup_id=100 AND port={from_port}",
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'127.0.0.1',{to_port})",
        "LOAD MYSQL SERVERS TO RUNTIME",
        "SAVE MYSQL SERVERS TO DISK",
        user=double.user,
        password=double.password,
    )


def writer_statements(plan):
    return [
        sql
        for step in plan.steps
        for spec in step.nodes.values()
        for sql in spec["sql"]
        if "hostgroup_id=100" in sql.replace(" ", "") or "VALUES (100," in sql
    ]


def test_a_repair_of_nodes_that_agree_on_another_writer_is_refused_and_offers_the_two_ways(
    adopted_lab, operator_user, admin_user_role, live_redis, client
):
    cluster, doubles = adopted_lab
    for double in doubles:
        move_writer_by_hand(double)
    plan = repair.plan_repair(cluster)
    guard = next(g for g in plan.guards if g.key == "moves_no_writer")
    assert not guard.passed and not guard.overridable
    assert "proxysql-1 sends writes to 127.0.0.1:3312, the inventory names 127.0.0.1:3311" in guard.value
    assert plan.facts["instead"][0].startswith("every node runs the same rows: an admin can record what the nodes run")
    assert "a planned switchover" in plan.facts["instead"][1]
    op = services.save_plan(plan, actor=Actor.command(admin_user_role))
    with pytest.raises(services.NotAllowed):  # not even an admin's override moves the writer through a repair
        services.confirm(op, actor=Actor.command(admin_user_role), override_reason="I know", enqueue=False)
    client.force_login(operator_user)
    page = client.get(op.get_absolute_url()).content.decode()
    assert "data-repair-instead" in page and "Record what the nodes run as the next version" in page

    # An operator may not record; an admin records, with a reason, the difference shown first.
    with pytest.raises(configuration.NotPermitted):
        record_nodes.record_nodes(cluster, actor=Actor.command(operator_user), reason="x", expect_version=1)
    latest = configuration.latest(cluster)
    reading = record_nodes.read(cluster)
    assert not reading.refusal and {tuple(line["key"]) for line in reading.lines} >= {
        (100, "127.0.0.1", 3311),
        (100, "127.0.0.1", 3312),
    }
    client.force_login(admin_user_role)
    page = client.get(f"/operations/record-nodes/{cluster.pk}/").content.decode()
    assert page.count("data-diff-line") == len(reading.lines)
    response = client.post(
        f"/operations/record-nodes/{cluster.pk}/", {"reason": "the switchover's worker died", "version": latest.number}
    )
    assert response.status_code == 302, response.content.decode()
    version = configuration.latest(cluster)
    assert version.number == latest.number + 1 and version.source == "nodes"
    assert C.writers(version.content) == [("127.0.0.1", 3312)]
    assert switchover.current_writer(cluster).server.port == 3312
    event = AuditEvent.objects.get(action="nodes recorded as intent", outcome="success")
    assert event.details["reason"] == "the switchover's worker died" and event.details["changes"]
    # The command says the same (nothing left to record: exit 2).
    from django.core.management import call_command

    with pytest.raises(SystemExit) as exit_code:
        call_command("record_nodes", cluster.name, "--user", admin_user_role.username, "--reason", "again", "--yes")
    assert exit_code.value.code == 2
    # Now the repair has nothing to move, and nothing to record is left.
    plan = repair.plan_repair(cluster)
    assert plan.guards_passed and not writer_statements(plan)
    assert "nothing to record" in record_nodes.read(cluster).refusal


def test_a_repair_of_one_node_that_lags_behind_the_others_still_follows_the_writer(
    adopted_lab, operator_user, live_redis
):
    """Not a writer move: the other node writes where the inventory says; the lagging node follows (a superseded
    pending row is repaired this way)."""
    cluster, (first, second) = adopted_lab
    move_writer_by_hand(second)
    plan = repair.plan_repair(cluster, [cluster.proxysql_nodes.get(name="proxysql-2").pk])
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    assert "instead" not in plan.facts


def test_a_repair_does_not_restore_a_server_every_node_has_drained(adopted_lab, operator_user, live_redis):
    cluster, doubles = adopted_lab
    for double in doubles:
        demo.admin_sql(
            double.port,
            "UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE port=3313",
            "LOAD MYSQL SERVERS TO RUNTIME",
            user=double.user,
            password=double.password,
        )
    plan = repair.plan_repair(cluster)
    guard = next(g for g in plan.guards if g.key == "moves_no_writer")
    assert not guard.passed and "every node has 127.0.0.1:3313 drained, the inventory has it in service" in guard.value


def test_the_record_nodes_command_records_what_every_node_runs(adopted_lab, admin_user_role, live_redis, capsys):
    from django.core.management import call_command

    cluster, doubles = adopted_lab
    for double in doubles:
        move_writer_by_hand(double)
    call_command("record_nodes", cluster.name, "--user", admin_user_role.username, "--reason", "worker died", "--yes")
    out = capsys.readouterr().out
    assert "mysql_servers [100, '127.0.0.1', 3312] added" in out and "records what the nodes run" in out
    assert C.writers(configuration.latest(cluster).content) == [("127.0.0.1", 3312)]
