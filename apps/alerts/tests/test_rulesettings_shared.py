"""Effective rule settings are worked out once per rule for every cluster without settings of its own (and the same
policy), not once per cluster: a worker evaluating 500 clusters held 500 copies (issue 40, worker memory). A
cluster's own settings, the fleet's and the policy still decide what each cluster gets."""

import pytest

from apps.alerts import rulesettings
from apps.alerts.models import RuleSetting
from apps.fleet.models import Cluster

pytestmark = pytest.mark.django_db


def cluster(name, **policy):
    return Cluster.objects.create(name=name, writer_hostgroup=100, reader_hostgroup=101, **policy)


def test_clusters_without_settings_of_their_own_share_one_record_and_overrides_still_apply():
    rulesettings.forget()
    a, b, own = cluster("a"), cluster("b"), cluster("own")
    other_policy = cluster("other", min_available_readers=a.min_available_readers + 3)
    RuleSetting.objects.create(cluster=None, rule="drift", for_s=42)  # the fleet's
    RuleSetting.objects.create(cluster=own, rule="drift", enabled=False)
    rulesettings.forget()

    assert rulesettings.for_cluster(a) is rulesettings.for_cluster(b)  # one record for both
    assert rulesettings.effective(a, "drift") is rulesettings.effective(b, "drift")
    assert rulesettings.effective(a, "drift").for_s == 42 and rulesettings.effective(a, "drift").enabled
    mine = rulesettings.effective(own, "drift")
    assert mine is not rulesettings.effective(a, "drift")
    assert mine.enabled is False and mine.for_s == 42 and ("cluster", "enabled") in mine.overridden
    readers = "readers_low"
    assert rulesettings.effective(other_policy, readers).params != rulesettings.effective(a, readers).params

    # a cluster's first setting of its own takes it out of the shared record (the settings' stamp changed)
    RuleSetting.objects.create(cluster=b, rule="drift", severity="critical")
    rulesettings.forget()
    assert rulesettings.effective(b, "drift").severity == "critical"
    assert rulesettings.effective(a, "drift").severity != "critical"
