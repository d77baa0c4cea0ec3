"""Adopting a ProxySQL Cluster (native sync on): the preview lists every node of proxysql_servers and the confirm (or
adopt_proxysql --yes) adopts them all into one cluster, all or nothing. Three doubles in a ProxySQL Cluster in front of
the Galera lab."""

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from apps.fleet.models import Cluster, ProxySQLNode
from lab import demo
from lab.fixtures_proxysql import join_cluster

from .test_adopt import form_data

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_node_cluster(proxysql_double_factory, galera_lab):
    doubles = join_cluster(proxysql_double_factory(3), sync=True)
    for d in doubles:
        demo.admin_sql(d.port, *demo.seed_statements(), user=d.user, password=d.password)
    return doubles


def test_the_preview_lists_every_node_and_the_confirm_adopts_them_all(operator_client, three_node_cluster):
    first, second, third = three_node_cluster
    preview = operator_client.post(reverse("fleet:adopt"), form_data(first))
    html = preview.content.decode()
    assert preview.status_code == 200 and 'id="adopt-members"' in html
    for d in three_node_cluster:
        assert f'data-member="127.0.0.1:{d.port}"' in html
    assert html.count("will be added</strong>, read with the same admin credentials") == 2
    assert "native sync on for mysql_servers, mysql_users, mysql_query_rules" in html
    assert ProxySQLNode.objects.count() == 0

    done = operator_client.post(reverse("fleet:adopt"), {"confirm": "1"})
    cluster = Cluster.objects.get(name="galera-lab")
    assert done.status_code == 302 and done["Location"] == cluster.get_absolute_url()
    nodes = {n.admin_port: n.name for n in cluster.proxysql_nodes.all()}
    assert nodes == {first.port: "proxysql-1", second.port: f"node-{second.port}", third.port: f"node-{third.port}"}
    assert all(n.admin_password == first.password for n in cluster.proxysql_nodes.all())

    # adopted again from another node: every node is already there
    preview = operator_client.post(
        reverse("fleet:adopt"),
        form_data(second, node_name=f"node-{second.port}", new_cluster_name="", cluster=cluster.pk),
    )
    assert preview.content.decode().count("already in this cluster") == 2


def test_a_node_that_does_not_answer_at_confirm_adopts_none(operator_client, three_node_cluster):
    first, second, third = three_node_cluster
    assert operator_client.post(reverse("fleet:adopt"), form_data(first)).status_code == 200
    third.set_mode("refuse")
    done = operator_client.post(reverse("fleet:adopt"), {"confirm": "1"})
    assert done.status_code == 400 and "a node of this ProxySQL Cluster" in done.content.decode()
    assert not Cluster.objects.exists() and not ProxySQLNode.objects.exists()


def test_the_command_adopts_every_node(three_node_cluster, monkeypatch):
    first, second, third = three_node_cluster
    monkeypatch.setenv("PROXYSQL_ADMIN_PASSWORD", first.password)
    out = io.StringIO()
    call_command(
        "adopt_proxysql",
        "--host",
        "127.0.0.1",
        "--port",
        str(first.port),
        "--user",
        first.user,
        "--cluster",
        "lab",
        "--node-name",
        "p1",
        "--yes",
        stdout=out,
    )
    text = out.getvalue()
    assert f"ProxySQL Cluster node 127.0.0.1:{second.port}: adopted as node-{second.port}" in text
    assert sorted(ProxySQLNode.objects.values_list("admin_port", flat=True)) == sorted(
        d.port for d in three_node_cluster
    )
    assert text.count("adopted ") >= 3
