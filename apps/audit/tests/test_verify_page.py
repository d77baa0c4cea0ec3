"""Chain verification on the admin page: an edited or removed event is named, a long chain is verified
in signed stretches, archive files are checked on request."""

import re

import pytest
from django.urls import reverse

from apps.audit import views
from apps.audit.models import AuditEvent
from apps.audit.services import archive_old_events, record
from lab import bench_audit as bench

from .conftest import tamper

pytestmark = pytest.mark.django_db


def test_page_names_the_edited_event(admin_client):
    for i in range(5):
        record(f"change {i}", details={"weight": i})
    victim = AuditEvent.objects.get(action="change 2")
    response = admin_client.post(reverse("audit:verify"))
    assert b'data-testid="verify-ok"' in response.content and b"5 events verified" in response.content
    tamper("UPDATE {table} SET details = %s WHERE id = %s", ['{"weight": 200}', victim.pk])
    page = admin_client.post(reverse("audit:verify")).content.decode()
    assert 'data-testid="verify-broken"' in page and f"/audit/{victim.pk}/" in page
    assert "was edited" in page and "2 events before it verified" in page
    last = AuditEvent.objects.filter(action="verify audit chain").latest("id")
    assert last.outcome == "failure" and last.details["broken_event"] == victim.pk and last.actor == "ada-admin"


def test_page_names_the_event_after_a_removed_one(admin_client):
    for i in range(4):
        record(f"change {i}")
    victim, after = AuditEvent.objects.filter(action__in=["change 1", "change 2"]).order_by("id")
    tamper("DELETE FROM {table} WHERE id = %s", [victim.pk])
    response = admin_client.post(reverse("audit:verify"), HTTP_HX_REQUEST="true")  # the htmx partial
    page = response.content.decode()
    assert "<html" not in page and f"/audit/{after.pk}/" in page and "was removed or reordered" in page


def continuation_of(response):
    found = re.search(r'name="continuation" value="([^"]+)"', response.content.decode())
    return found and found.group(1)


def test_a_long_chain_is_verified_in_signed_stretches(admin_client, monkeypatch):
    bench.generate(2500, days=3)  # the benchmark's bulk writer: a valid chain, fast
    monkeypatch.setattr(views, "VERIFY_BUDGET_S", 0)  # each request stops at its first deadline check (1,000 events)
    response = admin_client.post(reverse("audit:verify"), HTTP_HX_REQUEST="true")
    assert (
        'hx-trigger="load, submit"' in response.content.decode() and "1000 events so far" in response.content.decode()
    )
    forged = admin_client.post(
        reverse("audit:verify"), {"continuation": continuation_of(response)[:-3] + "abc"}, HTTP_HX_REQUEST="true"
    )
    assert "1000 events so far" in forged.content.decode()  # a forged continuation starts over: not trusted
    steps = 1
    while continuation_of(response):
        response = admin_client.post(
            reverse("audit:verify"), {"continuation": continuation_of(response)}, HTTP_HX_REQUEST="true"
        )
        steps += 1
    assert steps == 3 and b"2500 events verified" in response.content


def test_page_checks_the_archive_files_on_request(admin_client, at):
    for i in range(4):
        at(60 * 24 * 500, f"old {i}")
    at(5, "recent")
    archive = archive_old_events(400)
    page = admin_client.post(reverse("audit:verify"), {"archives": "1"}).content.decode()
    assert 'data-testid="verify-ok"' in page and "2 events verified" in page  # "recent" and the archiving
    assert f"Archive {archive.first_id}–{archive.last_id}: 4 events verified" in page
    assert archive.path in admin_client.get(reverse("audit:verify")).content.decode()
