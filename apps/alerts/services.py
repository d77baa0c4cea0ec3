"""What people do to alerts, each audited in the same transaction: acknowledge, silence (and end a silence
early), change a rule's settings for the fleet or one cluster, manage notification channels, send a test.
Views and commands call these; nothing else writes these rows (the evaluation writes alerts)."""

import time
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.fleet.models import Cluster

from . import notify, rulesettings
from .catalogue import BY_KEY
from .models import Alert, Channel, Notification, RuleSetting, Silence
from .channels import build
from .forms import ChannelForm


class Refused(Exception):
    pass


def acknowledge(alert: Alert, note: str, *, actor: Actor) -> Alert:
    who = actor.who
    with transaction.atomic():
        Alert.objects.filter(pk=alert.pk).update(acked_at=timezone.now(), acked_by=who, ack_note=note)
        record(
            "acknowledge alert",
            actor=actor,
            cluster=alert.cluster,
            target=alert.subject_label,
            details={"alert": alert.pk, "rule": alert.rule, "state": alert.state, "note": note},
        )
    alert.refresh_from_db()
    return alert


def silence(
    *,
    cluster: Cluster | None,
    rule: str | None,
    subject: str | None,
    subject_label: str | None,
    minutes: float,
    reason: str,
    actor: Actor,
    from_alert: Alert | None = None,
) -> Silence:
    """Silence notifications of matching alerts for `minutes` (from now)."""
    if not reason.strip():
        raise Refused("A silence needs a reason.")
    if rule and rule not in BY_KEY:
        raise Refused(f"No rule named {rule!r}.")
    who = actor.who
    now = timezone.now()
    with transaction.atomic():
        s = Silence.objects.create(
            cluster=cluster,
            rule=rule or "",
            subject=subject or "",
            subject_label=(subject_label or "")[:300],
            reason=reason,
            starts_at=now,
            ends_at=now + timedelta(minutes=minutes),
            created_by=who,
            from_alert=from_alert,
        )
        record(
            "silence alerts",
            actor=actor,
            cluster=cluster,
            target=s.describe()[:300],
            details={
                "silence": s.pk,
                "rule": s.rule,
                "subject": s.subject,
                "until": s.ends_at.isoformat(),
                "minutes": minutes,
                "reason": reason,
                "from_alert": from_alert.pk if from_alert else None,
            },
        )
    return s


def end_silence(s: Silence, *, actor: Actor) -> Silence:
    """End a silence now; its alerts still firing are sent at once."""
    if s.expired_at or s.ends_at <= timezone.now():
        raise Refused("This silence is already over.")
    who = actor.who
    with transaction.atomic():
        Silence.objects.filter(pk=s.pk).update(expired_at=timezone.now(), expired_by=who)
        record(
            "end silence",
            actor=actor,
            cluster=s.cluster,
            target=s.describe()[:300],
            details={"silence": s.pk, "was_until": s.ends_at.isoformat()},
        )
        notify.silence_over(s, time.time())
    s.refresh_from_db()
    return s


def save_rule_setting(
    cluster: Cluster | None,
    rule: str,
    *,
    enabled: bool | None,
    severity: str | None,
    for_s: float | None,
    params: dict[str, Any] | None,
    actor: Actor,
) -> RuleSetting:
    """Override a rule's defaults for the fleet (cluster None) or one cluster. Empty values inherit."""
    spec = BY_KEY.get(rule)
    if spec is None:
        raise Refused(f"No rule named {rule!r}.")
    params = {k: v for k, v in (params or {}).items() if k in spec.params and v is not None}
    with transaction.atomic():
        row = RuleSetting.objects.select_for_update().filter(cluster=cluster, rule=rule).first()
        before = _setting_dict(row)
        if row is None:
            row = RuleSetting(cluster=cluster, rule=rule)
        row.enabled, row.severity, row.for_s, row.params = enabled, severity or "", for_s, params
        if row.enabled is None and not row.severity and row.for_s is None and not row.params:
            if row.pk:
                row.delete()
            after = None
        else:
            row.save()
            after = _setting_dict(row)
        record(
            "change alert rule",
            actor=actor,
            cluster=cluster,
            target=f"{rule} ({'cluster ' + cluster.name if cluster else 'fleet-wide'})",
            details={"rule": rule, "scope": cluster.name if cluster else "fleet", "before": before, "after": after},
        )
    rulesettings.forget()
    return row


def _setting_dict(row: RuleSetting | None) -> dict[str, Any] | None:
    if row is None or not row.pk:
        return None
    return {"enabled": row.enabled, "severity": row.severity, "for_s": row.for_s, "params": row.params}


_CHANNEL_FIELDS = ("name", "kind", "recipients", "min_severity", "send_resolved", "enabled")


def _channel_dict(ch: Channel) -> dict[str, Any]:
    """A channel as the audit log keeps it: its URL as scheme and host and a fingerprint (the URL is a secret)."""
    out = {f: getattr(ch, f) for f in _CHANNEL_FIELDS}
    out["url"] = f"{ch.url_shown} (fingerprint {ch.url_fingerprint})" if ch.url else ""
    out["secret"] = "(set)" if ch.secret else ""
    out["clusters"] = sorted(c.name for c in ch.clusters.all()) if ch.pk else []
    return out


def save_channel(form: ChannelForm, *, actor: Actor) -> Channel | None:
    """Create or change a channel from a validated ChannelForm (an empty secret keeps the stored one)."""
    ch = form.instance
    before = _channel_dict(Channel.objects.get(pk=ch.pk)) if ch.pk else None
    with transaction.atomic():
        secret = form.cleaned_data.get("new_secret")
        if secret:
            ch.secret = secret
        try:
            with transaction.atomic():
                ch = form.save()
        except IntegrityError:  # another admin saved a channel of that name since this form was checked
            form.add_error("name", "A channel with this name already exists (it was just added by someone else).")
            return None
        after = _channel_dict(ch)
        changed = sorted(k for k in after if before is None or before.get(k) != after[k])
        record(
            "change alert channel" if before else "add alert channel",
            actor=actor,
            target=ch.name,
            details={"channel": ch.pk, "changed": changed, "before": before, "after": after},
        )
    return ch


def delete_channel(ch: Channel, *, actor: Actor) -> None:
    before = _channel_dict(ch)
    with transaction.atomic():
        record("delete alert channel", actor=actor, target=ch.name, details={"before": before})
        ch.delete()


class _Sample:
    """A made-up alert for "send a test": shaped like an Alert for the payload builders."""

    rule, severity, state = "test", "info", "firing"
    subject, subject_label = "test", "a test notification"
    details: dict[str, Any] = {}
    resolved_at = None

    def __init__(self, who: str) -> None:
        self.pk = 0
        self.since = self.fired_at = timezone.now()
        self.summary = f"A test notification sent by {who} from the console: this channel works."
        self.cluster = type("C", (), {"name": "(test)"})()

    def get_absolute_url(self) -> str:
        return "/alerts/"


def send_test(ch: Channel, *, actor: Actor) -> Notification:
    """Queue a test message to a channel (delivered like any other, with retries and a log)."""
    who = actor.who
    payload = build(ch, "(test)", "firing", [_Sample(who)], time.time(), f"{ch.pk}:test")
    with transaction.atomic():
        n = Notification.objects.create(
            channel=ch, reason="test", status="firing", alert_ids=[], payload=payload, requested_by=who
        )
        record("send test notification", actor=actor, target=ch.name, details={"channel": ch.pk, "notification": n.pk})
        transaction.on_commit(lambda: notify.enqueue_delivery(n.pk))
    return n
