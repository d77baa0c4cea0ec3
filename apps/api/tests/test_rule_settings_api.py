"""A cluster's read-pool rules and automatic failover settings through the API (issue 23 §5): the rules page's
form and rule_settings.change(), so the same ranges, the same role per field and the same audit."""

import pytest

from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster

from .conftest import error_of, token_client

pytestmark = pytest.mark.django_db


def patch(api, cluster, values):
    return api.request("patch", f"/api/v1/clusters/{cluster.pk}/rule-settings/", values)


def test_viewers_read_operators_tune_thresholds_admins_the_switches(viewer_user, operator_user, admin_user_role):
    cluster = Cluster.objects.create(name="c1", writer_hostgroup=100, reader_hostgroup=101)
    viewer, operator, admin = (token_client(u) for u in (viewer_user, operator_user, admin_user_role))
    read = viewer.get(f"/api/v1/clusters/{cluster.pk}/rule-settings/")
    assert read.status_code == 200 and read.json()["max_replication_lag"] == cluster.max_replication_lag
    error_of(patch(viewer, cluster, {"max_replication_lag": 50}), 403)

    tuned = patch(operator, cluster, {"max_replication_lag": 50, "reader_return_after_s": 30})
    assert tuned.status_code == 200, tuned.content
    assert (tuned.json()["max_replication_lag"], tuned.json()["reader_return_after_s"]) == (50, 30)
    refused = error_of(patch(operator, cluster, {"auto_failover_enabled": True, "min_available_readers": 2}), 403)
    assert "Only an admin changes auto_failover_enabled" in refused["message"]
    assert "min_available_readers" in error_of(patch(operator, cluster, {"min_available_readers": -1}), 400)["fields"]
    cluster.refresh_from_db()
    assert (
        not cluster.auto_failover_enabled and cluster.max_replication_lag == 50 and cluster.min_available_readers != 2
    )

    assert patch(admin, cluster, {"auto_failover_enabled": True}).json()["auto_failover_enabled"] is True
    cluster.refresh_from_db()
    assert cluster.auto_failover_enabled and cluster.max_replication_lag == 50  # the fields not named are kept

    events = list(
        AuditEvent.objects.filter(action__startswith="rule settings")
        .order_by("id")
        .values_list("action", "outcome", "actor")
    )
    assert events == [
        ("rule settings changed", "success", "otto-operator (token tests)"),
        ("rule settings refused", "refused", "otto-operator (token tests)"),
        ("rule settings changed", "invalid", "otto-operator (token tests)"),
        ("rule settings changed", "success", f"{admin_user_role.username} (token tests)"),
    ]
    first = AuditEvent.objects.filter(action="rule settings changed", outcome="success").order_by("id").first()
    assert first.details["changes"]["max_replication_lag"][1] == 50 and first.cluster_name == "c1"
