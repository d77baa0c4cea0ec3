"""One operation at a time per cluster: a row in ClusterLock, taken by INSERT (or by a conditional
UPDATE when the previous holder's lock expired), released by DELETE of our own row only.

Beside it, one operation at a time per ProxySQL instance (EndpointLock, one row per admin host:port of the
cluster's nodes), taken in the same transaction: a ProxySQL that fronts several clusters is changed for one
of them at a time (its LOAD MYSQL SERVERS TO RUNTIME loads every cluster's rows)."""

from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.fleet.models import ProxySQLNode, endpoint_key

from .models import ClusterLock, EndpointLock


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


def endpoints(cluster_id):
    """The admin endpoints (host:port) of the cluster's ProxySQL nodes."""
    return sorted(
        {
            endpoint_key(h, p)
            for h, p in ProxySQLNode.objects.filter(cluster_id=cluster_id).values_list("admin_host", "admin_port")
        }
    )


def current_holder(cluster):
    """Who holds this cluster, or one of its ProxySQL nodes for another cluster sharing it, or None."""
    now = timezone.now()
    locks = ClusterLock.objects.filter(cluster=cluster, expires_at__gt=now)
    shared = EndpointLock.objects.filter(endpoint__in=endpoints(cluster.pk), expires_at__gt=now).order_by("endpoint")
    if _rechecking.get() is not None:
        locks = locks.exclude(operation_id=_rechecking.get())
        shared = shared.exclude(operation_id=_rechecking.get())
    lock = locks.first()
    if lock:
        return lock.holder
    lock = shared.first()
    return f"ProxySQL {lock.endpoint} (shared with another cluster) is busy: {lock.holder}" if lock else None


def holder_of(operation):
    """Who holds the lock, as the next operator reads it: the operation and its actor, shortened to fit
    the column (a read-pool rule's title carries the backend's error and can be 300 characters)."""
    by = f" (by {operation.actor})"
    name = str(operation)
    room = ClusterLock._meta.get_field("holder").max_length - len(by)
    if len(name) > room:
        name = name[: room - 1] + "…"
    return name + by


def acquire(operation, ttl_s):
    """The cluster's lock and every one of its ProxySQL endpoints', all or none."""
    now = timezone.now()
    holder = holder_of(operation)
    values = {
        "operation": operation,
        "holder": holder,
        "acquired_at": now,
        "expires_at": now + timedelta(seconds=ttl_s),
    }
    with transaction.atomic():
        _take(
            ClusterLock,
            {"cluster_id": operation.cluster_id},
            values,
            now,
            lambda: current_holder(operation.cluster) or "an operation that just finished",
        )
        for endpoint in endpoints(operation.cluster_id):
            _take(EndpointLock, {"endpoint": endpoint}, values, now, lambda e=endpoint: _endpoint_holder(e))


def _take(model, key, values, now, holder):
    """INSERT the lock row, or take it over if its holder's lock expired; LockHeld otherwise (the caller's
    transaction then gives back what it took)."""
    try:
        with transaction.atomic():
            model.objects.create(**key, **values)
        return
    except IntegrityError:
        pass
    if not model.objects.filter(**key, expires_at__lte=now).update(**values):
        raise LockHeld(holder())


def _endpoint_holder(endpoint):
    lock = EndpointLock.objects.filter(endpoint=endpoint).first()
    return (
        f"ProxySQL {endpoint} (shared with another cluster) is busy: {lock.holder}"
        if lock
        else "an operation that just finished"
    )


def extend(operation, ttl_s):
    expires = timezone.now() + timedelta(seconds=ttl_s)
    ClusterLock.objects.filter(cluster_id=operation.cluster_id, operation=operation).update(expires_at=expires)
    EndpointLock.objects.filter(operation=operation).update(expires_at=expires)


def release(operation):
    ClusterLock.objects.filter(cluster_id=operation.cluster_id, operation=operation).delete()
    EndpointLock.objects.filter(operation=operation).delete()
