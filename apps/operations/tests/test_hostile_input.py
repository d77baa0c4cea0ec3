"""Hostile input against the operation forms, and hostile text that does travel to ProxySQL (comments
read from a node and written back by a switchover) arriving there as escaped values, intact."""

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings

from apps.accounts.tests.hostile import hostile_number, hostile_text
from apps.audit.actor import Actor
from apps.fleet.models import Server
from apps.fleet.tests.conftest import admin_sql
from apps.operations import executor, services, switchover
from apps.operations.models import Operation

pytestmark = pytest.mark.django_db
FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@FAST
@given(
    target=hostile_number, timeout=hostile_number, on_timeout=hostile_text, autoinc=hostile_text, old_to=hostile_text
)
def test_switchover_form(operator_client, adopted_lab, target, timeout, on_timeout, autoinc, old_to):
    cluster, _ = adopted_lab
    before = Operation.objects.count()
    response = operator_client.post(
        reverse("operations:switchover", args=[cluster.pk]),
        {
            "new_writer": target,
            "drain_timeout_ms": timeout,
            "on_timeout": on_timeout,
            "lower_autoinc": autoinc,
            "old_writer_to": old_to,
        },
    )
    assert response.status_code in (302, 400)
    assert Operation.objects.count() == before + (response.status_code == 302)


@FAST
@given(note=hostile_text, timeout=hostile_number)
def test_drain_form(operator_client, adopted_lab, note, timeout):
    server = Server.objects.get(port=3313)
    response = operator_client.post(
        reverse("operations:drain", args=[server.pk]),
        {"drain_timeout_ms": timeout, "on_timeout": "rollback", "note": note},
    )
    assert response.status_code in (302, 400)
    if response.status_code == 302:
        op = Operation.objects.latest("id")
        inventory = [s for s in op.plan["steps"] if s["key"] == "inventory"][0]
        assert inventory["params"]["note"] == note  # stored exactly, shown escaped
        assert "<script>alert(1)</script>" not in operator_client.get(op.get_absolute_url()).content.decode()


COMMENT = "it's \"q\"; DROP TABLE mysql_servers; -- \\' é中 <script>"


def test_comments_written_back_to_proxysql_arrive_escaped_and_intact(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    for double in (first, second):
        admin_sql(
            double,
            "UPDATE mysql_servers SET comment='" + COMMENT.replace("'", "''") + "' WHERE hostgroup_id=100",
            "LOAD MYSQL SERVERS TO RUNTIME",
        )
        double.clear_statements()
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True)
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == "done", op.error
    for double in (first, second):
        sent = [s for s in double.statements() if s.startswith("REPLACE INTO mysql_servers") and "VALUES (100," in s]
        assert sent and all("'it''s \"q\"; DROP TABLE mysql_servers; -- \\'' é中 <script>'" in s for s in sent)
        rows = admin_sql(double, "SELECT comment FROM runtime_mysql_servers WHERE hostgroup_id=100")
        assert rows == ((COMMENT,),)
