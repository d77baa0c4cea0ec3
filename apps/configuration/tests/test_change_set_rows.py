"""A change set sends statements for the rows of its diff and no others (issue 21): on a real ProxySQL 2.7.1
pair, a weight change and a new rule also rewrote the application user, and its clear-text password came back
as a mysql_native_password hash. Rows outside the diff stay as the node has them (drift is for repair or a
write-back); a user in the diff keeps its password as the node holds it unless the change set sets it."""
import json

import pytest

from apps.configuration import services
from apps.configuration.models import ConfigVersion
from apps.configuration.planner import plan_change_set
from lab import demo

pytestmark = pytest.mark.django_db(transaction=True)


def sql(double, statement):
    return demo.admin_sql(double.port, statement, user=double.user, password=double.password)


@pytest.fixture
def users_lab(adopted_lab):
    """The adopted pair with two active users written in clear text and an inactive one (absent at runtime,
    as on ProxySQL 2.7.1, so absent from version 1 read from the runtime), saved to disk; version 1 recorded."""
    cluster, doubles = adopted_lab
    for d in doubles:
        sql(d, "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','app-secret',100),"
               "('rep','rep-secret',101)")
        sql(d, "INSERT INTO mysql_users (username,password,default_hostgroup,active) VALUES ('off','off-secret',100,0)")
        sql(d, "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply) "
               "VALUES (20,1,'^SELECT',101,1)")
        for module in ("MYSQL USERS", "MYSQL QUERY RULES"):
            sql(d, f"LOAD {module} TO RUNTIME")
            sql(d, f"SAVE {module} TO DISK")
    ConfigVersion.objects.filter(cluster=cluster).delete()
    version = services.record_adopted(cluster, cluster.proxysql_nodes.order_by("pk").first())
    assert [u["username"] for u in version.content["mysql_users"]] == ["app", "rep"]
    return cluster, doubles, version


def server(version, hostgroup, port):
    return next(r for r in version.content["mysql_servers"] if r["hostgroup_id"] == hostgroup and r["port"] == port)


def weight_and_rule(cs, v1):
    services.add_edit(cs, {"op": "upsert", "table": "mysql_servers", "key": [101, "127.0.0.1", 3312],
                           "row": {**server(v1, 101, 3312), "weight": 20000}})
    services.add_edit(cs, {"op": "upsert", "table": "mysql_query_rules",
                           "row": {"rule_id": 30, "active": 1, "match_digest": "^DELETE", "destination_hostgroup": 100,
                                   "apply": 1}})


def test_a_plan_never_shows_a_password_read_from_a_node(users_lab, operator_user):
    cluster, (first, second), v1 = users_lab
    sql(second, "UPDATE mysql_users SET password='changed-by-hand' WHERE username='rep'")
    sql(second, "LOAD MYSQL USERS TO RUNTIME")
    cs = services.start_change_set(cluster, user=operator_user, reason="one weight, one rule")
    weight_and_rule(cs, v1)
    plan, _ = plan_change_set(cs)
    line = next(x for x in plan.facts["node_diffs"]["proxysql-2"] if x["table"] == "mysql_users")
    assert (line["key"], line["fields"]) == (["rep"], [{"name": "password", "before": "(secret)", "after": "(secret)"}])
    assert line["row"]["password"] == "(secret)"
    assert "changed-by-hand" not in json.dumps(plan.facts)
