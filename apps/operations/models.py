"""Operations: a plan (data, shown before it runs), its persisted steps, and the cluster lock.

State moves by conditional UPDATEs only (filter(pk, state=FROM).update(state=TO)); 0 rows means someone
else got there first. Network calls happen between short transactions, never inside one.
"""

from django.conf import settings
from django.db import models
from django.urls import reverse

from apps.plans import registry
from .choices import OperationState, PendingState, StepState
from .sync_hold import HOLD_KEY


class Operation(models.Model):
    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.PROTECT, related_name="operations")
    # One of the registered kinds (apps/plans/registry.py), checked at save: a new kind needs no migration here.
    kind = models.CharField(max_length=20)
    state = models.CharField(
        max_length=20, choices=OperationState.choices, default=OperationState.PLANNED, db_index=True
    )
    title = models.CharField(max_length=300)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.CharField(max_length=150, help_text="user name or rule name")
    # Who confirmed it (the name as written survives the user's deletion), and when: the validity
    # window (Cluster.plan_validity_s) counts from here.
    confirmed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    confirmer = models.CharField(max_length=150, blank=True, help_text="user name or rule name")
    confirmed_at = models.DateTimeField(null=True, blank=True)
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

    def save(self, *args, **kwargs):
        registry.kind_spec(self.kind)  # a kind nobody registered is refused by name, never stored
        super().save(*args, **kwargs)

    def get_kind_display(self):
        """Its kind's label (its spec's); a kind no longer registered shows as stored."""
        return registry.label(self.kind)

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

    @property
    def finish_or_rollback(self):
        """What its PendingRollback rows hold: "finish" (the rest of the operation, past its point of no return:
        the executor never rolls back past it) or "rollback"."""
        return "finish" if self.point_of_no_return else "rollback"


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


class PendingRollback(models.Model):
    """Statements one ProxySQL node did not take, in order, retried with backoff until it answers: either the
    rollback's (it stopped answering while the operation rolled back) or, despite the name, the rest of the
    operation past its point of no return (a finish pending): operation.finish_or_rollback says which.
    Superseded when another operation changed the cluster meanwhile: then the node is repaired from the
    inventory instead (see rollbacks.py)."""

    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="pending_rollbacks")
    node = models.ForeignKey("fleet.ProxySQLNode", on_delete=models.CASCADE, related_name="+")
    state = models.CharField(max_length=12, choices=PendingState.choices, default=PendingState.PENDING, db_index=True)
    # Still to run, in order: [{"step": key, "sql": ...}]; a statement leaves the list once the node took it.
    statements = models.JSONField(default=list)
    ran = models.JSONField(default=list, blank=True, help_text="statements run by retries: [{step, sql, at}]")
    tries = models.JSONField(default=list, blank=True, help_text="the last tries: [{at, outcome, error, ran}]")
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    last_try_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    next_try_at = models.DateTimeField()
    claimed_until = models.DateTimeField(null=True, blank=True, help_text="a retry is running (lease)")
    superseded_by = models.ForeignKey(Operation, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolution = models.TextField(blank=True)

    class Meta:
        ordering = ["created_at", "pk"]
        constraints = [models.UniqueConstraint(fields=["operation", "node"], name="one_pending_rollback_per_node")]

    def __str__(self):
        return f"{self.operation.finish_or_rollback} of #{self.operation_id} on {self.node.name}"

    @property
    def last_try(self):
        return self.tries[-1] if self.tries else None

    @property
    def what_is_pending(self):
        """In the operator's words, e.g. "finish pending on proxysql-2: 2 statement(s) past the point of no return
        not taken yet"."""
        if not self.statements:  # rollbacks._recheck: a node that restarted during the operation
            return (
                f"{self.operation.finish_or_rollback} pending on {self.node.name}: it restarted during the operation; "
                "its layers are checked against the inventory (and repaired from it if they differ)"
            )

        if all(s["step"] == HOLD_KEY for s in self.statements):  # executor.keep_held
            return (
                f"{self.operation.finish_or_rollback} pending on {self.node.name}: its ProxySQL Cluster sync is "
                "held until the other nodes took theirs (restored then)"
            )
        if self.operation.finish_or_rollback == "finish":
            return (
                f"finish pending on {self.node.name}: {len(self.statements)} statement(s) past the point of no "
                "return not taken yet"
            )
        return (
            f"rollback pending on {self.node.name}: {len(self.statements)} statement(s) of the rollback not taken yet"
        )


class EndpointLock(models.Model):
    """At most one running operation per ProxySQL instance (admin host:port), whatever cluster it is for: a
    ProxySQL that fronts several clusters LOADs its whole mysql_servers table at once, so changes for one
    cluster must not interleave with another's. Taken with the ClusterLock, in the same transaction."""

    endpoint = models.CharField(max_length=300, primary_key=True, help_text="host:port of the admin interface")
    operation = models.ForeignKey(Operation, on_delete=models.CASCADE, related_name="+")
    holder = models.CharField(max_length=200)
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()
