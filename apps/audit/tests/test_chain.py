"""The audit log is append-only and tamper-evident."""
import pytest
from django.db import connection

from apps.audit.models import AuditEvent
from apps.audit.services import GENESIS, record, verify_chain


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
