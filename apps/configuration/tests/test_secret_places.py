"""Secrets reach a node only where the planner placed them (issue 22). A secret's marker is no secret (a viewer
reads refs in every YAML export): an operator who types one into a comment gets that text on the node, never
the password it names, whether through the page, the API or a file. A real password still reaches the node,
and a plan stored before places were recorded is refused at start rather than guessed at."""

import pytest
import yaml
from django.urls import reverse

from apps.api.tests.conftest import token_client
from apps.audit.actor import Actor
from apps.configuration import edits, files, services
from apps.configuration.models import ChangeSet, ConfigSecret
from apps.configuration.tests.test_change_sets import run, sql, versioned_lab  # noqa: F401 (a fixture)
from apps.configuration import change_set
from apps.operations import executor
from apps.operations import services as operations
from apps.operations.models import Operation
from apps.plans.vocabulary import secret_marker

pytestmark = pytest.mark.django_db(transaction=True)


def form_data(prefix, row):
    return {f"{prefix}-{k}": "" if v is None else str(v) for k, v in row.items()}


def test_a_marker_typed_anywhere_reaches_the_node_as_text_and_a_real_password_as_its_value(
    versioned_lab, operator_user, client
):
    cluster, doubles, v1 = versioned_lab
    monitor = v1.content["global_variables"]["mysql-monitor_password"]["secret"]
    app = next(u for u in v1.content["mysql_users"] if u["username"] == "app")["password"]["secret"]
    values = {ConfigSecret.objects.get(cluster=cluster, ref=ref).value for ref in (monitor, app)}

    # The page: a server's comment.
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="a marker in a server comment")
    client.force_login(operator_user)
    row = next(r for r in v1.content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3312)
    response = client.post(
        reverse("configuration:row_form", args=[cs.pk, "mysql_servers"]),
        {
            **form_data("row-mysql_servers", {**row, "comment": secret_marker(monitor)}),
            "key": ["101", "127.0.0.1", "3312"],
            "save": "1",
        },
    )
    assert response.status_code == 302, response.content[:500]
    cs.refresh_from_db()
    assert cs.edits[0]["row"]["comment"] == secret_marker(monitor)
    op, _ = run(cs, operator_user)
    assert op.state == "done", op.error

    # The API: a query rule's comment, and a real password change in the same change set.
    api = token_client(operator_user)
    created = api.post(
        f"/api/v1/clusters/{cluster.pk}/config/change-sets/",
        {
            "reason": "a marker in a rule",
            "edits": [
                {
                    "op": "upsert",
                    "table": "mysql_query_rules",
                    "row": {
                        "rule_id": 20,
                        "active": 1,
                        "match_digest": "^SELECT",
                        "destination_hostgroup": 101,
                        "apply": 1,
                        "comment": secret_marker(app),
                    },
                },
                {"op": "set", "name": "mysql-monitor_password", "value": "new-monitor-pass"},
            ],
        },
    )
    assert created.status_code == 201, created.content[:500]
    op, plan = run(ChangeSet.objects.get(pk=created.json()["id"]), operator_user)
    assert op.state == "done", op.error
    preview = str(plan.to_json()) + str(op.plan) + str(list(op.steps.values_list("executed", flat=True)))
    assert secret_marker(app) in preview and "new-monitor-pass" not in preview  # preview and audit: markers only

    # A file: the application user's comment, in the very statement that writes its real password.
    doc = yaml.safe_load(files.export(services.latest(cluster)))
    doc["mysql_users"][0]["comment"] = secret_marker(app)
    cs = services.start_from_file(
        cluster, yaml.safe_dump(doc), actor=Actor.command(operator_user), reason="a marker in a user"
    )
    op, _ = run(cs, operator_user)
    assert op.state == "done", op.error

    for d in doubles:
        assert sql(d, "SELECT comment FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3312") == (
            (secret_marker(monitor),),
        )
        assert sql(d, "SELECT comment FROM runtime_mysql_query_rules WHERE rule_id=20") == ((secret_marker(app),),)
        assert set(sql(d, "SELECT comment, password FROM runtime_mysql_users WHERE username='app'")) == {
            (secret_marker(app), "app-secret")
        }
        assert sql(
            d, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-monitor_password'"
        ) == (("new-monitor-pass",),)
        cells = {
            cell
            for layer in ("", "runtime_", "disk.")
            for table in ("mysql_servers", "mysql_query_rules")
            for row in sql(d, f"SELECT * FROM {layer}{table}")
            for cell in row
        }
        cells |= {row[0] for row in sql(d, "SELECT comment FROM runtime_mysql_users")}
        assert not cells & values  # (the monitor password is "monitor": a substring of comments, so cell by cell)


def new_monitor_password(cluster, user, value):
    """A change set that sets mysql-monitor_password, planned: an operation whose statements hold markers."""
    cs = services.start_change_set(cluster, actor=Actor.command(user), reason="a new monitor password")
    services.add_edit(cs, edits.set_variable("mysql-monitor_password", value), actor=Actor.command(user))
    return change_set.plan_and_save(cs, actor=Actor.command(user))


def test_a_plan_stored_before_secret_places_were_recorded_is_refused_at_start(versioned_lab, operator_user):
    cluster, doubles, v1 = versioned_lab
    op = new_monitor_password(cluster, operator_user, "stored-before")
    old_shape = {k: v for k, v in op.plan.items() if k != "secrets"}  # as plans were stored before issue 22
    assert "__SECRET__" in str(old_shape["steps"])
    Operation.objects.filter(pk=op.pk).update(plan=old_shape)
    operations.confirm(Operation.objects.get(pk=op.pk), actor=Actor.command(operator_user), enqueue=False)
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == "refused" and "stored before" in op.error and "Plan it again" in op.error, op.error
    for d in doubles:
        assert sql(
            d, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-monitor_password'"
        ) != (("stored-before",),)


def test_pending_statements_stored_before_secret_places_were_recorded_are_not_replayed(versioned_lab, operator_user):
    """A node's pending rollback kept from a plan of the old shape, holding a marker: never sent on a guess."""
    from django.utils import timezone

    from apps.operations import rollbacks
    from apps.operations.models import PendingRollback

    cluster, doubles, v1 = versioned_lab
    op = new_monitor_password(cluster, operator_user, "kept-before")
    node = cluster.proxysql_nodes.order_by("pk").first()
    undo = [s for s in op.plan["steps"][0]["nodes"][str(node.pk)]["rollback"] if "__SECRET__" in s]
    assert undo  # the node's monitor password put back: a marker in the stored statement
    Operation.objects.filter(pk=op.pk).update(
        plan={k: v for k, v in op.plan.items() if k != "secrets"}, state="rollback_pending"
    )
    row = PendingRollback.objects.create(
        operation=op, node=node, next_try_at=timezone.now(), statements=[{"step": "apply", "sql": s} for s in undo]
    )
    said = rollbacks.attempt(row, actor=Actor.rule("test"))
    row.refresh_from_db()
    assert "not run on a guess" in said and row.state == "pending" and len(row.statements) == len(undo), said
    assert "Repair the node from the inventory" in row.last_error
    double = next(d for d in doubles if d.port == node.admin_port)
    assert sql(double, "SELECT variable_value FROM global_variables WHERE variable_name='mysql-monitor_password'") == (
        ("monitor",),
    )
