"""The cluster page after planned work: the alerts held during it and cleared before it ended (never notified) are
folded under one line, not stacked above the runtime hostgroups; one that fired stays in sight; the fold stays
open across the live refresh once a reader opens it."""

import pytest
from django.utils import timezone

from apps.alerts.models import Alert
from apps.fleet.models import Cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_held_and_cleared_alerts_are_folded_on_the_cluster_page(page, live_server, browser_login, viewer_user):
    cluster = Cluster.objects.create(name="alpha", writer_hostgroup=10, reader_hostgroup=20)
    now = timezone.now()
    common = dict(
        rule="writer_none",
        cluster=cluster,
        severity="critical",
        subject_label="proxysql-1 · hostgroup 10",
        summary="no usable ONLINE writer on proxysql-1",
        since=now,
        fires_at=now,
        last_seen_at=now,
        state="resolved",
        resolved_at=now,
    )
    for i in range(5):
        Alert.objects.create(target=f"h{i}", subject=f"held-{i}", was_held=True, hold_reason="switchover #3", **common)
    Alert.objects.create(target="f", subject="fired", fired_at=now, **common)
    browser_login(viewer_user)
    page.goto(f"{live_server.url}{cluster.get_absolute_url()}")
    fold = page.locator("#cluster-alerts details[data-held-cleared='5']")
    assert "5 held during planned work" in fold.locator("summary").inner_text()
    assert page.locator("#cluster-alerts tr[data-state=resolved]:visible").count() == 1  # the one that fired
    fold.locator("summary").click()
    assert page.locator("#cluster-alerts tr[data-state=resolved]:visible").count() == 6
    with page.expect_response(lambda r: f"/alerts/clusters/{cluster.pk}/" in r.url):
        pass  # the 3 s refresh has swapped the section
    page.wait_for_timeout(300)
    assert page.locator("#cluster-alerts details[data-held-cleared]").get_attribute("open") is not None
