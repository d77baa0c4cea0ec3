"""Adopting live ProxySQL nodes (lab doubles over the wire): preview, confirm, all-or-nothing, bad input."""

import json
import socket
import time

import pytest
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server

from .conftest import admin_sql, seed_layout


def form_data(double, **over):
    data = {
        "admin_host": "127.0.0.1",
        "admin_port": double.port,
        "admin_user": double.user,
        "admin_password": double.password,
        "node_name": "proxysql-1",
        "new_cluster_name": "galera-lab",
        "preview": "1",
    }
    data.update(over)
    return data


def adopt(client, double, **over):
    preview = client.post(reverse("fleet:adopt"), form_data(double, **over))
    assert preview.status_code == 200, preview.content.decode()[:2000]
    return preview, client.post(reverse("fleet:adopt"), {"confirm": "1"})


@pytest.mark.django_db
def test_preview_saves_nothing_and_confirm_creates_everything(operator_client, lab_pair):
    first, second = lab_pair
    preview = operator_client.post(reverse("fleet:adopt"), form_data(first))
    assert preview.status_code == 200
    html = preview.content.decode()
    assert "will be created" in html and "127.0.0.1:3312" in html
    assert Cluster.objects.count() == 0 and ProxySQLNode.objects.count() == 0

    done = operator_client.post(reverse("fleet:adopt"), {"confirm": "1"})
    cluster = Cluster.objects.get(name="galera-lab")
    assert done.status_code == 302 and done["Location"] == cluster.get_absolute_url()
    assert (cluster.writer_hostgroup, cluster.reader_hostgroup, cluster.backup_writer_hostgroup) == (100, 101, 102)
    assert Server.objects.filter(cluster=cluster).count() == 3
    assert HostgroupMembership.objects.filter(server__cluster=cluster).count() == 6
    writer = HostgroupMembership.objects.get(hostgroup_id=100)
    assert (writer.server.port, writer.weight, writer.max_connections, writer.comment) == (
        3311,
        1000000,
        2000,
        "writer",
    )
    node = ProxySQLNode.objects.get()
    assert node.admin_password == first.password and node.version
    event = AuditEvent.objects.get(action="adopt proxysql node", outcome="success")
    assert event.actor == "otto-operator" and event.cluster_name == "galera-lab"
    assert "password" not in json.dumps(event.details)

    # The second ProxySQL node joins the same cluster; nothing differs, so nothing is created but the node.
    preview, done = adopt(operator_client, second, node_name="proxysql-2", new_cluster_name="", cluster=cluster.pk)
    assert done.status_code == 302
    assert cluster.proxysql_nodes.count() == 2 and HostgroupMembership.objects.count() == 6


@pytest.mark.django_db
def test_second_node_that_differs_keeps_the_inventory_unless_told(operator_client, lab_pair):
    first, second = lab_pair
    adopt(operator_client, first)
    admin_sql(
        second,
        "UPDATE mysql_servers SET weight=5 WHERE hostgroup_id=101 AND port=3312",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    cluster = Cluster.objects.get()
    preview, done = adopt(operator_client, second, node_name="proxysql-2", new_cluster_name="", cluster=cluster.pk)
    assert "weight: 10000 → 5" in preview.content.decode()
    assert HostgroupMembership.objects.get(hostgroup_id=101, server__port=3312).weight == 10000


@pytest.mark.django_db
def test_native_galera_hostgroups_are_detected_and_shown(operator_client, proxysql_double):
    seed_layout(proxysql_double)
    admin_sql(
        proxysql_double,
        "INSERT INTO mysql_galera_hostgroups (writer_hostgroup,backup_writer_hostgroup,reader_hostgroup,"
        "offline_hostgroup,active,max_writers,writer_is_also_reader,max_transactions_behind)"
        " VALUES (100,102,101,9101,1,1,0,10)",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    preview, done = adopt(operator_client, proxysql_double)
    assert "native galera hostgroups are ACTIVE" in preview.content.decode()
    cluster = Cluster.objects.get()
    assert cluster.offline_hostgroup == 9101 and cluster.active_native_hostgroups()
    assert cluster.native_manager == "galera"  # natively managed: Monitor places its servers (drift folds it)
    page = operator_client.get(cluster.get_absolute_url()).content.decode()
    assert "native galera hostgroups are <strong>active</strong>" in page
    assert 'data-native-manager="galera"' in page and "natively managed" in page


@pytest.mark.django_db
def test_config_changed_between_preview_and_confirm_shows_a_new_preview(operator_client, proxysql_double):
    seed_layout(proxysql_double)
    operator_client.post(reverse("fleet:adopt"), form_data(proxysql_double))
    admin_sql(
        proxysql_double, "UPDATE mysql_servers SET weight=1 WHERE hostgroup_id=101", "LOAD MYSQL SERVERS TO RUNTIME"
    )
    response = operator_client.post(reverse("fleet:adopt"), {"confirm": "1"})
    assert response.status_code == 409 and Cluster.objects.count() == 0
    assert operator_client.post(reverse("fleet:adopt"), {"confirm": "1"}).status_code == 302  # the re-preview confirms


@pytest.mark.django_db
def test_unreachable_endpoint_gives_a_clear_message_within_the_timeout(operator_client):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        response = operator_client.post(
            reverse("fleet:adopt"), {**form_data(type("D", (), {"port": port, "user": "admin", "password": "admin"})())}
        )
    assert response.status_code == 400
    assert "Could not read a ProxySQL admin interface" in response.content.decode()  # issue 34: one answer for all
    assert "the port is closed, is not a ProxySQL admin port, or refused them" in response.content.decode()
    assert Cluster.objects.count() == 0


@pytest.mark.django_db
def test_silent_host_times_out_in_the_form(operator_client):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(5)
        start = time.monotonic()
        response = operator_client.post(
            reverse("fleet:adopt"),
            {**form_data(type("D", (), {"port": s.getsockname()[1], "user": "admin", "password": "admin"})())},
        )
        elapsed = time.monotonic() - start
    assert response.status_code == 400 and "Could not read a ProxySQL admin interface" in response.content.decode()
    assert elapsed < 1.5


@pytest.mark.django_db
def test_localhost_reaches_the_port_over_tcp(operator_client, proxysql_double):
    # libmysqlclient would take `localhost` for its local Unix socket and ignore the port.
    seed_layout(proxysql_double)
    preview, done = adopt(operator_client, proxysql_double, admin_host="localhost")
    assert "127.0.0.1:3312" in preview.content.decode() and done.status_code == 302
    node = ProxySQLNode.objects.get()
    assert (node.admin_host, node.admin_port, node.version) == ("localhost", proxysql_double.port, "2.7.1-lab-double")


@pytest.mark.django_db
def test_wrong_credentials(operator_client, proxysql_double):
    response = operator_client.post(reverse("fleet:adopt"), form_data(proxysql_double, admin_password="wrong"))
    assert response.status_code == 400 and "Could not read a ProxySQL admin interface" in response.content.decode()
    assert 'value="wrong"' not in response.content.decode()  # passwords are never rendered back


@pytest.mark.django_db
@pytest.mark.parametrize(
    "field,value",
    [
        ("admin_port", "70000"),
        ("admin_port", "abc"),
        ("admin_host", "bad host;DROP"),
        ("writer_hostgroup", "-1"),
        ("writer_hostgroup", "99999999999"),
        ("node_name", "x\x00y"),
        ("new_cluster_name", "n" * 10_000),
    ],
)
def test_invalid_input_is_a_validation_error_not_a_500(operator_client, proxysql_double, field, value):
    response = operator_client.post(reverse("fleet:adopt"), form_data(proxysql_double, **{field: value}))
    assert response.status_code == 400 and Cluster.objects.count() == 0
    assert AuditEvent.objects.filter(outcome="invalid").count() == 1


@pytest.mark.django_db
def test_hostile_comments_are_stored_and_shown_escaped(operator_client, proxysql_double):
    hostile = "<script>alert(1)</script> it''s \"q\"; DROP TABLE x; -- é中 " + "z" * 10_000
    seed_layout(proxysql_double)
    admin_sql(
        proxysql_double,
        f"UPDATE mysql_servers SET comment='{hostile}' WHERE hostgroup_id=101 AND port=3312",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    adopt(operator_client, proxysql_double)
    stored = HostgroupMembership.objects.get(hostgroup_id=101, server__port=3312).comment
    assert stored == hostile.replace("''", "'")
    page = operator_client.get(Cluster.objects.get().get_absolute_url()).content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


@pytest.mark.django_db
def test_backend_of_another_cluster_refuses_the_whole_adoption(operator_client, lab_pair):
    first, second = lab_pair
    adopt(operator_client, first)
    response = operator_client.post(reverse("fleet:adopt"), form_data(second, node_name="p2", new_cluster_name="other"))
    assert "already belongs to cluster galera-lab" in response.content.decode()
    assert "Confirm" not in response.content.decode()
    assert Cluster.objects.count() == 1 and ProxySQLNode.objects.count() == 1


@pytest.mark.django_db
def test_viewer_cannot_adopt(viewer_client, proxysql_double):
    assert viewer_client.get(reverse("fleet:adopt")).status_code == 403
    assert viewer_client.post(reverse("fleet:adopt"), form_data(proxysql_double)).status_code == 403
    assert AuditEvent.objects.filter(outcome="refused").count() == 2
