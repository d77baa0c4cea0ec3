"""Cluster.native_manager through the API (issue 33 §4): every reader sees it in the cluster's answer; an admin sets
it with a reason, audited with before, after and the reason; a bad value or no reason changes nothing and says why
(audited as invalid); operators and viewers change nothing."""

import pytest

from apps.api.tests.conftest import error_of, token_client
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    return Cluster.objects.create(name="shop", writer_hostgroup=10, reader_hostgroup=20)


def manager_of(cluster):
    cluster.refresh_from_db()
    return cluster.native_manager


def test_native_manager_is_read_by_viewers_and_set_by_admins_with_a_reason(
    admin_user_role, operator_user, viewer_user, cluster
):
    url = f"/api/v1/clusters/{cluster.pk}/native-manager/"
    viewer = token_client(viewer_user)
    assert viewer.get(f"/api/v1/clusters/{cluster.pk}/").json()["native_manager"] == ""
    listed = viewer.get("/api/v1/clusters/").json()["results"]
    assert [c["native_manager"] for c in listed] == [""]

    admin = token_client(admin_user_role)
    answer = admin.request("put", url, {"native_manager": "replication", "reason": "Monitor runs replication rows"})
    assert answer.status_code == 200, answer.content
    assert answer.json()["native_manager"] == "replication" and manager_of(cluster) == "replication"
    event = AuditEvent.objects.filter(action="cluster native manager changed").order_by("-pk").first()
    assert (event.outcome, event.cluster_id) == ("success", cluster.pk)
    assert event.details == {"before": "", "after": "replication", "reason": "Monitor runs replication rows"}
    assert viewer.get(f"/api/v1/clusters/{cluster.pk}/").json()["native_manager"] == "replication"

    # the same value again: nothing changes, nothing is audited
    count = AuditEvent.objects.count()
    assert admin.request("put", url, {"native_manager": "replication", "reason": "again"}).status_code == 200
    assert AuditEvent.objects.count() == count

    refused = error_of(admin.request("put", url, {"native_manager": "proxysql-magic", "reason": "x"}), 400)
    assert "is none of" in str(refused["fields"]["native_manager"])
    refused = error_of(admin.request("put", url, {"native_manager": "", "reason": " "}), 400)
    assert "a reason is required" in str(refused["fields"]["native_manager"])
    assert AuditEvent.objects.filter(action="cluster native manager changed", outcome="invalid").count() == 2
    assert error_of(admin.request("put", url, {"native_manager": 3}), 400)
    assert error_of(token_client(operator_user).request("put", url, {"native_manager": "", "reason": "x"}), 403)
    assert error_of(viewer.request("put", url, {"native_manager": "", "reason": "x"}), 403)
    assert manager_of(cluster) == "replication"

    assert admin.request("put", url, {"native_manager": "", "reason": "the rows were dropped"}).status_code == 200
    assert manager_of(cluster) == ""
