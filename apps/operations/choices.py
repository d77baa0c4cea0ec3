from django.db import models


class OperationKind:
    """This app's operation kinds as stored in Operation.kind; each is registered with its label and the rest in
    kinds.py (registry.OperationSpec). Another app names its own kinds (dr: CHANNEL_MOVE)."""

    SWITCHOVER = "switchover"
    DRAIN = "drain"
    RESTORE = "restore"
    READ_POOL = "read_pool"
    FAILOVER = "failover"
    CONFIG = "config"
    REPAIR = "repair"


class OperationState(models.TextChoices):
    PLANNED = "planned", "planned (not confirmed)"
    PENDING = "pending", "confirmed, waiting for a worker"
    RUNNING = "running", "running"
    ROLLING_BACK = "rolling_back", "rolling back"
    # A ProxySQL node stopped answering during the rollback: its remaining rollback statements are kept
    # (PendingRollback) and retried until it answers; then the operation ends rolled_back.
    ROLLBACK_PENDING = "rollback_pending", "rollback pending"
    # Past its point of no return the operation went on without a ProxySQL node that stopped answering: it is
    # done on the other nodes and in the inventory; that node's remaining statements are kept (PendingRollback)
    # and retried the same way; then the operation ends done. Nothing is rolled back.
    FINISH_PENDING = "finish_pending", "finish pending: done on the other nodes"
    DONE = "done", "done"
    ROLLED_BACK = "rolled_back", "rolled back"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    REFUSED = "refused", "refused at start (guards or statements changed)"
    EXPIRED = "expired", "expired (not started within its validity window)"

    @classmethod
    def finished(cls):
        return [cls.DONE, cls.ROLLED_BACK, cls.FAILED, cls.CANCELLED, cls.REFUSED, cls.EXPIRED]


class PendingState(models.TextChoices):
    PENDING = "pending", "pending: retried until the node answers"
    SUPERSEDED = "superseded", "superseded: the node is repaired from the inventory when it answers"
    DONE = "done", "done: every statement ran"
    REPAIRED = "repaired", "repaired from the inventory"

    @classmethod
    def open(cls):
        return [cls.PENDING, cls.SUPERSEDED]


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
