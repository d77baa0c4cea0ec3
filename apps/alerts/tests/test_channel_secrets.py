"""A channel's URL is a secret (issue 34): for Slack-style and many JSON webhooks the URL is the credential.
Stored encrypted, shown as scheme and host only, in the audit log as a fingerprint, never in the delivery log; what
a receiver answered is not logged either; `rotate_credentials` re-encrypts it."""

import io
import json
import socket

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection
from django.urls import reverse

from apps.alerts import notify
from apps.alerts.models import Channel, DeliveryAttempt, Notification
from apps.audit.models import AuditEvent
from apps.fleet.secrets import PREFIX

SECRET = "T0SECRET/B0SECRET/xoxbSECRETtoken"
NEW_SECRET = "T1SECRET/B1SECRET/rotatedSECRETtoken"


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stored_url(channel):
    with connection.cursor() as cur:
        cur.execute(f"SELECT url FROM {Channel._meta.db_table} WHERE id=%s", [channel.pk])
        return cur.fetchone()[0]


def everything_a_viewer_reads(client, channel, notification):
    pages = [
        reverse("alerts:channels"),
        channel.get_absolute_url(),
        reverse("alerts:channel_log", args=[channel.pk]),
        reverse("audit:list"),
        reverse("audit:export_csv"),
        reverse("audit:export_json"),
        "/api/v1/audit/events/",
        "/api/v1/alert-channels/",
        f"/api/v1/alert-channels/{channel.pk}/",
    ]
    pages += [reverse("audit:detail", args=[e.pk]) for e in AuditEvent.objects.all()]
    pages += [f"/api/v1/audit/events/{e.pk}/" for e in AuditEvent.objects.all()]
    bodies = {}
    for url in pages:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        bodies[url] = b"".join(response.streaming_content) if response.streaming else response.content
    return {url: body.decode() for url, body in bodies.items()}


@pytest.mark.django_db
def test_a_viewer_reads_no_secret_url_anywhere(client, admin_user_role, viewer_user, receiver):
    client.force_login(admin_user_role)
    fields = {"name": "chat", "kind": "slack", "min_severity": "warning"}
    assert (
        client.post(reverse("alerts:channel_create"), {**fields, "url": f"{receiver.url}/{SECRET}"}).status_code == 302
    )
    channel = Channel.objects.get(name="chat")
    # Edited twice: once keeping the URL (left empty), once to another URL (typed again).
    assert (
        client.post(reverse("alerts:channel_edit", args=[channel.pk]), {**fields, "min_severity": "info"}).status_code
        == 302
    )
    assert Channel.objects.get(pk=channel.pk).url == f"{receiver.url}/{SECRET}"
    edit_page = client.get(channel.get_absolute_url()).content.decode()
    assert SECRET not in edit_page  # not even to the admin: re-entered or kept
    dead = f"http://127.0.0.1:{closed_port()}/services/{NEW_SECRET}?token={NEW_SECRET}"
    assert (
        client.post(
            reverse("alerts:channel_edit", args=[channel.pk]), {**fields, "min_severity": "info", "url": dead}
        ).status_code
        == 302
    )
    channel.refresh_from_db()
    assert channel.url == dead
    assert stored_url(channel).startswith(PREFIX) and "SECRET" not in stored_url(channel)
    # A failed delivery (connection refused: requests' text quotes the URL's path and query).
    n = Notification.objects.create(channel=channel, reason="test", status="firing", payload={"text": "x"})
    assert notify.attempt(n.pk) == (False, True)
    notify.give_up(n.pk, "gave up")
    error = DeliveryAttempt.objects.get(notification=n).error
    assert "ConnectionError" in error and "Connection refused" in error and "127.0.0.1" in error

    change = AuditEvent.objects.filter(action="change alert channel").order_by("-id").first()
    assert change.details["changed"] == ["url"]
    assert change.details["before"]["url"] != change.details["after"]["url"]  # the fingerprint says it changed

    client.force_login(viewer_user)
    for url, body in everything_a_viewer_reads(client, channel, n).items():
        assert "SECRET" not in body, url
    page = client.get(channel.get_absolute_url()).content.decode()
    assert f"<code>http://127.0.0.1:{channel.url.split(':')[2].split('/')[0]}/…</code>" in page


@pytest.mark.django_db
def test_what_a_receiver_answered_is_not_logged(receiver):
    receiver.status, receiver.answer = 500, b'{"internal": "SECRET-of-an-internal-service"}'
    channel = Channel.objects.create(name="hook", kind="webhook", url=receiver.url)
    n = Notification.objects.create(channel=channel, reason="test", status="firing", payload={"alerts": []})
    assert notify.attempt(n.pk) == (False, True)
    [attempt] = DeliveryAttempt.objects.filter(notification=n)
    assert attempt.http_status == 500 and "SECRET" not in attempt.error and "HTTP 500" in attempt.error
    assert "SECRET" not in Notification.objects.get(pk=n.pk).last_error


@pytest.mark.django_db
def test_the_api_keeps_the_url_when_a_change_leaves_it_out(client, admin_user_role, receiver):
    client.force_login(admin_user_role)
    url = f"{receiver.url}/{SECRET}"
    made = client.post(
        "/api/v1/alert-channels/", {"name": "api", "kind": "webhook", "url": url}, content_type="application/json"
    )
    assert made.status_code == 201 and SECRET not in made.content.decode()
    pk = made.json()["id"]
    changed = client.patch(
        f"/api/v1/alert-channels/{pk}/", {"min_severity": "critical"}, content_type="application/json"
    )
    assert changed.status_code == 200, changed.content
    assert Channel.objects.get(pk=pk).url == url
    assert all(SECRET not in json.dumps(e.details) for e in AuditEvent.objects.all())


@pytest.mark.django_db
def test_rotation_covers_the_channel_url_and_secret(settings):
    old_key = settings.CREDENTIALS_KEYS[0]
    channel = Channel.objects.create(
        name="pd", kind="pagerduty", url="https://events.example.net/v2/enqueue", secret="routing-key"
    )
    before = stored_url(channel)
    new_key = Fernet.generate_key().decode()
    settings.CREDENTIALS_KEYS = [new_key, old_key]
    call_command("rotate_credentials", stdout=io.StringIO())
    settings.CREDENTIALS_KEYS = [new_key]  # the old key is gone: only rotated values still decrypt
    channel = Channel.objects.get(pk=channel.pk)
    assert stored_url(channel) != before
    assert channel.url == "https://events.example.net/v2/enqueue" and channel.secret == "routing-key"


def test_digest_text_reaches_slack_escaped():
    from types import SimpleNamespace

    from django.utils import timezone

    from apps.alerts.channels import slack_payload

    sql = "SELECT '<!channel>' , '<http://evil.example|your bank>' & 1 > 0"
    now = timezone.now()
    alert = SimpleNamespace(
        pk=1,
        rule="digest_new_top",
        severity="warning",
        state="firing",
        summary=f"new top: {sql}",
        subject_label=f"digest {sql}",
        since=now,
        fired_at=now,
        resolved_at=None,
        cluster=SimpleNamespace(name="<!here>"),
        details={},
        get_absolute_url=lambda: "/alerts/1/",
    )
    payload = json.dumps(slack_payload(None, "<!here>", "firing", [alert]))
    for raw in ("<!channel>", "<http://evil", "<!here>", "|your bank>"):
        assert raw not in payload, raw
    assert "&lt;!channel&gt;" in payload and "&amp; 1 &gt; 0" in payload


@pytest.mark.django_db
def test_the_migration_encrypts_stored_urls_and_cleans_the_delivery_log():
    import importlib

    from django.apps import apps

    migration = importlib.import_module("apps.alerts.migrations.0003_channel_url_encrypted")
    url = f"https://hooks.example.net/services/{SECRET}"
    channel = Channel.objects.create(name="old", kind="slack", url="x")
    with connection.cursor() as cur:  # as 0002 left it: the URL in clear
        cur.execute(f"UPDATE {Channel._meta.db_table} SET url=%s WHERE id=%s", [url, channel.pk])
    n = Notification.objects.create(
        channel=channel,
        reason="test",
        status="firing",
        payload={},
        last_error=f"ConnectionError: ... Max retries exceeded with url: /services/{SECRET}",
    )
    DeliveryAttempt.objects.create(
        notification=n,
        at=n.created_at,
        ok=False,
        http_status=500,
        duration_ms=1,
        error='HTTP 500: {"internal": "SECRET answer"}',
    )
    migration.encrypt_and_clean(apps, None)
    assert stored_url(channel).startswith(PREFIX) and Channel.objects.get(pk=channel.pk).url == url
    assert "SECRET" not in Notification.objects.get(pk=n.pk).last_error
    assert DeliveryAttempt.objects.get(notification=n).error == "HTTP 500"
