"""Retention: events past the retention period are archived with the chain head at the cut, removed by
the one delete path, and the chain that remains still verifies; the command, the task and beat."""

import gzip
import json
import os
from datetime import timedelta

import pytest
from django.apps import apps as django_apps
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from apps.audit import reanchor, services
from apps.audit.models import AuditArchive, AuditEvent, AuditSearchToken
from apps.audit.services import ArchiveRefused, archive_old_events, record, verify_archive, verify_chain
from workers import audit as audit_tasks

from .conftest import TABLE, legacy_event, old_style_deletion, tamper

pytestmark = pytest.mark.django_db


def test_command_reports_intact_and_broken(capsys):
    record("a")
    victim = record("b")
    call_command("verify_audit_chain")
    assert "2 event(s) verified" in capsys.readouterr().out
    tamper("UPDATE {table} SET actor = %s WHERE id = %s", ["mallory", victim.pk])
    with pytest.raises(CommandError, match=f"broken at event {victim.pk}"):
        call_command("verify_audit_chain")


def test_archive_then_the_remaining_chain_still_verifies(at, archive_dir):
    old = [at(60 * 24 * (500 - i), f"old {i}", details={"i": i, "note": "Zürich"}) for i in range(30)]
    recent = [at(60 * 24 * (10 - i), f"recent {i}") for i in range(5)]
    archive = archive_old_events(400, delete_chunk=7)  # several delete chunks

    assert archive.first_id == old[0].pk and archive.last_id == old[-1].pk and archive.count == 30
    assert archive.head_hash == old[-1].hash and archive.first_prev_hash == services.GENESIS and archive.removed
    assert not AuditEvent.objects.filter(pk__lte=old[-1].pk).exists()
    assert not AuditSearchToken.objects.filter(event_id__lte=old[-1].pk).exists()
    assert AuditEvent.objects.filter(pk__in=[e.pk for e in recent]).count() == 5
    audited = AuditEvent.objects.get(action="archive audit events")  # the removal is itself audited
    assert audited.details["count"] == 30 and audited.details["head_hash"] == old[-1].hash
    assert audited.details["path"] == archive.path and audited.actor == "system"

    checked, broken, reason = verify_chain()  # starts from the archived head
    assert broken is None and checked == 6  # five recent events and the archive's own event
    assert verify_archive(archive) == (True, f"30 events verified, head {old[-1].hash[:16]}…")
    lines = [json.loads(line) for line in gzip.open(archive.path, "rt", encoding="utf-8")]
    assert [e["action"] for e in lines[:-1]] == [f"old {i}" for i in range(30)]
    assert lines[0]["details"] == {"i": 0, "note": "Zürich"} and lines[-1]["archive"]["head_hash"] == old[-1].hash
    assert str(archive_dir) in archive.path

    assert archive_old_events(400) is None  # nothing more is due

    # the next archive continues the chain from this one's head
    record("later")
    second = archive_old_events(0)
    assert second.first_prev_hash == archive.head_hash and verify_archive(second)[0]
    assert verify_chain()[1] is None


def test_tampered_archive_file_is_detected(at, archive_dir):
    for i in range(3):
        at(60 * 24 * 500, f"old {i}")
    archive = archive_old_events(400)
    with gzip.open(archive.path, "wt", encoding="utf-8") as f:  # rewritten, one event changed
        f.write(json.dumps({"id": 1, "action": "forged"}) + "\n")
    ok, message = verify_archive(archive)
    assert not ok and "changed since it was written" in message
    with pytest.raises(CommandError, match="archive file"):
        call_command("verify_audit_chain", "--archives")


def test_a_broken_chain_is_never_archived(at, archive_dir):
    events = [at(60 * 24 * 500, f"old {i}") for i in range(4)]
    tamper("UPDATE {table} SET details = %s WHERE id = %s", ['{"x": 1}', events[1].pk])
    with pytest.raises(ArchiveRefused, match=f"broken at event {events[1].pk}"):
        archive_old_events(400)
    assert AuditEvent.objects.filter(pk__in=[e.pk for e in events]).count() == 4  # nothing removed
    assert not AuditArchive.objects.exists() and not list(archive_dir.glob("*"))
    refusal = AuditEvent.objects.get(action="archive audit events")
    assert refusal.outcome == "refused" and str(events[1].pk) in refusal.details["reason"]


def test_a_removal_that_died_half_way_is_finished(at, archive_dir):
    old = [at(60 * 24 * 500, f"old {i}") for i in range(6)]
    archive = archive_old_events(400)
    # As if the process died after writing the archive and before deleting: put rows back by hand.
    AuditArchive.objects.filter(pk=archive.pk).update(removed=False)
    lines = [json.loads(line) for line in gzip.open(archive.path, "rt", encoding="utf-8")][:2]
    with connection.cursor() as cur:
        for e in lines:
            cur.execute(
                f"INSERT INTO {TABLE} (id, created_at, actor, actor_kind, action, outcome, details, target, "
                "cluster_name, prev_hash, hash, search_text, scheme) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, '', '', %s, %s, '', %s)",
                [
                    e["id"],
                    AuditEvent.objects.first().created_at,
                    e["actor"],
                    e["actor_kind"],
                    e["action"],
                    e["outcome"],
                    "{}",
                    e["prev_hash"],
                    e["hash"],
                    e.get("scheme", 1),
                ],
            )
    assert verify_chain()[1] is None  # archived rows awaiting removal are skipped, not "broken"
    assert archive_old_events(400) is None  # the next run finishes the removal first
    assert not AuditEvent.objects.filter(pk__lte=old[-1].pk).exists()
    assert AuditArchive.objects.get().removed


def test_retention_command_and_task(at, archive_dir, settings, capsys):
    month = at(60 * 24 * 30, "a month ago")
    at(60, "an hour ago")
    call_command("archive_audit_events")
    assert "nothing to archive" in capsys.readouterr().out  # the default is 400 days
    settings.AUDIT_RETENTION_DAYS = 7
    assert audit_tasks.archive_old_events() == {
        "archive": AuditArchive.objects.get().pk,
        "count": 1,
        "last_id": month.pk,
    }
    call_command("archive_audit_events", "--days", "0")  # the hour-old event and the first run's own event
    assert "archived 2 event(s)" in capsys.readouterr().out
    with pytest.raises(CommandError):
        call_command("archive_audit_events", "--days", "-1")


def test_the_beat_schedule_runs_retention():
    from controlplane.celery import _beat_schedule, app

    entries = [e for e in _beat_schedule().values() if e["task"] == "audit.archive_old_events"]
    assert len(entries) == 1 and "workers.audit" in app.conf.imports


def test_an_archive_across_the_reanchor_verifies_and_so_does_what_remains(at, archive_dir, capsys, django_user_model):
    now = timezone.now()
    bob = django_user_model.objects.create_user(username="bob", password="x")
    legacy = [legacy_event(f"legacy {i}", bob if i % 2 else None, now - timedelta(days=500 - i)) for i in range(6)]
    old_style_deletion(bob)  # a deletion before the upgrade nulled bob's links
    anchor = reanchor.run(django_apps, connection, now=now - timedelta(days=450))
    assert anchor.details["restored_user_links"][0]["events"] == 3
    current = [at(60 * 24 * (420 - i), f"current {i}") for i in range(3)]
    recent = at(60, "recent")

    archive = archive_old_events(400)
    assert (archive.first_id, archive.last_id, archive.count) == (legacy[0].pk, current[-1].pk, 10)
    assert verify_archive(archive) == (True, f"10 events verified, head {current[-1].hash[:16]}…")
    lines = [json.loads(line) for line in gzip.open(archive.path, "rt", encoding="utf-8")][:-1]
    assert [line.get("scheme") for line in lines] == [None] * 6 + [2] * 4  # legacy lines, then the anchor on
    assert verify_chain()[1] is None and AuditEvent.objects.filter(pk=recent.pk).exists()
    call_command("verify_audit_chain", "--archives")
    out = capsys.readouterr().out
    assert "10 events verified" in out and "audit chain intact" in out

    # an archived legacy line edited (and the file's checksum forged to match) is still found
    lines[2]["action"] = "forged"
    with gzip.open(archive.path, "wt", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line) + "\n")
        f.write(json.dumps({"archive": {}}) + "\n")
    AuditArchive.objects.filter(pk=archive.pk).update(sha256=services._sha256_of(archive.path))
    archive.refresh_from_db()
    assert verify_archive(archive) == (
        False,
        f"event {legacy[2].pk} in {os.path.basename(archive.path)} does not verify",
    )
