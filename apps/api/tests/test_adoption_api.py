"""Adoption through the API (issue 23 §5): preview and confirm over the adoption service the page and the command
line use, with the adopt form's rules, roles, rate limit and audit."""

import pytest
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.configuration.models import ConfigVersion
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode

from .conftest import error_of, token_client

pytestmark = pytest.mark.django_db
PREVIEW, CONFIRM = "/api/v1/adopt/preview/", "/api/v1/adopt/confirm/"


def ask(double, **over):
    return {
        "admin_host": "127.0.0.1",
        "admin_port": double.port,
        "admin_user": double.user,
        "admin_password": double.password,
        "node_name": "proxysql-1",
        "new_cluster_name": "galera-lab",
        **over,
    }


def test_preview_reads_the_node_and_confirm_adopts_it(operator_user, lab_pair):
    first, _ = lab_pair
    api = token_client(operator_user, "ci")
    preview = api.post(PREVIEW, ask(first))
    assert preview.status_code == 200, preview.content
    plan = preview.json()
    assert plan["ok"] and plan["kind"] == "galera" and plan["cluster_exists"] is False
    assert plan["roles"] == {"writer": 100, "reader": 101, "backup_writer": 102, "offline": None}
    assert plan["reasons"] and plan["counts"] == {"create": 6}
    assert "admin_password" not in plan and f'"{first.password}"' not in preview.content.decode()
    assert Cluster.objects.count() == 0  # a preview saves nothing

    stale = api.post(CONFIRM, {**ask(first), "fingerprint": "0" * 64})
    assert "changed since the preview" in error_of(stale, 409)["message"] and Cluster.objects.count() == 0

    done = api.post(CONFIRM, {**ask(first), "fingerprint": plan["fingerprint"]})
    assert done.status_code == 201, done.content
    cluster = Cluster.objects.get(name="galera-lab")
    node = ProxySQLNode.objects.get()
    assert done.json() == {"cluster": cluster.pk, "nodes": [node.pk], "versions": [1]}
    assert HostgroupMembership.objects.filter(server__cluster=cluster).count() == 6
    assert ConfigVersion.objects.filter(cluster=cluster, number=1, source="adopt").exists()
    events = list(
        AuditEvent.objects.filter(action="adopt proxysql node").order_by("id").values_list("outcome", "actor")
    )
    assert events == [("dry_run", "otto-operator (token ci)")] * 3 + [("success", "otto-operator (token ci)")]


def test_bad_input_is_a_400_naming_the_field(operator_user, lab_pair):
    first, _ = lab_pair
    api = token_client(operator_user)
    neither = error_of(api.post(PREVIEW, ask(first, new_cluster_name="")), 400)
    assert "Choose an existing cluster or name a new one" in neither["fields"]["new_cluster_name"][0]
    assert "cluster" in error_of(api.post(PREVIEW, ask(first, cluster=999999)), 400)["fields"]
    same = error_of(api.post(PREVIEW, ask(first, writer_hostgroup=5, reader_hostgroup=5)), 400)
    assert "different hostgroup id" in same["message"]
    assert "admin_port" in error_of(api.post(PREVIEW, ask(first, admin_port=70000)), 400)["fields"]
    assert "kind" in error_of(api.post(PREVIEW, ask(first, kind="oracle")), 400)["fields"]
    assert "admin_host" in error_of(api.post(PREVIEW, ask(first, admin_host="a b;c")), 400)["fields"]
    closed = error_of(api.post(PREVIEW, ask(first, admin_port=1)), 400)
    assert closed["message"].startswith("Could not read a ProxySQL admin interface")
    assert "fingerprint" in error_of(api.post(CONFIRM, ask(first)), 400)["fields"]
    assert list(AuditEvent.objects.filter(action="adopt proxysql node").values_list("outcome", "target")) == [
        ("failure", "127.0.0.1:1")
    ]


def test_a_viewer_may_not_adopt(viewer_user, lab_pair):
    first, _ = lab_pair
    api = token_client(viewer_user)
    before = len(first.statements())
    error_of(api.post(PREVIEW, ask(first)), 403)
    error_of(api.post(CONFIRM, {**ask(first), "fingerprint": "0" * 64}), 403)
    assert len(first.statements()) == before  # refused before the node is read


def test_the_page_and_the_api_share_one_rate_limit(operator_user, operator_client, lab_pair, settings):
    settings.ADOPT_ATTEMPTS_PER_MINUTE = 2
    first, _ = lab_pair
    api = token_client(operator_user)
    assert operator_client.post(reverse("fleet:adopt"), {**ask(first), "preview": "1"}).status_code == 200
    assert api.post(PREVIEW, ask(first)).status_code == 200
    refused = api.post(PREVIEW, ask(first))
    assert "Too many adoption attempts" in error_of(refused, 429)["message"] and refused["Retry-After"]
    # confirm reads the node with the credentials it is given: it counts too
    error_of(api.post(CONFIRM, {**ask(first), "fingerprint": "0" * 64}), 429)
    assert Cluster.objects.count() == 0
