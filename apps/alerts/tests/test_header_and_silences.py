"""Alerts where a DBA looks: a count in every page's header, "Notified: no" saying that no channel takes the
alert, and a new silence that starts on "choose", never on every cluster and every rule."""

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.alerts.models import Alert, Silence
from apps.fleet.models import Cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def firing(db):
    cluster = Cluster.objects.create(name="alpha", writer_hostgroup=10, reader_hostgroup=20)
    now = timezone.now()
    return cluster, Alert.objects.create(
        rule="writer_none",
        cluster=cluster,
        severity="critical",
        subject_label="proxysql-1 · hostgroup 10",
        summary="no usable ONLINE writer",
        since=now,
        fires_at=now,
        last_seen_at=now,
        state="firing",
        fired_at=now,
        active_key="f1",
        target="n1",
        subject="s1",
    )


def test_the_header_counts_firing_alerts_on_every_page(firing, viewer_client):
    page = viewer_client.get(reverse("audit:list")).content.decode()
    assert 'data-alerts-header="1"' in page and 'class="count critical">1<' in page


def test_notified_no_says_no_channel_takes_the_alert(firing, viewer_client):
    cluster, alert = firing
    page = viewer_client.get(alert.get_absolute_url()).content.decode()
    assert "no enabled channel takes critical alerts of alpha" in page


def test_a_new_silence_starts_on_choose_and_every_is_chosen_on_purpose(firing, operator_client):
    cluster, _ = firing
    page = operator_client.get(reverse("alerts:silences")).content.decode()
    assert "choose a cluster…" in page and "choose a rule…" in page
    # only a rule: refused until a cluster (or every cluster) is chosen
    response = operator_client.post(
        reverse("alerts:silence_create"), {"rule": "writer_none", "minutes": 60, "reason": "rebuild"}
    )
    assert response.status_code == 400 and "Choose a cluster (or every cluster)" in response.content.decode()
    response = operator_client.post(
        reverse("alerts:silence_create"),
        {"cluster": "every", "rule": "writer_none", "minutes": 60, "reason": "rebuild"},
    )
    assert response.status_code == 302
    s = Silence.objects.get()
    assert s.cluster is None and s.rule == "writer_none"
