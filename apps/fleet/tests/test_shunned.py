"""Adoption, drift and the fleet pages with a real SHUNNED row (issue 9, item 1): Galera node 3 killed while
proxysql-1's clients read through it, then restarted (conftest.shun_backend). SHUNNED is ProxySQL's runtime verdict on that
node: adopted as ONLINE without a "memory differs from runtime" warning, no drift, no disagreement between
the nodes, and shown for what it is."""

import pytest
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.clients.proxysql import ProxySQLAdmin
from apps.configuration import adoption as adopt
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.monitoring import pollers
from conftest import adopt_double, shun_backend

from .test_adopt import form_data

pytestmark = pytest.mark.django_db


def test_a_shunned_row_is_adopted_as_online_and_shown_as_a_runtime_state_not_drift(
    operator_client, lab_pair, galera_healthy, live_redis
):
    first, second = lab_pair
    preview = operator_client.post(reverse("fleet:adopt"), form_data(first))
    assert preview.status_code == 200
    # Between preview and confirm, proxysql-1 shuns 3313 by itself (killed, back and Synced by confirm time:
    # what the backends say is as at the preview): no configuration changed.
    shun_backend(first, galera_healthy, 3, hostgroups=(101,))
    with ProxySQLAdmin("127.0.0.1", first.port, first.user, first.password) as admin:
        snapshot = adopt.read_snapshot(admin)
    plan = adopt.plan_adoption(
        snapshot, cluster_name="galera-lab", node_name="proxysql-1", admin_host="127.0.0.1", admin_port=first.port
    )
    assert [w for w in plan.warnings if "differs from its runtime" in w] == []
    assert "127.0.0.1:3313 is SHUNNED by ProxySQL in hostgroup 101; adopted as ONLINE." in plan.warnings

    done = operator_client.post(reverse("fleet:adopt"), {"confirm": "1"})
    assert done.status_code == 302, "a shun after the preview read as a configuration change"
    cluster = Cluster.objects.get(name="galera-lab")
    assert done["Location"] == cluster.get_absolute_url()
    event = AuditEvent.objects.get(action="adopt proxysql node", outcome="success")
    assert [w for w in event.details["warnings"] if "differs from its runtime" in w] == []
    adopt_double(second, "galera-lab", "proxysql-2")
    assert HostgroupMembership.objects.get(hostgroup_id=101, server__port=3313).status == "ONLINE"

    # The drift section (htmx partial): in sync, no disagreement, the verdict listed as a runtime-only state
    body = operator_client.get(reverse("pages:cluster_drift", args=[cluster.pk])).content.decode()
    assert 'data-drift="none"' in body
    assert 'data-drift="differences"' not in body and 'data-drift="between-nodes"' not in body
    assert body.count('data-drift="runtime-states"') == 1
    states = body[body.index('data-drift="runtime-states"') :]
    assert "hg 101 127.0.0.1:3313 <strong>SHUNNED</strong>" in states[: states.index("</p>")]
    assert body.index("proxysql-1") < body.index('data-drift="runtime-states"') < body.index("proxysql-2")

    # Polled: no drift item in the overview's attention list; the cluster page shows SHUNNED on proxysql-1
    pollers.proxysql_round(list(ProxySQLNode.objects.select_related("cluster").order_by("pk")))
    pollers.backend_round(list(Server.objects.select_related("cluster").order_by("pk")))
    overview = operator_client.get(reverse("pages:overview")).content.decode()
    attention = overview[overview.index('id="attention"') : overview.index("<h2>Clusters")]
    assert 'data-kind="drift"' not in attention
    page = operator_client.get(cluster.get_absolute_url()).content.decode()
    assert "SHUNNED" in page
