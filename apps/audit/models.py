"""The append-only audit log. Rows are only ever inserted (see services.record); each carries a hash
over its content and the previous row's hash, so an edited or deleted row breaks the chain."""
import hashlib
import json

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models


class Outcome(models.TextChoices):
    SUCCESS = "success", "success"
    FAILURE = "failure", "failure"
    REFUSED = "refused", "refused"
    INVALID = "invalid", "invalid input"
    DRY_RUN = "dry_run", "dry run"


class ActorKind(models.TextChoices):
    USER = "user", "user"
    RULE = "rule", "automatic rule"
    SYSTEM = "system", "system"
    API = "api", "API token"


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise TypeError("audit events are append-only")

    def delete(self):
        raise TypeError("audit events are append-only")


class AuditEvent(models.Model):
    created_at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150, help_text="user name, API token name or rule name")
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices, default=ActorKind.USER)
    actor_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+", db_constraint=False)
    source_address = models.GenericIPAddressField(null=True, blank=True)
    # Denormalised so that events survive the deletion of what they name.
    cluster_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    cluster_name = models.CharField(max_length=200, blank=True)
    target = models.CharField(max_length=300, blank=True, help_text="ProxySQL node, server or object acted on")
    action = models.CharField(max_length=100, db_index=True)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, db_index=True)
    details = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    duration_ms = models.FloatField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["cluster_id", "created_at"]), models.Index(fields=["actor", "created_at"])]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.outcome}"

    def content(self):
        """What the hash covers: every field but the id and the hash itself."""
        return {
            "created_at": self.created_at.isoformat(), "actor": self.actor, "actor_kind": self.actor_kind,
            "actor_user_id": self.actor_user_id, "source_address": self.source_address,
            "cluster_id": self.cluster_id, "cluster_name": self.cluster_name, "target": self.target,
            "action": self.action, "outcome": self.outcome, "details": self.details,
            "duration_ms": self.duration_ms, "prev_hash": self.prev_hash,
        }

    def compute_hash(self):
        canonical = json.dumps(self.content(), sort_keys=True, cls=DjangoJSONEncoder, separators=(",", ":"))
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise TypeError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise TypeError("audit events are append-only")


class AuditChainHead(models.Model):
    """One row holding the newest hash; locked while appending so the chain stays a line."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    last_hash = models.CharField(max_length=64)
