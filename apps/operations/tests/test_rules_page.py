"""Issue 23: the read-pool rules' and automatic failover's settings had only the Django admin. Their page per
cluster: settings by role (viewers read, operators the thresholds, admins whether the product acts on its own),
changes audited, what the rules decided recently, and what each rule would do now, decided on the latest polls of
the Galera lab without acting."""

import time

import pytest
from django.test import RequestFactory
from django.urls import reverse

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.operations import rule_settings, rules
from apps.operations.models import Operation

from .conftest import applier_stopped, runtime
from .test_rules import by_port, doc, poll

pytestmark = pytest.mark.django_db


def posted(cluster, **changes):
    """The form as a browser posts it: every field with its current value, checkboxes only when on."""
    values = {f: getattr(cluster, f) for f in rule_settings.FIELDS} | changes
    return {f: ("on" if v is True else "" if v is None else v) for f, v in values.items() if v is not False}


def test_viewers_read_operators_tune_thresholds_admins_turn_the_rules_on(
    adopted_lab, live_redis, client, viewer_user, operator_user, admin_user_role
):
    cluster, _ = adopted_lab
    url, save = (reverse(n, args=[cluster.pk]) for n in ("operations:cluster_rules", "operations:cluster_rules_save"))
    client.force_login(viewer_user)
    assert url in client.get(cluster.get_absolute_url()).content.decode()  # linked from the cluster page
    page = client.get(url).content.decode()
    assert 'name="max_replication_lag" value="100"' in page and 'name="save"' not in page
    assert client.post(save, posted(cluster, max_replication_lag=50)).status_code == 403

    client.force_login(operator_user)
    page = client.get(url).content.decode()
    assert 'name="save"' in page and "Only an admin turns the rules on or off" in page
    client.post(save, posted(cluster, max_replication_lag=50, auto_failover_enabled=True, rules_dry_run=False))
    cluster.refresh_from_db()
    # The threshold is saved; the switches beyond the operator's role are disabled fields: what was posted is ignored.
    assert (cluster.max_replication_lag, cluster.auto_failover_enabled, cluster.rules_dry_run) == (50, False, True)
    event = AuditEvent.objects.get(action="rule settings changed", outcome="success")
    assert event.actor == "otto-operator" and event.details["changes"] == {"max_replication_lag": [100, 50]}
    request = RequestFactory().post(save)
    request.user = operator_user
    with pytest.raises(rule_settings.NotAllowed, match="Only an admin changes auto_failover_enabled"):
        rule_settings.change(cluster, {"auto_failover_enabled": True}, actor=Actor.of_request(request))
    refused = AuditEvent.objects.get(action="rule settings refused")
    assert refused.outcome == "refused" and refused.details["fields"] == ["auto_failover_enabled"]

    client.force_login(admin_user_role)
    client.post(save, posted(cluster, read_pool_rules_enabled=True, rules_dry_run=False, auto_failover_enabled=True))
    cluster.refresh_from_db()
    assert (cluster.read_pool_rules_enabled, cluster.rules_dry_run, cluster.auto_failover_enabled) == (
        True,
        False,
        True,
    )
    event = AuditEvent.objects.filter(action="rule settings changed").latest("pk")
    assert event.actor == "ada-admin" and event.details["changes"] == {
        "read_pool_rules_enabled": [False, True],
        "rules_dry_run": [True, False],
        "auto_failover_enabled": [False, True],
    }
    assert client.post(save, posted(cluster, min_available_readers="x")).status_code == 400  # invalid: said, not saved


def test_the_dry_run_decisions_are_listed_in_operator_words(adopted_lab, live_redis, client, viewer_user):
    cluster, (first, _) = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(read_pool_rules_enabled=True, rules_dry_run=True)
    cluster.refresh_from_db()
    rules.apply_read_pool(cluster, by_port(cluster, p3311=doc(), p3312=doc(), p3313=doc(ok=False)))
    client.force_login(viewer_user)
    decisions = client.get(reverse("operations:cluster_rules", args=[cluster.pk])).content.decode()
    decisions = decisions[decisions.index('id="decisions"') :]
    assert "read-pool rules (dry run)" in decisions
    assert "127.0.0.1:3313 in hostgroup 101 → OFFLINE_SOFT (unreachable: refused)" in decisions
    assert ("127.0.0.1", 3313, "ONLINE") in runtime(first, 101) and not Operation.objects.exists()


def test_a_desynced_reader_behind_shows_would_take_out_and_nothing_is_done(
    adopted_lab, live_redis, galera_healthy, client, viewer_user
):
    cluster, (first, second) = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(max_replication_lag=20)  # the rules stay off: a look only
    cluster.refresh_from_db()
    with applier_stopped(galera_healthy, 2):  # node 2 falls behind: its recv queue grows
        deadline, queue = time.monotonic() + 15, 0
        while time.monotonic() < deadline and queue <= 20:
            queue = poll(cluster)[Server.objects.get(port=3312).pk].state["local_recv_queue"]
            time.sleep(0.2)
        assert queue > 20, f"recv queue only reached {queue}"
        client.force_login(viewer_user)
        page = client.get(reverse("operations:cluster_rules", args=[cluster.pk])).content.decode()
    now = page[page.index('id="would-do-now"') : page.index('id="settings"')]
    assert (
        "would take out 127.0.0.1:3312 in reader hostgroup 101 (ONLINE → OFFLINE_SOFT): Donor/Desynced, recv queue"
        in now
    )
    assert "the writer 127.0.0.1:3311 answers as a writer: nothing to do" in now
    assert "the read-pool rules are off" in now
    for double in (first, second):
        assert ("127.0.0.1", 3312, "ONLINE") in runtime(double, 101)
    assert HostgroupMembership.objects.get(server__port=3312, hostgroup_id=101).status == "ONLINE"
    assert not Operation.objects.exists() and not AuditEvent.objects.filter(actor__in=rule_settings.RULE_NAMES).exists()
