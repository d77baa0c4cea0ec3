"""Pages need a login; each role sees what it may do."""

import pytest
from django.urls import reverse

from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server


@pytest.fixture
def inventory(db):
    cluster = Cluster.objects.create(
        name="c1", writer_hostgroup=100, reader_hostgroup=101, monitor_user="monitor", monitor_password="monitor"
    )
    node = ProxySQLNode.objects.create(
        cluster=cluster,
        name="p1",
        admin_host="127.0.0.1",
        admin_port=1,
        admin_user="admin",
        admin_password="secret-admin-pw",
    )
    server = Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=3311)
    HostgroupMembership.objects.create(server=server, hostgroup_id=100, weight=1000, comment="<b>bold</b>")
    return cluster, node, server


def test_login_required_everywhere(client, inventory):
    cluster, node, server = inventory
    for url in [
        reverse("pages:overview"),
        cluster.get_absolute_url(),
        node.get_absolute_url(),
        server.get_absolute_url(),
        reverse("fleet:adopt"),
        reverse("audit:list"),
    ]:
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith(reverse("accounts:login")), url


def test_pages_render_for_a_viewer_without_operator_links(viewer_client, inventory):
    cluster, node, server = inventory
    overview = viewer_client.get(reverse("pages:overview")).content.decode()
    assert "c1" in overview and "Adopt a ProxySQL node" not in overview
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "secret-admin-pw" not in page
    assert viewer_client.get(node.get_absolute_url()).status_code == 200
    assert viewer_client.get(server.get_absolute_url()).status_code == 200


def test_operator_sees_the_adopt_link(operator_client, inventory):
    assert "Adopt a ProxySQL node" in operator_client.get(reverse("pages:overview")).content.decode()


def test_unreachable_node_runtime_partial_says_so(viewer_client, inventory):
    _, node, _ = inventory
    html = viewer_client.get(reverse("pages:proxysql_node_runtime", args=[node.pk])).content.decode()
    assert "Unreachable" in html


def test_django_admin_never_renders_stored_passwords(client, admin_user_role, inventory):
    client.force_login(admin_user_role)
    _, node, _ = inventory
    html = client.get(reverse("admin:fleet_proxysqlnode_change", args=[node.pk])).content.decode()
    assert "secret-admin-pw" not in html and "fernet:" not in html


def test_django_admin_edit_is_audited_and_blank_password_keeps_the_old_one(client, admin_user_role, inventory):
    from apps.audit.models import AuditEvent

    client.force_login(admin_user_role)
    cluster, node, _ = inventory
    response = client.post(
        reverse("admin:fleet_proxysqlnode_change", args=[node.pk]),
        {
            "cluster": cluster.pk,
            "name": "p1-renamed",
            "admin_host": "127.0.0.1",
            "admin_port": 1,
            "admin_user": "admin",
            "admin_password": "",
            "comment": "",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    node.refresh_from_db()
    assert node.name == "p1-renamed" and node.admin_password == "secret-admin-pw"
    event = AuditEvent.objects.get(action="change proxysqlnode")
    assert event.details["changed_fields"] == ["name"] and "secret-admin-pw" not in str(event.details)
