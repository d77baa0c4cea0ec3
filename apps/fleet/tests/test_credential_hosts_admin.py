"""Issue 34: a cluster's credential hosts are set by an admin in the Django admin, checked entry by entry, audited."""

import pytest
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster

pytestmark = pytest.mark.django_db

FORM = {
    "name": "shop",
    "kind": "galera",
    "description": "",
    "writer_hostgroup": "100",
    "reader_hostgroup": "101",
    "max_replication_lag": "100",
    "min_available_readers": "1",
    "writer_is_also_reader": "1",
    "drain_timeout_ms": "5000",
    "poll_interval_s": "2",
    "backend_poll_interval_s": "1",
    "reader_return_after_s": "10",
    "offline_hard_grace_s": "30",
    "failover_after_polls": "2",
    "failback_after_s": "300",
    "plan_validity_s": "10",
    "config_confirm_role": "operator",
    "cluster_sync_mode": "hold",
}


def test_an_admin_sets_the_credential_hosts_checked_and_audited(client, admin_user_role):
    client.force_login(admin_user_role)
    refused = client.post(reverse("admin:fleet_cluster_add"), {**FORM, "credential_hosts": "10.0.0.0/8 10.0.0.1/8"})
    assert refused.status_code == 200 and "&#x27;10.0.0.1/8&#x27; is not an address or network" in refused.text
    assert not Cluster.objects.exists()
    saved = client.post(
        reverse("admin:fleet_cluster_add"), {**FORM, "credential_hosts": "db-*.example.net\n10.0.0.0/8"}
    )
    assert saved.status_code == 302
    assert Cluster.objects.get().credential_hosts == "db-*.example.net\n10.0.0.0/8"
    event = AuditEvent.objects.get(action="add cluster")
    assert event.details["after"]["credential_hosts"] == "db-*.example.net\n10.0.0.0/8"
