"""Repeated identical refusals are folded: a flood of refused confirms, logins or forms writes a bounded
number of rows, every refusal is in the chain (written, or counted in a summary), the chain still
verifies, and nothing but identical refusals is folded together."""

import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse
from django.utils import timezone

from apps.audit.models import AuditEvent, RefusalBurst
from apps.audit.services import count_with_repeats, flush_refusal_bursts, record, verify_chain
from apps.operations.models import Operation
from apps.plans.vocabulary import Guard, Plan
from workers import audit as audit_tasks

pytestmark = pytest.mark.django_db
BURST = 5


@pytest.fixture(autouse=True)
def allowance(settings):
    settings.AUDIT_REFUSAL_BURST = BURST
    settings.AUDIT_REFUSAL_WINDOW_S = 60
    return settings


def after_the_window():
    return timezone.now() + timedelta(seconds=61)


def summaries(action):
    return list(AuditEvent.objects.filter(action=action, details__has_key="repeated").order_by("id"))


def test_a_flood_of_refusals_writes_the_allowance_then_one_summary(clusters):
    alpha = clusters[0]
    for i in range(1000):
        record(
            "switchover refused",
            rule="failover",
            cluster=alpha,
            target="Switchover alpha",
            outcome="refused",
            details={"attempt": i % 3},
        )
    assert AuditEvent.objects.filter(action="switchover refused").count() == BURST
    assert flush_refusal_bursts(after_the_window()) == 1
    rows = AuditEvent.objects.filter(action="switchover refused")
    assert rows.count() == BURST + 1 and count_with_repeats(rows) == 1000
    summary = summaries("switchover refused")[0]
    assert (summary.actor, summary.cluster_id, summary.target, summary.outcome) == (
        "failover",
        alpha.pk,
        "Switchover alpha",
        "refused",
    )
    assert summary.details["repeated"] == 1000 - BURST and summary.details["sample_complete"]
    assert sorted(s["details"]["attempt"] for s in summary.details["sample"]) == [0, 1, 2]  # distinct ones
    assert verify_chain()[1] is None
    assert flush_refusal_bursts(after_the_window()) == 0  # summarised once


def test_only_identical_refusals_are_folded(clusters):
    alpha, beta = clusters
    for cluster in (alpha, beta):
        for target in ("a", "b"):
            for _ in range(BURST + 2):
                record("drain refused", rule="r", cluster=cluster, target=target, outcome="refused")
    for _ in range(BURST + 2):
        record("drain refused", rule="r", cluster=alpha, target="a", outcome="invalid")
        record("drain done", rule="r", cluster=alpha, target="a")  # successes are never folded
    assert AuditEvent.objects.filter(action="drain refused").count() == 5 * BURST
    assert AuditEvent.objects.filter(action="drain done").count() == BURST + 2
    assert flush_refusal_bursts(after_the_window()) == 5
    assert count_with_repeats(AuditEvent.objects.filter(action="drain refused")) == 5 * (BURST + 2)


def test_windows_a_continuing_flood_writes_one_summary_per_window_a_quiet_key_its_allowance(settings, clusters):
    # Windows long enough that a busy machine's scheduling pauses (a full CI run on 2 cores) never look like
    # the quiet window that gives a key its allowance back.
    window = settings.AUDIT_REFUSAL_WINDOW_S = 1.5
    alpha = clusters[0]
    rows = AuditEvent.objects.filter(action="failover refused")

    def refuse(n=1):
        for _ in range(n):
            record("failover refused", rule="failover", cluster=alpha, outcome="refused")

    refuse(20)
    assert rows.count() == BURST
    sent, until = 20, time.monotonic() + 2.6 * window
    while time.monotonic() < until:  # the flood goes on over two more windows
        refuse()
        sent += 1
        time.sleep(0.02)
    written_in_flood = summaries("failover refused")
    assert len(written_in_flood) >= 2  # each ended window: its summary, written by the next refusal
    assert rows.count() == BURST + len(written_in_flood)  # and no new allowance while the flood goes on
    time.sleep(window + 0.1)
    assert audit_tasks.flush_refusal_bursts() == 1  # beat: the flood stopped, its last window is summarised
    assert count_with_repeats(rows) == sent and rows.count() == BURST + len(written_in_flood) + 1
    time.sleep(window + 0.1)  # quiet for a window
    audit_tasks.flush_refusal_bursts()
    assert not RefusalBurst.objects.exists()  # forgotten
    before = rows.count()
    refuse(BURST)
    assert rows.count() == before + BURST  # a fresh allowance
    assert count_with_repeats(rows) == sent + BURST
    assert verify_chain()[1] is None


def test_a_flood_of_failed_logins_is_bounded_and_counted(client, viewer_user):
    """200 guesses at 7 names, each name from its own address: each name's first 5 fail, then the lock (per user
    name and address, issue 34) refuses. A name no user has is audited as its fingerprint."""
    from apps.accounts.views import audited_name

    for i in range(200):
        client.post(
            reverse("accounts:login"),
            {"username": f"guess{i % 7}", "password": "wrong"},
            REMOTE_ADDR=f"10.8.0.{i % 7 + 1}",
        )
    failed, refused = (AuditEvent.objects.filter(action=a) for a in ("login failed", "login refused"))
    assert failed.count() == refused.count() == BURST
    flush_refusal_bursts(after_the_window())
    assert failed.count() == refused.count() == BURST + 1
    assert count_with_repeats(failed) == 35 and count_with_repeats(refused) == 165
    summary = summaries("login failed")[0]
    assert summary.actor == "anonymous" and summary.details["repeated"] == 30
    # The 30 repeated failures come from the 7 (name, address) pairs: each once in the sample, which holds them all.
    assert len(summary.details["sample"]) == 7 and summary.details["sample_complete"]
    assert {"source_address": "10.8.0.6", "details": {"username": audited_name("guess5", False)}} in summary.details[
        "sample"
    ]


def test_a_flood_of_refused_confirms_is_bounded(client, django_user_model, clusters, operator_user):
    alpha = clusters[0]
    plan = Plan("switchover", alpha.pk, "Switchover alpha", [Guard("readers", "readers left", False, "0")], [])
    op = Operation.objects.create(cluster=alpha, kind="switchover", title=plan.title, actor="otto", plan=plan.to_json())
    viewer = django_user_model.objects.create_user(username="v", password="x")
    viewer.groups.add(Group.objects.get_or_create(name="viewer")[0])
    client.force_login(viewer)
    for _ in range(100):
        assert client.post(reverse("operations:confirm", args=[op.pk])).status_code == 403
    client.force_login(operator_user)
    for _ in range(100):  # an operator, but the plan's guards failed
        client.post(reverse("operations:confirm", args=[op.pk]))
    assert AuditEvent.objects.filter(action="refused operation_confirm").count() == BURST
    assert AuditEvent.objects.filter(action="switchover refused").count() == BURST
    flush_refusal_bursts(after_the_window())
    assert count_with_repeats(AuditEvent.objects.filter(action="refused operation_confirm")) == 100
    assert count_with_repeats(AuditEvent.objects.filter(action="switchover refused")) == 100
    assert AuditEvent.objects.count() <= 2 * (BURST + 1) + 2


def test_a_flood_of_invalid_forms_is_bounded(operator_client, clusters):
    alpha = clusters[0]
    for _ in range(60):
        response = operator_client.post(
            reverse("operations:switchover", args=[alpha.pk]), {"new_writer": "nope", "drain_timeout_ms": "x"}
        )
        assert response.status_code == 400
    invalid = AuditEvent.objects.filter(action="switchover planned", outcome="invalid")
    assert invalid.count() == BURST
    flush_refusal_bursts(after_the_window())
    assert count_with_repeats(invalid) == 60


def test_long_names_are_cut_as_the_event_cuts_them(clusters):
    for _ in range(BURST + 3):
        record("r" * 150, rule="x" * 200, cluster=clusters[0], target="t" * 400, outcome="refused")
    flush_refusal_bursts(after_the_window())
    summary = AuditEvent.objects.filter(details__has_key="repeated").get()
    assert (len(summary.action), len(summary.actor), len(summary.target)) == (100, 150, 300)
    assert summary.details["repeated"] == 3
