"""Issue 21 for change sets: a change set rolled back past its SAVE leaves memory, runtime and disk of every node
as intended (the base version), and a restart keeps it."""

import pytest
from django.utils import timezone

from apps.audit.actor import Actor
from apps.configuration import services
from apps.operations import rollbacks
from apps.operations.models import Operation, PendingRollback

from .test_change_sets import run, sql, versioned_lab  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)
TABLES = ("mysql_servers", "mysql_query_rules")


def layers(double):
    """Each table in each layer; runtime statuses as configured (SHUNNED is ProxySQL's own verdict)."""
    out = {}
    for table in TABLES:
        for layer, name in (("memory", table), ("runtime", f"runtime_{table}"), ("disk", f"disk.{table}")):
            rows = sql(double, f"SELECT * FROM {name} ORDER BY 1, 2, 3")
            out[f"{layer} {table}"] = [tuple("ONLINE" if v == "SHUNNED" else v for v in row) for row in rows]
    return out


def test_a_change_set_rolled_back_past_its_save_leaves_every_layer_as_intended(
    versioned_lab, operator_user, live_redis
):
    cluster, (first, second), v1 = versioned_lab
    for double in (first, second):  # the fixture loaded its rules without saving them: intent is on disk too
        sql(double, "SAVE MYSQL QUERY RULES TO DISK")
    intended = {double.port: layers(double) for double in (first, second)}
    for double in (first, second):
        for table in TABLES:
            assert intended[double.port][f"disk {table}"] == intended[double.port][f"memory {table}"]
    reader = next(r for r in v1.content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3313)
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="a reader's weight and a rule")
    for edit in (
        {"op": "upsert", "table": "mysql_servers", "key": [101, "127.0.0.1", 3313], "row": {**reader, "weight": 5}},
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 30, "active": 1, "apply": 1, "match_digest": "^DELETE", "destination_hostgroup": 100},
        },
    ):
        services.add_edit(cs, edit, actor=Actor.command(operator_user))
    # The second node takes its SAVE of the servers, then stops answering (paused with the SAVE in flight).
    sql(second, 'LAB FAIL_STATEMENTS {"text": "SAVE MYSQL SERVERS TO DISK", "pause": true}')
    op, plan = run(cs, operator_user)
    assert op.state == "rollback_pending", op.error
    assert layers(first) == intended[first.port]
    pending = PendingRollback.objects.get()
    assert pending.node.name == "proxysql-2"
    saves = [s["sql"] for s in pending.statements if s["sql"].startswith("SAVE")]
    assert saves == ["SAVE MYSQL SERVERS TO DISK", "SAVE MYSQL QUERY RULES TO DISK"]
    assert [s["sql"] for s in pending.statements[-2:]] == saves  # the retry ends with them

    second.set_mode("normal")
    assert sql(second, "SELECT weight FROM disk.mysql_servers WHERE hostgroup_id=101 AND port=3313") == (("5",),)
    PendingRollback.objects.update(next_try_at=timezone.now())
    rollbacks.attempt(PendingRollback.objects.get(), actor=Actor.rule("test"))
    assert Operation.objects.get(pk=op.pk).state == "rolled_back"
    assert services.latest(cluster).number == 1
    for double in (first, second):
        assert layers(double) == intended[double.port]
        double.restart()  # a restart loads disk
        assert layers(double) == intended[double.port]
