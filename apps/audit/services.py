"""The one way to write the audit log: record(). Every mutation, refusal and automatic decision calls it."""
import json
import time
from contextlib import contextmanager

from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from .models import ActorKind, AuditChainHead, AuditEvent

GENESIS = "0" * 64
_SECRET_KEYS = ("password", "passwd", "secret", "token")


def _scrub(value):
    """Drop anything that looks like a credential from details before it is stored."""
    if isinstance(value, dict):
        return {k: ("(hidden)" if any(s in str(k).lower() for s in _SECRET_KEYS) else _scrub(v))
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    return value


def _source_address(request):
    if request is None:
        return None
    return request.META.get("REMOTE_ADDR") or None


def record(action, *, outcome="success", request=None, user=None, rule=None, cluster=None, target="",
           details=None, duration_ms=None):
    """Append one audit event. Actor: the request's user, `user`, a named automatic `rule`, or system.

    Runs in its own short transaction (or joins the caller's, so a mutation and its audit row commit
    together). Returns the event.
    """
    if rule:
        actor, kind, actor_user = rule, ActorKind.RULE, None
    else:
        actor_user = user or (request.user if request is not None and request.user.is_authenticated else None)
        actor = actor_user.get_username() if actor_user else ("anonymous" if request is not None else "system")
        kind = ActorKind.USER if request is not None or actor_user else ActorKind.SYSTEM
    # Round-trip through JSON now so the hash is computed over exactly what the database will return.
    details = json.loads(json.dumps(_scrub(details or {}), cls=DjangoJSONEncoder))
    with transaction.atomic():
        head, _ = AuditChainHead.objects.select_for_update().get_or_create(id=1, defaults={"last_hash": GENESIS})
        event = AuditEvent(
            created_at=timezone.now(), actor=actor[:150], actor_kind=kind, actor_user=actor_user,
            source_address=_source_address(request),
            cluster_id=getattr(cluster, "pk", None), cluster_name=getattr(cluster, "name", "")[:200],
            target=str(target)[:300], action=action[:100], outcome=outcome, details=details,
            duration_ms=duration_ms, prev_hash=head.last_hash,
        )
        event.hash = event.compute_hash()
        event.save()
        AuditChainHead.objects.filter(id=1).update(last_hash=event.hash)
    return event


@contextmanager
def timed():
    """`with timed() as t: ...; t.ms` -- the duration to pass to record()."""

    class Timer:
        ms = None

    timer = Timer()
    start = time.monotonic()
    try:
        yield timer
    finally:
        timer.ms = round((time.monotonic() - start) * 1000, 3)


def verify_chain():
    """Walk the log oldest first. Returns (checked_count, first_broken_event_or_None, reason)."""
    prev = GENESIS
    count = 0
    for event in AuditEvent.objects.order_by("id").iterator(chunk_size=2000):
        if event.prev_hash != prev:
            return count, event, "its prev_hash does not match the event before it (an event was removed or reordered)"
        if event.compute_hash() != event.hash:
            return count, event, "its content does not match its hash (the event was edited)"
        prev = event.hash
        count += 1
    return count, None, ""
