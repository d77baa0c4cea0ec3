"""Which of ProxySQL's own hostgroup managers places a cluster's servers (Cluster.native_manager), set by an admin
when adoption's reading was wrong or the nodes changed since (a manager row added or dropped by hand): drift reads
Monitor's placement by it (fleet/native.py) and the product's switchover refuses a natively managed cluster.
Audited with before, after and the reason."""

from django.db import transaction
from django.utils import timezone

from apps.audit.services import record

from .choices import NativeManager
from .models import Cluster

ACTION = "cluster native manager changed"


class BadNativeManager(ValueError):
    pass


def refused(cluster, error, *, actor):
    """A value that could not be used: audited as invalid (nothing changed)."""
    record(ACTION, actor=actor, cluster=cluster, target=cluster.name, outcome="invalid", details={"error": error})


def checked(value, reason):
    """The value as stored, or BadNativeManager saying why."""
    if value not in NativeManager.values:
        raise BadNativeManager(
            f"native_manager {value!r} is none of {', '.join(repr(v) for v in NativeManager.values)}"
        )
    if not (reason or "").strip():
        raise BadNativeManager("a reason is required: drift and the switchover read the cluster by this setting")
    return value


def set_native_manager(cluster, value, reason, *, actor):
    """Store `value` (checked()) when it differs; audited in the same transaction. Returns whether it changed."""
    before = cluster.native_manager
    if value == before:
        return False
    with transaction.atomic():
        Cluster.objects.filter(pk=cluster.pk).update(native_manager=value, updated_at=timezone.now())
        record(
            ACTION,
            actor=actor,
            cluster=cluster,
            target=cluster.name,
            details={"before": before, "after": value, "reason": reason.strip()},
        )
    cluster.native_manager = value
    return True
