"""Operations: a plan (data, shown before it runs), its persisted steps, and the cluster lock.

State moves by conditional UPDATEs only (filter(pk, state=FROM).update(state=TO)); 0 rows means someone
else got there first. Network calls happen between short transactions, never inside one.
"""
from django.conf import settings
from django.db import models
from django.urls import reverse

from .choices import OperationKind, OperationState, StepState


class Operation(models.Model):
    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.PROTECT, related_name="operations")
    kind = models.CharField(max_length=20, choices=OperationKind.choices)
    state = models.CharField(max_length=20, choices=OperationState.choices, default=OperationState.PLANNED,
                             db_index=True)
    title = models.CharField(max_length=300)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    actor = models.CharField(max_length=150, help_text="user name or rule name")
    plan = models.JSONField(help_text="the plan exactly as previewed: guards and statements per ProxySQL node")
    override_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    cancel_requested = models.BooleanField(default=False)
    point_of_no_return = models.BooleanField(default=False, help_text="set once the new writer took writes")
    error = models.TextField(blank=True)
    timings = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"#{self.pk} {self.title}"

    def get_absolute_url(self):
        return reverse("operations:detail", args=[self.pk])

    @property
    def duration_ms(self):
        if self.started_at and self.finished_at:
            return round((self.finished_at - self.started_at).total_seconds() * 1000, 1)
        return None

    @property
    def finished(self):
        return self.state in OperationState.finished()


class OperationStep(models.Model):
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveSmallIntegerField()
    key = models.CharField(max_length=40)
    title = models.CharField(max_length=300)
    state = models.CharField(max_length=12, choices=StepState.choices, default=StepState.PENDING)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    # What was really done, as it happened: [{"node": id, "sql": ..., "ms": ...}], figures, errors.
    executed = models.JSONField(default=list, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["operation", "index"]
        constraints = [models.UniqueConstraint(fields=["operation", "index"], name="unique_step_index")]


class ClusterLock(models.Model):
    """At most one running operation per cluster. A lock past its expiry may be taken over."""

    cluster = models.OneToOneField("fleet.Cluster", on_delete=models.CASCADE, primary_key=True, related_name="+")
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="+")
    holder = models.CharField(max_length=200)
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()
