"""A rollout: one change (a change set's edits, or a YAML fragment) to the clusters a selector picks, in waves. Its
progress lives here, cluster by cluster, so that the service can pick it up again after a worker's death."""

from django.conf import settings
from django.db import models


class RolloutState(models.TextChoices):
    PLANNED = "planned", "planned (not started)"
    RUNNING = "running", "running"
    PAUSED = "paused", "paused"
    HALTED = "halted", "halted: a wave failed its gate or its apply, and was rolled back"
    ROLLED_BACK = "rolled_back", "rolled back (aborted after some waves)"
    DONE = "done", "done"
    ABORTED = "aborted", "aborted before any change"


class ClusterState(models.TextChoices):
    PENDING = "pending", "pending"
    APPLYING = "applying", "applying"
    APPLIED = "applied", "applied"
    UNCHANGED = "unchanged", "nothing to do (already runs the change)"
    FAILED = "failed", "failed (its change set did not end done)"
    ROLLING_BACK = "rolling_back", "rolling back"
    ROLLED_BACK = "rolled_back", "rolled back"
    ROLLBACK_FAILED = "rollback_failed", "rollback failed"
    SKIPPED = "skipped", "skipped: busy with another operation (Rollout.when_busy)"


class WhenBusy(models.TextChoices):
    """A selected cluster that another operation holds when its turn comes."""

    WAIT = "wait", "wait for it (up to busy_wait_s, then the rollout halts)"
    SKIP = "skip", "skip it (said with the reason; the rollout goes on)"


class WaveState(models.TextChoices):
    """A wave's state, kept in Rollout.waves (JSON): compared through these, never as bare strings."""

    PENDING = "pending", "pending"
    APPLYING = "applying", "applying"
    BAKING = "baking", "baking (its gate is read)"
    PASSED = "passed", "passed its gate"
    ROLLED_BACK = "rolled_back", "rolled back"


ENDED = (RolloutState.HALTED, RolloutState.ROLLED_BACK, RolloutState.DONE, RolloutState.ABORTED)


class Rollout(models.Model):
    reason = models.TextField()
    # The change, as the change set services take it: {"edits": [...]} (create_change_set's JSON edits) or
    # {"file": "<YAML>"} (start_from_file: the tables and variables it names).
    change = models.JSONField()
    selector = models.JSONField(default=dict, help_text='{"tags": [["env", "prod"]], "names": [...]}')
    waves_text = models.CharField(max_length=200, help_text="e.g. 1,1,25%,100%")
    # One entry per wave: {"clusters": [ids], "state": pending|applying|baking|passed|failed|rolled_back,
    # "started_at", "applied_at" (ISO), "gate": {figures}}.
    waves = models.JSONField(default=list)
    bake_canary_s = models.FloatField(default=60)
    bake_s = models.FloatField(default=30)
    max_error_rate = models.FloatField(default=1.0, help_text="errors per second per node above the window before")
    max_latency_ratio = models.FloatField(
        default=2.0,
        help_text="a cluster's digest latency since the change may be at most this many times the window before's",
    )
    max_mirror_queue_share = models.FloatField(
        default=0.8, help_text="a node's mirror queue against its limit (mysql-mirror_max_queue_length x mysql-threads)"
    )
    roll_back_before = models.BooleanField(
        default=False, help_text="on a halt, every wave before the failing one is rolled back too (newest first)"
    )
    when_busy = models.CharField(max_length=4, choices=WhenBusy.choices, default=WhenBusy.WAIT)
    busy_wait_s = models.FloatField(default=300, help_text="how long a busy cluster is waited for (when_busy wait)")
    state = models.CharField(max_length=12, choices=RolloutState.choices, default=RolloutState.PLANNED)
    abort_requested = models.BooleanField(default=False)
    halt_reason = models.TextField(blank=True)
    planned_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    planner = models.CharField(max_length=150)
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"rollout #{self.pk}"


class RolloutCluster(models.Model):
    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="clusters")
    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.PROTECT, related_name="+")
    wave = models.PositiveIntegerField()
    position = models.PositiveIntegerField(help_text="the order in the plan")
    state = models.CharField(max_length=16, choices=ClusterState.choices, default=ClusterState.PENDING)
    version_before = models.ForeignKey(
        "configuration.ConfigVersion", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    change_set = models.ForeignKey(
        "configuration.ChangeSet", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revert = models.ForeignKey(
        "configuration.ChangeSet", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["position"]
        constraints = [models.UniqueConstraint(fields=["rollout", "cluster"], name="rollout_cluster_once")]
