"""Issue 34: events written before alert channel URLs became secrets (alerts 0003) hold a channel's full URL and a
failed delivery's error quoting its path; the chain keeps them as written. Nobody reads those URLs: pages, API, CSV
and JSON exports show scheme and host, and the search (after migration audit 0006 rebuilt its index) finds no event
by a piece of them. The hashed evidence is unchanged (the chain verifies)."""

import importlib
import json

import pytest
from django.apps import apps
from django.core.serializers.json import DjangoJSONEncoder
from django.urls import reverse

from apps.audit import search
from apps.audit.models import AuditEvent, AuditSearchToken
from apps.audit.services import record, verify_chain

pytestmark = pytest.mark.django_db
SECRET = "T0SECRET/B0SECRET/XXSECRETXX"
URL = f"https://hooks.slack.com/services/{SECRET}"
rebuild = importlib.import_module("apps.audit.migrations.0006_search_index_without_channel_urls").rebuild


def as_written_before(event):
    """The event's search index as it was written before the redaction: the URL in it."""
    text = "\n".join(
        str(p)
        for p in (
            event.action,
            event.actor,
            event.cluster_name,
            event.target,
            event.outcome,
            event.source_address or "",
            json.dumps(event.details, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder),
        )
    ).lower()
    AuditEvent._base_manager.filter(pk=event.pk).update(search_text=text)
    AuditSearchToken.objects.filter(event_id=event.pk).delete()
    AuditSearchToken.objects.bulk_create(
        [AuditSearchToken(token=t, event_id=event.pk) for t in search.tokens_for(text)]
    )


@pytest.fixture
def old_events():
    added = record(
        "add alert channel",
        target="chat",
        details={"channel": 1, "before": None, "after": {"name": "chat", "kind": "slack", "url": URL, "secret": ""}},
    )
    failed = record(
        "alert notification not delivered",
        target="chat",
        outcome="failure",
        details={
            "notification": 7,
            "attempts": 3,
            "error": "HTTPSConnectionPool(host='hooks.slack.com', port=443): Max retries "
            f"exceeded with url: /services/{SECRET} (Caused by timeout)",
        },
    )
    for event in (added, failed):
        as_written_before(event)
    assert AuditEvent.objects.filter(search_text__contains=SECRET.lower()).count() == 2  # the old index
    return added, failed


def test_a_viewer_reads_no_old_channel_url(viewer_client, old_events):
    pages = [reverse("audit:list"), reverse("audit:export_csv"), reverse("audit:export_json"), "/api/v1/audit/events/"]
    pages += [reverse("audit:detail", args=[e.pk]) for e in old_events]
    pages += [f"/api/v1/audit/events/{e.pk}/" for e in old_events]
    for url in pages:
        response = viewer_client.get(url)
        body = (b"".join(response.streaming_content) if response.streaming else response.content).decode()
        assert response.status_code == 200 and "SECRET" not in body, url
        assert "hooks.slack.com" in body, url
    assert (
        "https://hooks.slack.com/…"
        in viewer_client.get(reverse("audit:detail", args=[old_events[0].pk])).content.decode()
    )
    assert verify_chain()[1] is None  # the evidence as written


def test_the_search_finds_no_event_by_a_piece_of_an_old_url(viewer_client, old_events):
    rebuild(apps, None)
    links = [f'href="{reverse("audit:detail", args=[e.pk])}"' for e in old_events]
    for term in ("t0secret", "xxsecretxx", "services/t0", "b0sec"):
        page = viewer_client.get(reverse("audit:list"), {"q": term}).content.decode()
        assert not any(link in page for link in links), term
        api = viewer_client.get("/api/v1/audit/events/", {"q": term}).json()
        assert api["results"] == [], term
    page = viewer_client.get(reverse("audit:list"), {"q": "slack"}).content.decode()
    assert all(link in page for link in links)
    assert verify_chain()[1] is None
