"""Health reports: what is built when (ReportSchedule), and the archive of what was built (Report, with
its charts as PNG bytes so that an archived report stays exactly as it was delivered)."""

import re

from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import MaxValueValidator, validate_email
from django.db import models
from django.urls import reverse

from .choices import Period, Scope, Weekday


def split_recipients(text):
    """'a@x, b@y\\nc@z' -> ['a@x', 'b@y', 'c@z'] (order kept, duplicates dropped)."""
    out = []
    for item in re.split(r"[\s,;]+", text or ""):
        if item and item not in out:
            out.append(item)
    return out


def validate_recipients(text):
    bad = []
    for address in split_recipients(text):
        try:
            validate_email(address)
        except ValidationError:
            bad.append(address)
    if bad:
        raise ValidationError("Not e-mail addresses: %(bad)s", params={"bad": ", ".join(bad[:5])})
    if len(split_recipients(text)) > 50:
        raise ValidationError("At most 50 recipients.")


class ReportSchedule(models.Model):
    """Build a daily or weekly report of one cluster (or of the whole fleet) at a local hour, and mail it.

    A daily report covers the day before the day it is sent; a weekly one the seven days before it (sent
    on a Monday: Monday to Sunday of the week before). last_period_end is the claim: a beat tick takes a
    due schedule with a conditional UPDATE of it, so two ticks (or two beats) never build the same report.
    """

    cluster = models.ForeignKey(
        "fleet.Cluster",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="empty: the whole fleet",
    )
    period = models.CharField(max_length=10, choices=Period.choices, default=Period.DAILY)
    hour = models.PositiveSmallIntegerField(
        default=6,
        validators=[MaxValueValidator(23)],
        help_text="local hour (settings.TIME_ZONE) at which it is built and sent",
    )
    weekday = models.PositiveSmallIntegerField(
        choices=Weekday.choices, default=Weekday.MONDAY, help_text="weekly reports only"
    )
    recipients = models.TextField(
        blank=True,
        validators=[validate_recipients],
        help_text="e-mail addresses, comma-separated or one per line; empty: archive only",
    )
    enabled = models.BooleanField(default=True)
    last_period_end = models.DateTimeField(null=True, blank=True, help_text="end of the last period built")
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name", "period", "pk"]

    def __str__(self):
        return f"{self.get_period_display()} report of {self.scope_name}"

    @property
    def scope(self):
        return Scope.CLUSTER if self.cluster_id else Scope.FLEET

    @property
    def scope_name(self):
        return self.cluster.name if self.cluster_id else "the fleet"

    @property
    def recipient_list(self):
        return split_recipients(self.recipients)

    def when_text(self):
        if self.period == Period.WEEKLY:
            return f"{self.get_weekday_display()}s at {self.hour:02d}:00"
        return f"every day at {self.hour:02d}:00"


class Report(models.Model):
    scope = models.CharField(max_length=10, choices=Scope.choices)
    cluster = models.ForeignKey("fleet.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    scope_name = models.CharField(max_length=200, help_text="the cluster's name when built, or 'fleet'")
    period = models.CharField(max_length=10, choices=Period.choices)
    start = models.DateTimeField()
    end = models.DateTimeField()
    schedule = models.ForeignKey(
        ReportSchedule, null=True, blank=True, on_delete=models.SET_NULL, related_name="reports"
    )
    built_at = models.DateTimeField()
    built_by = models.CharField(max_length=150, help_text="user name, or the schedule")
    build_ms = models.FloatField(null=True)
    headline = models.CharField(max_length=500, help_text="the summary's first sentence")
    data = models.JSONField(encoder=DjangoJSONEncoder, help_text="everything the report shows, as built")
    html = models.TextField(help_text="the report as e-mailed (charts as cid: references to its ReportChart rows)")
    emailed_to = models.TextField(blank=True)
    emailed_at = models.DateTimeField(null=True, blank=True)
    email_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-end", "-pk"]
        indexes = [
            models.Index(fields=["scope", "period", "end"], name="report_scope_period_end"),
            models.Index(fields=["cluster", "end"], name="report_cluster_end"),
        ]

    def __str__(self):
        return self.title

    def get_absolute_url(self):
        return reverse("reports:detail", args=[self.pk])

    @property
    def title(self):
        return self.data.get("title") or f"{self.get_period_display()} report of {self.scope_name}"


class ReportChart(models.Model):
    """One chart of one report: a server-rendered PNG, shown on the page, inlined (cid:) in the e-mail
    and embedded in the PDF."""

    report = models.ForeignKey(Report, on_delete=models.CASCADE, related_name="charts")
    key = models.CharField(max_length=80, help_text="also its Content-ID in the e-mail")
    title = models.CharField(max_length=200)
    png = models.BinaryField()
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()

    class Meta:
        ordering = ["report", "pk"]
        constraints = [models.UniqueConstraint(fields=["report", "key"], name="unique_chart_key_per_report")]
