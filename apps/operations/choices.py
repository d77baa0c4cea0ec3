from django.db import models


class OperationKind(models.TextChoices):
    SWITCHOVER = "switchover", "planned switchover"
    DRAIN = "drain", "maintenance drain"
    RESTORE = "restore", "restore from maintenance"
    READ_POOL = "read_pool", "read-pool rule"
    FAILOVER = "failover", "automatic failover"
    CONFIG = "config", "configuration change"


class OperationState(models.TextChoices):
    PLANNED = "planned", "planned (not confirmed)"
    PENDING = "pending", "confirmed, waiting for a worker"
    RUNNING = "running", "running"
    ROLLING_BACK = "rolling_back", "rolling back"
    DONE = "done", "done"
    ROLLED_BACK = "rolled_back", "rolled back"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"

    @classmethod
    def finished(cls):
        return [cls.DONE, cls.ROLLED_BACK, cls.FAILED, cls.CANCELLED]


class StepState(models.TextChoices):
    PENDING = "pending", "pending"
    RUNNING = "running", "running"
    DONE = "done", "done"
    SKIPPED = "skipped", "skipped"
    FAILED = "failed", "failed"
    ROLLED_BACK = "rolled_back", "rolled back"


class OnDrainTimeout(models.TextChoices):
    ROLLBACK = "rollback", "roll back (nothing is cut)"
    OFFLINE_HARD = "offline_hard", "proceed with OFFLINE_HARD (cuts the sessions still on the old writer)"
