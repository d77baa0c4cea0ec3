"""A change set sends statements for the rows of its diff and no others (issue 21): on a real ProxySQL 2.7.1
pair, a weight change and a new rule also rewrote the application user, and its clear-text password came back
as a mysql_native_password hash. Rows outside the diff stay as the node has them (drift is for repair or a
write-back); a user in the diff keeps its password as the node holds it unless the change set sets it."""

import json

import pytest
import yaml

from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import edits, files, services
from apps.configuration.models import ConfigVersion
from apps.configuration.tables import MYSQL_USERS
from apps.configuration.change_set import plan_change_set
from apps.configuration.tests.test_change_sets import run
from apps.operations.models import Operation
from lab import demo

pytestmark = pytest.mark.django_db(transaction=True)

WRITES = ("INSERT", "REPLACE", "UPDATE", "DELETE", "LOAD", "SAVE")


def sql(double, statement):
    return demo.admin_sql(double.port, statement, user=double.user, password=double.password)


def passwords(double, username):
    """The user's password in memory, runtime (both rows) and disk."""
    return [
        row[0]
        for layer in ("main.mysql_users", "runtime_mysql_users", "disk.mysql_users")
        for row in sql(double, f"SELECT password FROM {layer} WHERE username='{username}'")
    ]


@pytest.fixture
def users_lab(adopted_lab):
    """The adopted pair with two active users written in clear text and an inactive one (absent at runtime,
    as on ProxySQL 2.7.1; version 1, read from the runtime, takes it from memory: issue 33), saved to disk; version 1
    recorded."""
    cluster, doubles = adopted_lab
    for d in doubles:
        sql(
            d,
            "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','app-secret',100),"
            "('rep','rep-secret',101)",
        )
        sql(d, "INSERT INTO mysql_users (username,password,default_hostgroup,active) VALUES ('off','off-secret',100,0)")
        sql(
            d,
            "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply) "
            "VALUES (20,1,'^SELECT',101,1)",
        )
        for module in ("MYSQL USERS", "MYSQL QUERY RULES"):
            sql(d, f"LOAD {module} TO RUNTIME")
            sql(d, f"SAVE {module} TO DISK")
    ConfigVersion.objects.filter(cluster=cluster).delete()
    version = services.record_adopted(cluster, cluster.proxysql_nodes.order_by("pk").first())
    assert [u["username"] for u in version.content["mysql_users"]] == ["app", "off", "rep"]
    return cluster, doubles, version


def server(version, hostgroup, port):
    return next(r for r in version.content["mysql_servers"] if r["hostgroup_id"] == hostgroup and r["port"] == port)


def weight_and_rule(cs, v1):
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_servers",
            "key": [101, "127.0.0.1", 3312],
            "row": {**server(v1, 101, 3312), "weight": 20000},
        },
        actor=Actor.command(cs.author),
    )
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 30, "active": 1, "match_digest": "^DELETE", "destination_hostgroup": 100, "apply": 1},
        },
        actor=Actor.command(cs.author),
    )


def test_a_weight_and_a_rule_send_no_user_statement_and_passwords_stay_clear_text(users_lab, operator_user):
    cluster, doubles, v1 = users_lab
    # The user was changed on the nodes by hand since version 1: drift, which this change set does not touch.
    for d in doubles:
        sql(d, "UPDATE mysql_users SET max_connections=500 WHERE username='app'")
        sql(d, "LOAD MYSQL USERS TO RUNTIME")
        sql(d, "SAVE MYSQL USERS TO DISK")
        d.clear_statements()
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="one weight, one rule")
    weight_and_rule(cs, v1)
    op, plan = run(cs, operator_user)
    assert op.state == "done", op.error

    planned = [s for step in plan.steps for n in step.nodes.values() for s in n["sql"] + n["rollback"]]
    assert planned and not [s for s in planned if "mysql_users" in s or "MYSQL USERS" in s]
    assert plan.facts["passwords"] == {}
    for d in doubles:
        sent = [s for s in d.statements() if s.lstrip().upper().startswith(WRITES)]
        assert any("mysql_query_rules" in s for s in sent)
        assert not [s for s in sent if "mysql_users" in s.lower() or "mysql users" in s.lower()]
        assert passwords(d, "app") == ["app-secret"] * 4  # memory, two runtime rows, disk: still clear text
        assert sql(d, "SELECT max_connections FROM disk.mysql_users WHERE username='app'") == (("500",),)
        assert sql(d, "SELECT active FROM disk.mysql_users WHERE username='off'") == (("0",),)  # not deleted
        assert sql(d, "SELECT weight FROM disk.mysql_servers WHERE hostgroup_id=101 AND port=3312") == (("20000",),)


def test_rows_outside_the_diff_stay_as_the_node_has_them_and_a_write_back_still_takes_every_difference(
    users_lab, operator_user
):
    cluster, (first, second), v1 = users_lab
    sql(second, "UPDATE mysql_servers SET weight=1234 WHERE hostgroup_id=101 AND port=3313")
    sql(second, "SET mysql-max_connections=1999")
    sql(second, "LOAD MYSQL SERVERS TO RUNTIME")
    sql(second, "LOAD MYSQL VARIABLES TO RUNTIME")
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="one weight, one rule")
    weight_and_rule(cs, v1)
    services.add_edit(
        cs,
        {"op": "set", "table": "global_variables", "name": "mysql-mirror_max_concurrency", "value": "100"},
        actor=Actor.command(operator_user),
    )
    op, plan = run(cs, operator_user)
    assert op.state == "done", op.error  # the verify reads back the change set's rows, not the drift beside them
    node = plan.steps[0].nodes[str(cluster.proxysql_nodes.get(name="proxysql-2").pk)]
    assert not [s for s in node["sql"] if "3313" in s or "mysql-max_connections" in s]
    assert sql(second, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == (("1234",),)
    assert sql(
        second, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-max_connections'"
    ) == (("1999",),)
    assert sql(
        second, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-mirror_max_concurrency'"
    ) == (("100",),)

    back = services.write_back(cluster, actor=Actor.command(operator_user))
    op, plan = run(back, operator_user)
    assert op.state == "done", op.error
    node = plan.steps[0].nodes[str(cluster.proxysql_nodes.get(name="proxysql-2").pk)]
    assert [s for s in node["sql"] if "3313" in s] and [s for s in node["sql"] if "mysql-max_connections" in s]
    assert sql(second, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == (("10000",),)


def test_a_write_back_keeps_the_form_of_a_password_that_is_the_versions_and_sets_one_changed_by_hand(
    users_lab, operator_user
):
    cluster, (first, second), v1 = users_lab
    sql(second, "UPDATE mysql_users SET max_connections=500 WHERE username='app'")
    sql(second, "UPDATE mysql_users SET password='by-hand' WHERE username='rep'")
    sql(second, "LOAD MYSQL USERS TO RUNTIME")
    back = services.write_back(
        cluster, actor=Actor.command(operator_user), nodes=[cluster.proxysql_nodes.get(name="proxysql-2")]
    )
    op, plan = run(back, operator_user)
    assert op.state == "done", op.error
    assert plan.facts["passwords"] == {
        "proxysql-2": {"app": "password kept as the node has it (clear text)", "rep": "password set (hashed)"}
    }
    assert passwords(second, "app") == ["app-secret"] * 4
    assert sql(second, "SELECT max_connections FROM runtime_mysql_users WHERE username='app'") == (("10000",),) * 2
    assert passwords(second, "rep") == [C.mysql_native_hash("rep-secret")] * 4


def test_a_user_in_the_diff_keeps_its_password_form_unless_the_change_set_sets_it(
    users_lab, operator_user, operator_client
):
    cluster, doubles, v1 = users_lab
    # The second node's app password was changed by hand: the change set does not set it, so the node keeps it.
    sql(doubles[1], "UPDATE mysql_users SET password='app-by-hand' WHERE username='app'")
    sql(doubles[1], "LOAD MYSQL USERS TO RUNTIME")
    users = {u["username"]: u for u in v1.content["mysql_users"]}
    new_hash = C.mysql_native_hash("new-secret")
    cs = services.start_change_set(
        cluster, actor=Actor.command(operator_user), reason="app: more connections; rep: new password"
    )
    services.add_edit(
        cs,
        {"op": "upsert", "table": "mysql_users", "key": ["app"], "row": {**users["app"], "max_connections": 2000}},
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        cs, edits.upsert(MYSQL_USERS, users["rep"], key=["rep"], password=new_hash), actor=Actor.command(operator_user)
    )
    op, plan = run(cs, operator_user)
    assert op.state == "done", op.error

    said = {"app": "password kept as the node has it (clear text)", "rep": "password set (hashed)"}
    assert plan.facts["passwords"] == {"proxysql-1": said, "proxysql-2": said}
    stored = json.dumps(Operation.objects.get(pk=op.pk).plan)
    for value in ("app-secret", "app-by-hand", "rep-secret", new_hash, C.mysql_native_hash("app-secret")):
        assert value not in stored, stored[stored.index(value) - 300 :][:400]
    page = operator_client.get(op.get_absolute_url()).content.decode()
    assert "app: password kept as the node has it (clear text)" in page and "rep: password set (hashed)" in page
    for d, kept in zip(doubles, ("app-secret", "app-by-hand")):
        assert passwords(d, "app") == [kept] * 4
        assert sql(d, "SELECT max_connections FROM disk.mysql_users WHERE username='app'") == (("2000",),)
        assert passwords(d, "rep") == [new_hash] * 4
        assert passwords(d, "off") == ["off-secret", "off-secret"]  # memory and disk; inactive, not at runtime


def test_the_commands_plan_says_how_each_written_password_goes(users_lab, operator_user, tmp_path):
    import io

    from django.core.management import call_command

    cluster, doubles, v1 = users_lab
    doc = yaml.safe_load(files.export(v1))
    next(u for u in doc["mysql_users"] if u["username"] == "app")["comment"] = "the application"
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("config", "plan", cluster.name, str(path), "--user", operator_user.username, stdout=out)
    text = out.getvalue()
    assert exit_.value.code == 0, text
    assert "proxysql-1: app: password kept as the node has it (clear text)" in text
    assert "proxysql-2: app: password kept as the node has it (clear text)" in text
    assert "rep: password" not in text and "app-secret" not in text


def test_a_plan_never_shows_a_password_read_from_a_node(users_lab, operator_user):
    cluster, (first, second), v1 = users_lab
    sql(second, "UPDATE mysql_users SET password='changed-by-hand' WHERE username='rep'")
    sql(second, "LOAD MYSQL USERS TO RUNTIME")
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="one weight, one rule")
    weight_and_rule(cs, v1)
    plan, _ = plan_change_set(cs)
    line = next(x for x in plan.facts["node_diffs"]["proxysql-2"] if x["table"] == "mysql_users")
    assert (line["key"], line["fields"]) == (["rep"], [{"name": "password", "before": "(secret)", "after": "(secret)"}])
    assert line["row"]["password"] == "(secret)"
    assert "changed-by-hand" not in json.dumps(plan.facts)
