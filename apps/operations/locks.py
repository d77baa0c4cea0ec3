"""One operation at a time per cluster: a row in ClusterLock, taken by INSERT (or by a conditional
UPDATE when the previous holder's lock expired), released by DELETE of our own row only."""
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from .models import ClusterLock


class LockHeld(Exception):
    def __init__(self, holder):
        self.holder = holder
        super().__init__(f"another operation holds this cluster: {holder}")


# While an operation re-plans itself at the start of its execution it holds the lock: its own lock is
# not "another operation" for its guards.
_rechecking = ContextVar("rechecking_operation", default=None)


@contextmanager
def rechecking(operation):
    token = _rechecking.set(operation.pk)
    try:
        yield
    finally:
        _rechecking.reset(token)


def current_holder(cluster):
    locks = ClusterLock.objects.filter(cluster=cluster, expires_at__gt=timezone.now())
    if _rechecking.get() is not None:
        locks = locks.exclude(operation_id=_rechecking.get())
    lock = locks.first()
    return lock.holder if lock else None


def holder_of(operation):
    """Who holds the lock, as the next operator reads it: the operation and its actor, shortened to fit
    the column (a read-pool rule's title carries the backend's error and can be 300 characters)."""
    by = f" (by {operation.actor})"
    name = str(operation)
    room = ClusterLock._meta.get_field("holder").max_length - len(by)
    if len(name) > room:
        name = name[:room - 1] + "…"
    return name + by


def acquire(operation, ttl_s):
    now = timezone.now()
    holder = holder_of(operation)
    try:
        with transaction.atomic():
            ClusterLock.objects.create(cluster_id=operation.cluster_id, operation=operation, holder=holder,
                                       acquired_at=now, expires_at=now + timedelta(seconds=ttl_s))
        return
    except IntegrityError:
        pass
    taken = ClusterLock.objects.filter(cluster_id=operation.cluster_id, expires_at__lte=now).update(
        operation=operation, holder=holder, acquired_at=now, expires_at=now + timedelta(seconds=ttl_s))
    if not taken:
        raise LockHeld(current_holder(operation.cluster) or "an operation that just finished")


def extend(operation, ttl_s):
    ClusterLock.objects.filter(cluster_id=operation.cluster_id, operation=operation).update(
        expires_at=timezone.now() + timedelta(seconds=ttl_s))


def release(operation):
    ClusterLock.objects.filter(cluster_id=operation.cluster_id, operation=operation).delete()
