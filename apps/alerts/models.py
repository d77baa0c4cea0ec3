"""Alerts, their rule settings, silences, notification channels and the delivery log.

An Alert is one rule on one subject, from the moment its condition was first seen (pending) through
firing to resolved. While pending or firing it holds `active_key` (rule and subject), unique, so there
is at most one open alert per rule and subject; a resolved alert keeps its row (history) with
active_key NULL (NULLs never collide, on SQLite and MariaDB alike).

Notifications are grouped per channel and cluster (NotificationGroup remembers what the receiver was
last told); each message is a Notification, delivered by a Celery task with retries, every try a
DeliveryAttempt.
"""

from django.db import models
from django.urls import reverse
from django.utils.crypto import salted_hmac

from apps.fleet.secrets import EncryptedTextField

from .catalogue import SEVERITIES, RuleSpec
from .destinations import public_part, shown

SEVERITY_CHOICES = [(s, s) for s in SEVERITIES]


class AlertState(models.TextChoices):
    PENDING = "pending", "pending"
    FIRING = "firing", "firing"
    RESOLVED = "resolved", "resolved"


class RuleSetting(models.Model):
    """An override of one rule's defaults: fleet-wide (cluster NULL) or for one cluster. Empty fields
    inherit (cluster <- fleet-wide <- the catalogue)."""

    cluster = models.ForeignKey("fleet.Cluster", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    rule = models.CharField(max_length=40)
    enabled = models.BooleanField(null=True, blank=True)
    severity = models.CharField(max_length=10, blank=True, choices=SEVERITY_CHOICES)
    for_s = models.FloatField(null=True, blank=True)
    params = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["rule", "cluster"])]


class Alert(models.Model):
    # Not stored: set by the selectors for the pages (the rule's spec, the silence covering an open alert).
    spec: RuleSpec | None
    silenced: "Silence | None"
    rule = models.CharField(max_length=40)
    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.CASCADE, related_name="alerts")
    target = models.CharField(
        max_length=24, help_text="what the evaluation reads: n<node>, s<server>, c<cluster>, o<op>"
    )
    subject = models.CharField(max_length=200)
    subject_label = models.CharField(max_length=300)
    node = models.ForeignKey("fleet.ProxySQLNode", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    server = models.ForeignKey("fleet.Server", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    hostgroup = models.PositiveIntegerField(null=True, blank=True)
    operation = models.ForeignKey(
        "operations.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    severity = models.CharField(max_length=10, choices=SEVERITY_CHOICES)
    state = models.CharField(max_length=10, choices=AlertState.choices, default=AlertState.PENDING)
    summary = models.TextField(help_text="what was seen, with its figures")
    value = models.FloatField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)
    since = models.DateTimeField(help_text="the condition was first seen")
    fires_at = models.DateTimeField(help_text="since + the rule's `for`, or the end of a hold")
    fired_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    last_seen_at = models.DateTimeField()
    # Planned work: held while an operation (or a backend's maintenance) is expected to cause it.
    held = models.BooleanField(default=False)
    hold_reason = models.CharField(max_length=300, blank=True)
    hold_operation = models.ForeignKey(
        "operations.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    was_held = models.BooleanField(default=False, help_text="held at some point (released or cleared while held)")
    notified = models.BooleanField(default=False, help_text="told to at least one channel as firing")
    acked_at = models.DateTimeField(null=True, blank=True)
    acked_by = models.CharField(max_length=150, blank=True)
    ack_note = models.TextField(blank=True)
    active_key = models.CharField(max_length=250, null=True, blank=True, unique=True)

    class Meta:
        ordering = ["-since", "-id"]
        indexes = [
            # The rules' reads (evaluate._open_alerts, _pending_times) find the open and the pending rows without
            # reading a target's or a cluster's resolved history (kept, and growing with every flap that fired).
            models.Index(fields=["target", "active_key"], name="alert_target_open"),
            models.Index(fields=["cluster", "state"], name="alert_cluster_state"),
            models.Index(fields=["state", "fires_at"], name="alert_state_fires"),
            models.Index(fields=["cluster", "since"], name="alert_cluster_since"),
            models.Index(fields=["since"], name="alert_since"),
            models.Index(fields=["state", "since"], name="alert_state_since"),
        ]  # the API's history pages

    def __str__(self):
        return f"#{self.pk} {self.rule} {self.subject_label}"

    def get_absolute_url(self):
        return reverse("alerts:detail", args=[self.pk])

    @property
    def active(self):
        return self.state != AlertState.RESOLVED

    @property
    def duration_s(self):
        end = self.resolved_at
        start = self.fired_at or self.since
        return (end - start).total_seconds() if end and start else None


class Silence(models.Model):
    """Notifications of matching alerts are not sent until ends_at. Empty matchers match anything; a silence
    matches an alert when every set matcher equals the alert's."""

    cluster = models.ForeignKey("fleet.Cluster", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    rule = models.CharField(max_length=40, blank=True)
    subject = models.CharField(max_length=200, blank=True)
    subject_label = models.CharField(max_length=300, blank=True)
    reason = models.TextField()
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    created_by = models.CharField(max_length=150)
    created_at = models.DateTimeField(auto_now_add=True)
    from_alert = models.ForeignKey(Alert, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    expired_by = models.CharField(max_length=150, blank=True)
    expired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-ends_at", "-id"]
        indexes = [models.Index(fields=["ends_at"], name="silence_ends")]

    def __str__(self):
        return f"silence #{self.pk}"

    def matches(self, alert):
        return (
            (self.cluster_id is None or self.cluster_id == alert.cluster_id)
            and (not self.rule or self.rule == alert.rule)
            and (not self.subject or self.subject == alert.subject)
        )

    def describe(self):
        parts = [
            f"cluster {self.cluster}" if self.cluster_id else "every cluster",
            f"rule {self.rule}" if self.rule else "every rule",
            self.subject_label or self.subject or "every subject",
        ]
        return " · ".join(parts)


class ChannelKind(models.TextChoices):
    EMAIL = "email", "e-mail"
    WEBHOOK = "webhook", "generic JSON webhook"
    SLACK = "slack", "Slack-compatible webhook"
    PAGERDUTY = "pagerduty", "PagerDuty Events API v2"
    ALERTMANAGER = "alertmanager", "Prometheus Alertmanager (v2 API)"


class Channel(models.Model):
    last: "Notification | None"  # not stored: the latest notification, set by selectors.channels() for its page
    name = models.CharField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=ChannelKind.choices)
    # Encrypted like the credentials (a Slack-style URL is one); pages show its scheme and host only.
    url = EncryptedTextField(
        blank=True, help_text="webhook URL; PagerDuty: the Events API v2 enqueue URL; Alertmanager: its base URL"
    )
    recipients = models.TextField(blank=True, help_text="e-mail: comma-separated addresses")
    secret = EncryptedTextField(
        blank=True, help_text="PagerDuty: the routing key; webhook/Alertmanager: a bearer token (optional)"
    )
    min_severity = models.CharField(max_length=10, choices=SEVERITY_CHOICES, default="warning")
    clusters = models.ManyToManyField(
        "fleet.Cluster", blank=True, related_name="+", help_text="only these clusters (none chosen: every cluster)"
    )
    send_resolved = models.BooleanField(default=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return f"{self.name} ({self.get_kind_display()})"

    @property
    def destination(self):
        """ "host:port" this channel posts to ("" for e-mail)."""
        return shown(self.url)

    @property
    def url_shown(self):
        """ "scheme://host[:port]": all of the URL a page shows."""
        return public_part(self.url)

    @property
    def url_fingerprint(self):
        """A short keyed hash of the URL: says in the audit log whether it changed, never what it is."""
        return salted_hmac("alerts.channel.url", self.url).hexdigest()[:12] if self.url else ""

    def get_absolute_url(self):
        return reverse("alerts:channel", args=[self.pk])


class NotificationGroup(models.Model):
    """What one channel was last told about one cluster: the alerts it knows as firing or resolved, when,
    and when the group must be looked at next (group_wait, group_interval, repeat)."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="groups")
    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.CASCADE, related_name="+")
    told = models.JSONField(default=dict, blank=True, help_text="{alert id: 'firing' | 'resolved'} as last sent")
    last_sent_at = models.DateTimeField(null=True, blank=True)
    next_flush_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["channel", "cluster"], name="unique_group_per_channel")]


class DeliveryState(models.TextChoices):
    PENDING = "pending", "pending"
    RETRYING = "retrying", "retrying"
    SENT = "sent", "sent"
    FAILED = "failed", "failed (gave up)"


class Notification(models.Model):
    """One message to one channel: its payload exactly as sent, and its delivery."""

    channel = models.ForeignKey(Channel, on_delete=models.CASCADE, related_name="notifications")
    cluster = models.ForeignKey("fleet.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    reason = models.CharField(max_length=20, help_text="alerts, repeat, test")
    status = models.CharField(max_length=10, help_text="firing or resolved (the group's)")
    alert_ids = models.JSONField(default=list)
    payload = models.JSONField()
    state = models.CharField(max_length=10, choices=DeliveryState.choices, default=DeliveryState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    requested_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["created_at"], name="notification_created")]


class DeliveryAttempt(models.Model):
    notification = models.ForeignKey(Notification, on_delete=models.CASCADE, related_name="tries")
    at = models.DateTimeField()
    ok = models.BooleanField()
    http_status = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.FloatField()

    class Meta:
        ordering = ["notification", "at"]
