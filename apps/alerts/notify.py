"""Notifications: routing, grouping, repeats, and the delivery log.

Routing: a channel takes an alert when it is enabled, the alert's severity is at least the channel's
minimum, and the channel lists the alert's cluster (or lists none: every cluster). Held alerts are never
sent; silenced ones are left out while the silence lasts.

Grouping, per channel and cluster (NotificationGroup), after Alertmanager's habits:
- the first alerts of a quiet group are sent ALERTS_GROUP_WAIT_S after the first of them fired, so a
  burst (a writer killed: the writer hostgroup empty on every node) is one message;
- later changes to a group already told are batched every ALERTS_GROUP_INTERVAL_S, except what cannot
  wait: a critical alert firing or resolving, and the group's last alert resolving, go out after
  ALERTS_GROUP_WAIT_S;
- while alerts fire unacknowledged, the group is re-sent every ALERTS_REPEAT_INTERVAL_S (an Alertmanager
  channel every ALERTS_ALERTMANAGER_RESEND_S, with endsAt ahead, as Prometheus does);
- each message lists the group's firing alerts and those resolved since the last message (a channel may
  turn resolved messages off).

A message is a Notification row with its payload as sent; its first try is made at once by the task that
made it, then workers/alerts.deliver retries it (exponential backoff), each try a DeliveryAttempt row. flush() runs from a Celery task scheduled for the
group's due time, and from beat every few seconds for anything whose task was lost.
"""

import logging
import time
from datetime import datetime, timedelta, timezone

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone as dj_timezone

from apps.audit.services import record
from controlplane import tasks

from .catalogue import CRITICAL, SEVERITY_RANK
from .channels import build, send
from .models import (
    Alert,
    AlertState,
    Channel,
    ChannelKind,
    DeliveryAttempt,
    DeliveryState,
    Notification,
    NotificationGroup,
    Silence,
)

log = logging.getLogger(__name__)
BEAT_S = 5.0  # beat runs flush_due this often (controlplane/celery.py)


def _dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def routed(channel, alert):
    return (
        channel.enabled
        and SEVERITY_RANK.get(alert.severity, 0) >= SEVERITY_RANK.get(channel.min_severity, 0)
        and (not channel.cluster_ids or alert.cluster_id in channel.cluster_ids)
    )


def channels_now():
    channels = list(Channel.objects.filter(enabled=True).prefetch_related("clusters"))
    for ch in channels:
        ch.cluster_ids = {c.pk for c in ch.clusters.all()}
    return channels


def changed(cluster_id, changes, now, channels=None):
    """Alerts of one cluster fired or resolved: make each routed channel's group due when it should be.
    changes: [(cluster_id, "fired" | "resolved", severity, alert id)]; channels: channels_now() when the caller
    has them already."""
    channels = [
        ch
        for ch in (channels if channels is not None else channels_now())
        if not ch.cluster_ids or cluster_id in ch.cluster_ids
    ]
    if not channels:
        return
    still_firing = Alert.objects.filter(cluster_id=cluster_id, state=AlertState.FIRING).exists()
    for ch in channels:
        mine = [c for c in changes if SEVERITY_RANK.get(c[2], 0) >= SEVERITY_RANK.get(ch.min_severity, 0)]
        if not mine:
            continue
        urgent = any(sev == CRITICAL for _, _, sev, _ in mine) or not still_firing
        schedule(ch, cluster_id, now, urgent)


def schedule(channel, cluster_id, now, urgent):
    group, _ = NotificationGroup.objects.get_or_create(channel=channel, cluster_id=cluster_id)
    wait = settings.ALERTS_GROUP_WAIT_S
    if group.last_sent_at is None or urgent or channel.kind == ChannelKind.ALERTMANAGER:
        due = now + wait
    else:
        due = max(group.last_sent_at.timestamp() + settings.ALERTS_GROUP_INTERVAL_S, now + wait)
    if group.next_flush_at is None or group.next_flush_at.timestamp() > due:
        NotificationGroup.objects.filter(pk=group.pk).update(next_flush_at=_dt(due))
        pk = group.pk
        transaction.on_commit(lambda: _enqueue_flush(pk, max(0.0, due - time.time())))


def _enqueue_flush(group_pk, countdown):
    try:
        tasks.enqueue("alerts.flush_group", (group_pk,), countdown=countdown)
    except Exception as exc:  # no broker: beat's flush_due picks the group up
        log.warning("flush of notification group %s not enqueued: %s", group_pk, exc)


def active_silences(now):
    return list(Silence.objects.filter(starts_at__lte=_dt(now), ends_at__gt=_dt(now), expired_at__isnull=True))


def silenced_by(alert, silences):
    return next((s for s in silences if s.matches(alert)), None)


def flush(group_pk, now=None):
    """Make the message a group's channel must hear now, if anything (the caller delivers it: deliver_first).
    Returns the Notification or None."""
    now = now or time.time()
    with transaction.atomic():
        group = (
            NotificationGroup.objects.select_for_update()
            .select_related("channel", "cluster")
            .filter(pk=group_pk)
            .first()
        )
        if group is None or group.next_flush_at is None or group.next_flush_at.timestamp() > now + 0.05:
            return None
        channel = group.channel
        channel.cluster_ids = set(channel.clusters.values_list("pk", flat=True))
        told = {int(k): v for k, v in (group.told or {}).items()}
        silences = active_silences(now)
        candidates = Alert.objects.filter(
            Q(cluster_id=group.cluster_id, state=AlertState.FIRING) | Q(pk__in=list(told))
        )
        firing, resolved, still_silenced = [], [], []
        ordered = sorted(
            candidates.select_related("cluster"), key=lambda a: (-SEVERITY_RANK.get(a.severity, 0), a.since, a.pk)
        )
        for a in ordered:
            if not routed(channel, a) and a.pk not in told:
                continue
            if a.state == AlertState.FIRING:
                if silenced_by(a, silences):
                    if a.pk in told:
                        still_silenced.append(a)
                    continue
                if routed(channel, a):
                    firing.append(a)
            elif a.state == AlertState.RESOLVED and told.get(a.pk) == "firing":
                resolved.append(a)
        new = [a for a in firing if told.get(a.pk) != "firing"]
        last = group.last_sent_at.timestamp() if group.last_sent_at else None
        resend = (
            settings.ALERTS_ALERTMANAGER_RESEND_S
            if channel.kind == ChannelKind.ALERTMANAGER
            else settings.ALERTS_REPEAT_INTERVAL_S
        )
        repeat = (
            bool(firing)
            and last is not None
            and now - last >= resend - 0.5
            and (channel.kind == ChannelKind.ALERTMANAGER or any(a.acked_at is None for a in firing))
        )
        tell_resolved = resolved if channel.send_resolved else []
        notification = None
        if new or tell_resolved or (repeat and firing):
            alerts = firing + tell_resolved
            status = "firing" if firing else "resolved"
            payload = build(channel, group.cluster.name, status, alerts, now, f"{channel.pk}:{group.cluster_id}")
            notification = Notification.objects.create(
                channel=channel,
                cluster_id=group.cluster_id,
                reason="alerts" if (new or tell_resolved) else "repeat",
                status=status,
                alert_ids=[a.pk for a in alerts],
                payload=payload,
            )
            Alert.objects.filter(pk__in=[a.pk for a in new]).update(notified=True)
            group.last_sent_at = _dt(now)
        group.told = {str(a.pk): "firing" for a in firing + still_silenced}
        if firing:
            since = group.last_sent_at.timestamp() if group.last_sent_at else now
            group.next_flush_at = _dt(since + resend)
        else:
            group.next_flush_at = None
        group.save(update_fields=["told", "last_sent_at", "next_flush_at"])
    return notification


def silence_over(s, now):
    """A silence ended (early or on time): alerts it kept quiet that still fire are sent now."""
    clusters = (
        [s.cluster_id]
        if s.cluster_id
        else set(Alert.objects.filter(state=AlertState.FIRING).values_list("cluster_id", flat=True))
    )
    for ch in channels_now():
        for cluster_id in clusters:
            if not ch.cluster_ids or cluster_id in ch.cluster_ids:
                schedule(ch, cluster_id, now, urgent=True)


def flush_due(now=None):
    """Every group whose due time has passed (beat, every few seconds: repeats, and lost flush tasks), after
    scheduling the groups of silences that ran out since the last look."""
    now = now or time.time()
    for s in Silence.objects.filter(ends_at__lte=_dt(now), ends_at__gt=_dt(now - 3 * BEAT_S), expired_at__isnull=True):
        silence_over(s, now)
    sent = 0
    for pk in NotificationGroup.objects.filter(next_flush_at__lte=_dt(now)).values_list("pk", flat=True):
        n = flush(pk, now)
        if n:
            deliver_first(n.pk)
            sent += 1
    return sent


def deliver_first(notification_pk):
    """The first try at once, in the task that made the message (no second trip through the queue); the
    retries, if any, in the delivery task."""
    delivered, retry = attempt(notification_pk)
    if delivered:
        return True
    if not retry:
        give_up(notification_pk, "gave up after 1 try: the receiver refused the payload")
        return False
    try:
        tasks.enqueue("alerts.deliver", (notification_pk,), countdown=retry_delay(0))
    except Exception as exc:  # no broker now: redeliver_stuck() from beat sends it later
        log.warning("retry of notification %s not enqueued: %s", notification_pk, exc)
    return False


def enqueue_delivery(notification_pk):
    try:
        tasks.enqueue("alerts.deliver", (notification_pk,))
    except Exception as exc:  # no broker now: redeliver_stuck() from beat sends it later
        log.warning("delivery of notification %s not enqueued: %s", notification_pk, exc)


# -- delivery ------------------------------------------------------------------------------------------
def attempt(notification_pk):
    """One try at delivering a notification, logged. Returns (delivered, retry_may_help)."""
    n = Notification.objects.select_related("channel").filter(pk=notification_pk).first()
    if n is None or n.state in (DeliveryState.SENT, DeliveryState.FAILED):
        return True, False
    result = send(n.channel, n.payload)
    at = dj_timezone.now()
    DeliveryAttempt.objects.create(
        notification=n, at=at, ok=result.ok, http_status=result.http_status, error=result.error, duration_ms=result.ms
    )
    if result.ok:
        Notification.objects.filter(pk=n.pk).update(
            state=DeliveryState.SENT, sent_at=at, attempts=n.attempts + 1, last_error=""
        )
        return True, False
    Notification.objects.filter(pk=n.pk).update(
        state=DeliveryState.RETRYING, attempts=n.attempts + 1, last_error=result.error
    )
    return False, result.retry


def give_up(notification_pk, error):
    n = Notification.objects.select_related("channel").filter(pk=notification_pk).first()
    if n is None or n.state == DeliveryState.SENT:
        return
    error = f"{error}; last answer: {n.last_error}" if n.last_error else error
    with transaction.atomic():  # the failed state and its audit row together: no reader sees one without the other
        Notification.objects.filter(pk=n.pk).update(state=DeliveryState.FAILED, last_error=error[:2000])
        record(
            "alert notification not delivered",
            rule="alert notifications",
            cluster=n.cluster,
            target=str(n.channel),
            outcome="failure",
            details={"notification": n.pk, "attempts": n.attempts, "error": error[:500]},
        )


def retry_delay(retries):
    """Seconds before try number retries + 2: ALERTS_RETRY_BASE_S doubled each time, at most 5 minutes."""
    return min(300.0, settings.ALERTS_RETRY_BASE_S * (2**retries))


def redeliver_stuck(now=None):
    """Notifications still pending long after they were made (their task was never enqueued or was lost)."""
    now = now or time.time()
    stale = _dt(now) - timedelta(seconds=max(60.0, settings.ALERTS_RETRY_BASE_S * 2**settings.ALERTS_DELIVERY_RETRIES))
    pks = list(
        Notification.objects.filter(
            state=DeliveryState.PENDING, attempts=0, created_at__lt=_dt(now - 30), created_at__gte=stale
        ).values_list("pk", flat=True)[:100]
    )
    for pk in pks:
        enqueue_delivery(pk)
    return len(pks)
