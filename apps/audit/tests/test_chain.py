"""The audit log is append-only and tamper-evident."""

import pytest
from django.apps import apps as django_apps
from django.db import connection

from apps.audit import reanchor
from apps.audit.models import CURRENT_SCHEME, LEGACY_SCHEME, REANCHOR_ACTION, AuditEvent
from apps.audit.services import GENESIS, _isoformat, record, verify_chain

from .conftest import legacy_event, old_style_deletion, tamper


@pytest.mark.django_db
def test_events_chain_and_verify():
    first = record("add cluster", details={"name": "c1"})
    second = record("change cluster", details={"weight": [1, 2]})
    assert first.prev_hash == GENESIS and second.prev_hash == first.hash
    assert verify_chain() == (2, None, "")


@pytest.mark.django_db
def test_orm_refuses_updates_and_deletes():
    event = record("x")
    with pytest.raises(TypeError):
        event.save()
    with pytest.raises(TypeError):
        event.delete()
    with pytest.raises(TypeError):
        AuditEvent.objects.filter(pk=event.pk).update(action="y")
    with pytest.raises(TypeError):
        AuditEvent.objects.all().delete()


@pytest.mark.django_db
def test_edit_behind_the_orms_back_is_detected():
    record("a")
    victim = record("b", details={"weight": 1})
    record("c")
    with connection.cursor() as cur:  # what an attacker with database access would do
        cur.execute(f"UPDATE {AuditEvent._meta.db_table} SET details = %s WHERE id = %s", ['{"weight": 9}', victim.pk])
    checked, broken, reason = verify_chain()
    assert checked == 1 and broken.pk == victim.pk and "edited" in reason


@pytest.mark.django_db
def test_removed_event_is_detected():
    record("a")
    victim = record("b")
    after = record("c")
    with connection.cursor() as cur:
        cur.execute(f"DELETE FROM {AuditEvent._meta.db_table} WHERE id = %s", [victim.pk])
    checked, broken, reason = verify_chain()
    assert broken.pk == after.pk and "removed" in reason


@pytest.mark.django_db
def test_credentials_never_reach_details():
    event = record("adopt", details={"admin_password": "s3cret", "nested": [{"monitor_password": "x"}], "user": "u"})
    event.refresh_from_db()
    assert "s3cret" not in str(event.details) and event.details["user"] == "u"
    assert event.details["nested"][0]["monitor_password"] == "(hidden)"


# -- actors as written, the legacy scheme and the re-anchor ---------------------------------------------


def run_reanchor(**kwargs):
    return reanchor.run(django_apps, connection, **kwargs)


@pytest.mark.django_db
def test_deleting_a_user_leaves_the_chain_intact(django_user_model):
    bob = django_user_model.objects.create_user(username="bob", password="x")
    bob_id = bob.pk
    his = record("change cluster", user=bob)
    record("something else")
    bob.delete()
    assert verify_chain() == (2, None, "")
    his = AuditEvent.objects.get(pk=his.pk)
    assert (his.actor, his.actor_user_id) == ("bob", bob_id)  # who did it, as written


@pytest.mark.django_db
def test_the_reanchor_restores_links_deletions_nulled_and_the_chain_goes_on(django_user_model):
    alice = django_user_model.objects.create_user(username="alice", password="x")
    bob = django_user_model.objects.create_user(username="bob", password="x")
    bob_id = bob.pk
    first, _, _, last = (legacy_event("a", bob), legacy_event("b"), legacy_event("c", alice), legacy_event("d", bob))
    old_style_deletion(bob)
    assert verify_chain()[1].pk == first.pk  # what an existing log looked like: tampering, at bob's first event

    anchor = run_reanchor()
    assert anchor.scheme == CURRENT_SCHEME and anchor.prev_hash == last.hash and anchor.action == REANCHOR_ACTION
    assert anchor.details["old_head"] == last.hash and anchor.details["legacy_events"] == 4
    assert anchor.details["restored_user_links"] == [
        {"actor": "bob", "actor_user_id": bob_id, "events": 2, "first_event": first.pk, "last_event": last.pk}
    ]
    assert anchor.details["unrestorable_events"] == {"count": 0, "events": []}
    assert AuditEvent.objects.get(pk=first.pk).actor_user_id == bob_id
    after = record("after the anchor", user=alice)
    assert after.scheme == CURRENT_SCHEME and after.prev_hash == anchor.hash
    assert verify_chain() == (6, None, "")
    assert run_reanchor() is None  # once only


@pytest.mark.django_db
def test_a_new_log_needs_no_anchor():
    assert run_reanchor() is None and not AuditEvent.objects.exists()
    record("first")
    assert verify_chain() == (1, None, "")


@pytest.fixture
def anchored_log(db):
    """Three legacy events, the re-anchor, three current ones."""
    legacy = [legacy_event(f"old {i}") for i in range(3)]
    anchor = run_reanchor()
    current = [record(f"new {i}") for i in range(3)]
    return legacy, anchor, current


@pytest.mark.parametrize("side", ["before", "after"])
def test_an_edit_is_found_at_its_row_before_and_after_the_reanchor(anchored_log, side):
    legacy, anchor, current = anchored_log
    victim = legacy[1] if side == "before" else current[1]
    tamper("UPDATE {table} SET target = %s WHERE id = %s", ["edited", victim.pk])
    checked, broken, reason = verify_chain()
    assert broken.pk == victim.pk and "edited" in reason
    assert checked == (1 if side == "before" else 5)


@pytest.mark.parametrize("side, scheme", [("before", CURRENT_SCHEME), ("after", LEGACY_SCHEME), ("after", 7)])
def test_changing_an_events_scheme_is_found_at_its_row(anchored_log, side, scheme):
    legacy, anchor, current = anchored_log
    victim = legacy[1] if side == "before" else current[1]
    tamper("UPDATE {table} SET scheme = %s WHERE id = %s", [scheme, victim.pk])
    assert verify_chain()[1].pk == victim.pk


@pytest.mark.django_db
def test_the_scheme_changes_only_at_the_anchor_and_never_goes_back(anchored_log):
    legacy, anchor, current = anchored_log
    forged = legacy_event("written the old way after the anchor")
    checked, broken, reason = verify_chain()
    assert broken.pk == forged.pk and "legacy hashing scheme, after the re-anchor" in reason


@pytest.mark.django_db
def test_a_current_event_after_legacy_ones_without_an_anchor_is_found():
    legacy_event("old")
    unanchored = record("new")
    checked, broken, reason = verify_chain()
    assert broken.pk == unanchored.pk and "without a re-anchor event" in reason


@pytest.mark.django_db
def test_a_row_changed_beyond_its_nulled_link_stays_broken_and_is_listed(django_user_model):
    bob = django_user_model.objects.create_user(username="bob", password="x")
    legacy_event("a", bob)
    victim = legacy_event("b", bob)
    old_style_deletion(bob)
    tamper("UPDATE {table} SET action = %s WHERE id = %s", ["rewritten", victim.pk])
    anchor = run_reanchor()
    assert anchor.details["unrestorable_events"] == {"count": 1, "events": [victim.pk]}
    assert verify_chain()[1].pk == victim.pk


@pytest.mark.django_db
def test_an_ipv6_source_is_hashed_as_the_column_stores_it(rf, django_user_model):
    request = rf.get("/", REMOTE_ADDR="0:0:0:0:0:0:0:1")
    request.user = django_user_model.objects.create_user(username="v6", password="x")
    record("from v6", request=request)
    assert AuditEvent.objects.get(action="from v6").source_address == "::1"
    assert verify_chain() == (1, None, "")


def test_a_created_at_that_is_no_date_is_named():
    """Verification reads created_at raw: Django's text on SQLite, a datetime on MariaDB. Any other text is said to
    be no date, not an AttributeError on None (found by mypy: parse_datetime returns None for it)."""
    with pytest.raises(ValueError, match="'yesterday' is not a date and time"):
        _isoformat("yesterday")
    assert _isoformat("2026-12-05 14:25:41.123456") == "2026-12-05T14:25:41.123456+00:00"
    assert _isoformat("2026-12-05T14:25:41+01:00") == "2026-12-05T14:25:41+01:00"
