"""A node changed by hand: the configuration page shows it against the current version, and both ways out
work, each previewed as a plan first — write the version back to it, or take its runtime into a new version
that every node then runs."""

import pytest

from apps.audit.actor import Actor
from apps.configuration import services
from apps.configuration.models import ChangeSet
from apps.operations import executor
from apps.operations import services as operations
from apps.operations.models import Operation
from lab import demo

pytestmark = pytest.mark.django_db(transaction=True)


def sql(double, statement):
    return demo.admin_sql(double.port, statement, user=double.user, password=double.password)


def by_hand(double):
    sql(double, "UPDATE mysql_servers SET weight=1234 WHERE hostgroup_id=101 AND port=3313")
    sql(
        double,
        "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply) "
        "VALUES (77,1,'^SHOW',101,1)",
    )
    for module in ("MYSQL SERVERS", "MYSQL QUERY RULES"):
        sql(double, f"LOAD {module} TO RUNTIME")


def confirm_and_run(op, user):
    operations.confirm(op, actor=Actor.command(user), enqueue=False)
    executor.run(op.pk)
    return Operation.objects.get(pk=op.pk)


def test_drift_is_shown_then_written_back(adopted_lab, operator_client, operator_user):
    cluster, (first, second) = adopted_lab
    by_hand(second)
    page = operator_client.get(f"/configuration/clusters/{cluster.pk}/drift/").content.decode()
    assert page.count('data-config-drift="none"') == 1 and 'data-config-drift="differs"' in page
    assert "1234" in page and "^SHOW" in page
    node = cluster.proxysql_nodes.get(name="proxysql-2")
    response = operator_client.post(f"/configuration/clusters/{cluster.pk}/write-back/", {"node": node.pk})
    op = Operation.objects.get()
    assert response.url == op.get_absolute_url()
    assert [n["name"] for n in op.plan["steps"][0]["nodes"].values()] == ["proxysql-2"]  # only the node that differs
    op = confirm_and_run(op, operator_user)
    assert op.state == "done", op.error
    assert sql(second, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == (("10000",),)
    assert sql(second, "SELECT COUNT(*) FROM runtime_mysql_query_rules") == (("0",),)
    assert services.latest(cluster).number == 1  # no new version: the nodes run version 1 again
    page = operator_client.get(f"/configuration/clusters/{cluster.pk}/drift/").content.decode()
    assert page.count('data-config-drift="none"') == 2


def test_a_nodes_runtime_taken_into_a_new_version_reaches_every_node(adopted_lab, operator_client, operator_user):
    cluster, (first, second) = adopted_lab
    by_hand(second)
    node = cluster.proxysql_nodes.get(name="proxysql-2")
    operator_client.post(f"/configuration/nodes/{node.pk}/take-runtime/")
    op = Operation.objects.get()
    assert ChangeSet.objects.get().source == "runtime"
    apply = {n["name"]: n["sql"] for n in op.plan["steps"][0]["nodes"].values()}
    assert any("1234" in s for s in apply["proxysql-1"]) and not any("REPLACE" in s for s in apply["proxysql-2"])
    op = confirm_and_run(op, operator_user)
    assert op.state == "done", op.error
    assert services.latest(cluster).number == 2
    for d in (first, second):
        assert sql(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == (("1234",),)
        assert sql(d, "SELECT match_digest FROM runtime_mysql_query_rules WHERE rule_id=77") == (("^SHOW",),)
    assert cluster.servers.get(port=3313).memberships.get(hostgroup_id=101).weight == 1234


def test_an_inventory_edit_in_the_admin_is_the_next_version(adopted_lab, client, admin_user_role):
    cluster, _ = adopted_lab
    client.force_login(admin_user_role)
    m = cluster.servers.get(port=3313).memberships.get(hostgroup_id=101)
    response = client.post(
        f"/admin/fleet/hostgroupmembership/{m.pk}/change/",
        {
            "server": m.server_id,
            "hostgroup_id": 101,
            "status": "ONLINE",
            "weight": 4321,
            "max_connections": m.max_connections,
            "max_replication_lag": 0,
            "compression": 0,
            "use_ssl": 0,
            "max_latency_ms": 0,
            "gtid_port": 0,
            "comment": m.comment,
        },
    )
    assert response.status_code == 302
    version = services.latest(cluster)
    assert (version.number, version.source, version.author) == (2, "admin", admin_user_role.username)
    row = next(r for r in version.content["mysql_servers"] if (r["hostgroup_id"], r["port"]) == (101, 3313))
    assert row["weight"] == 4321  # the nodes now differ from the current version: write-back shows and fixes it
