"""Alerts raised by work above this app when something happens to it, not judged from the polls (catalogue rules
with after="event"): a fleet rollout that halted. Opened firing at once (the rule's `for` is 0) in the caller's
transaction, told to the channels as an alert the evaluation fires is (notify.changed); resolved by the same
caller when it is dealt with. The cluster's rule settings apply: disabled, it is not raised; its severity is used."""

import time
from datetime import datetime, timezone

from django.db import transaction

from apps.fleet.models import Cluster

from . import notify, rulesettings
from .models import Alert, AlertState


def _dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def raise_event(rule, cluster_id, subject, label, summary, *, details=None, value=None):
    """The firing alert of `rule` about `subject` (one at a time: an open one is returned as it is), or None when
    the rule is disabled for the cluster."""
    setting = rulesettings.effective(Cluster.objects.get(pk=cluster_id), rule)
    if not setting.enabled:
        return None
    now = time.time()
    key = f"{rule}|{subject}"[:250]
    with transaction.atomic():
        alert, created = Alert.objects.get_or_create(
            active_key=key,
            defaults=dict(
                rule=rule,
                cluster_id=cluster_id,
                target=subject[:24],
                subject=subject,
                subject_label=label[:300],
                severity=setting.severity,
                state=AlertState.FIRING,
                summary=summary,
                value=value,
                details=details or {},
                since=_dt(now),
                fires_at=_dt(now),
                fired_at=_dt(now),
                last_seen_at=_dt(now),
            ),
        )
        if created:
            notify.changed(cluster_id, [(cluster_id, "fired", alert.severity, alert.pk)], now)
    return alert


def resolve_event(rule, subject):
    """The open alert of `rule` about `subject` resolved (and told), if there is one."""
    now = time.time()
    with transaction.atomic():
        alert = Alert.objects.select_for_update().filter(active_key=f"{rule}|{subject}"[:250]).first()
        if alert is None:
            return None
        Alert.objects.filter(pk=alert.pk).update(
            state=AlertState.RESOLVED, resolved_at=_dt(now), active_key=None, last_seen_at=_dt(now)
        )
        notify.changed(alert.cluster_id, [(alert.cluster_id, "resolved", alert.severity, alert.pk)], now)
    return alert
