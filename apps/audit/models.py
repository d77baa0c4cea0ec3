"""The append-only audit log. Rows are only ever inserted (see services.record); each carries a hash
over its content and the previous row's hash, so an edited or deleted row breaks the chain.

The hash covers only what never changes after the insert. The actor is kept as written: the user name
(`actor`) and the user's id (`actor_user_id`), a plain number rather than a link to the user, so that
deleting a user changes no audit row. Until the re-anchor it was a link that the deletion nulled, which
broke the chain at every event of that user: an ordinary deletion looked like tampering.

Hashing schemes, and the re-anchor between them (services.verify_some reads both):
  1, legacy   the content is HASHED_FIELDS; the events written before the re-anchor.
  2, current  the same fields plus {"scheme": 2}; the re-anchor event and every event after it.
The re-anchor (migration 0003, apps/audit/reanchor.py) left every legacy hash as it was: it restored the
user ids that deletions had nulled where the old hash proves the value (the only value that makes it
match again), then appended one event, REANCHOR_ACTION, in the current scheme whose prev_hash is the
old chain head and whose details record that head, the legacy events and the links it restored. A
verification walks the legacy events under scheme 1 up to the anchor and on under scheme 2; the scheme
changes only at the anchor and never goes back, and a row whose scheme column is changed no longer
matches its hash (the scheme is part of what scheme 2 hashes, and absent from what scheme 1 hashes).

Beside the evidence, each event carries a search index that is *derived* from it and therefore not
covered by the hash: `search_text` (its words, lowercased) and its AuditSearchToken rows. Rebuilding
them from the hashed fields gives the same values; an edit to them can hide an event from a search but
cannot change what the event says, which the chain still proves.

The only path that removes events is retention (services.archive_old_events): it writes them to a
gzip JSONL file first, keeps the chain head at the cut in AuditArchive, and audits itself.
"""

import hashlib
import json

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models


class Outcome(models.TextChoices):
    SUCCESS = "success", "success"
    FAILURE = "failure", "failure"
    REFUSED = "refused", "refused"
    INVALID = "invalid", "invalid input"
    DRY_RUN = "dry_run", "dry run"


class ActorKind(models.TextChoices):
    """Who acted, and through which door (apps/audit/actor.py builds it). "user" is a person at the console's pages
    (the value predates the other doors; hashed rows keep it)."""

    USER = "user", "user (page)"
    API = "api", "API"
    COMMAND = "command", "command line"
    SCHEDULE = "schedule", "schedule"
    RULE = "rule", "automatic rule"
    SYSTEM = "system", "system"


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs):
        raise TypeError("audit events are append-only")

    def delete(self):
        raise TypeError("audit events are append-only")


# The hashed fields, in the order verify_chain() reads them (values_list), and how content() names them.
HASHED_FIELDS = (
    "created_at",
    "actor",
    "actor_kind",
    "actor_user_id",
    "source_address",
    "cluster_id",
    "cluster_name",
    "target",
    "action",
    "outcome",
    "details",
    "duration_ms",
    "prev_hash",
)
LEGACY_SCHEME, CURRENT_SCHEME = 1, 2
SCHEMES = (LEGACY_SCHEME, CURRENT_SCHEME)
REANCHOR_ACTION = "re-anchor audit chain"


def hashed_content(values, scheme):
    """What the hash of an event covers under `scheme`, from its HASHED_FIELDS `values` (a mapping)."""
    content = {name: values[name] for name in HASHED_FIELDS}
    if scheme != LEGACY_SCHEME:
        content["scheme"] = scheme
    return content


def hash_content(content):
    canonical = json.dumps(content, sort_keys=True, cls=DjangoJSONEncoder, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class AuditEvent(models.Model):
    created_at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150, help_text="user name, API token name or rule name")
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices, default=ActorKind.USER)
    # The user's id as written: not a link, so that deleting the user leaves the event (and its hash) alone.
    actor_user_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    source_address = models.GenericIPAddressField(null=True, blank=True)
    # Denormalised so that events survive the deletion of what they name.
    cluster_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    cluster_name = models.CharField(max_length=200, blank=True)
    target = models.CharField(max_length=300, blank=True, help_text="ProxySQL node, server or object acted on")
    action = models.CharField(max_length=100)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    details = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)
    duration_ms = models.FloatField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64, unique=True)
    scheme = models.PositiveSmallIntegerField(default=CURRENT_SCHEME, help_text="hashing scheme (see the module)")
    # Derived, not hashed (see the module docstring): the words of every field above, lowercased.
    search_text = models.TextField(blank=True, default="", editable=False)

    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        # Every list filter has an index ending in created_at, so "newest first" under a filter walks
        # the index in order and stops after one page (indexes carry the primary key as a tie-break).
        indexes = [
            models.Index(fields=["cluster_id", "created_at"]),
            models.Index(fields=["actor", "created_at"]),
            models.Index(fields=["action", "created_at"], name="audit_action_created"),
            models.Index(fields=["outcome", "created_at"], name="audit_outcome_created"),
        ]

    def __str__(self):
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.outcome}"

    def content(self):
        """What the hash covers: every field but the id, the hash itself and the derived search text
        (under scheme 2 also the scheme)."""
        return hashed_content(
            {
                "created_at": self.created_at.isoformat(),
                "actor": self.actor,
                "actor_kind": self.actor_kind,
                "actor_user_id": self.actor_user_id,
                "source_address": self.source_address,
                "cluster_id": self.cluster_id,
                "cluster_name": self.cluster_name,
                "target": self.target,
                "action": self.action,
                "outcome": self.outcome,
                "details": self.details,
                "duration_ms": self.duration_ms,
                "prev_hash": self.prev_hash,
            },
            self.scheme,
        )

    def compute_hash(self):
        return hash_content(self.content())

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


class AuditSearchToken(models.Model):
    """One word of one event's search_text: an inverted index that works the same on SQLite and
    MariaDB (and stays transactional, unlike InnoDB's FULLTEXT). A search looks a word up by prefix
    here (primary key order: token, event), then checks the exact text on the few events found."""

    pk = models.CompositePrimaryKey("token", "event")
    token = models.CharField(max_length=48)
    event = models.ForeignKey(AuditEvent, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")


class AuditArchive(models.Model):
    """Events moved out by retention: the file that holds them and the chain head at the cut.
    verify_chain() starts from the newest archive's head_hash."""

    created_at = models.DateTimeField()
    cutoff = models.DateTimeField(help_text="events created before this were archived")
    path = models.CharField(max_length=500)
    sha256 = models.CharField(max_length=64, help_text="of the gzip file")
    first_id = models.BigIntegerField()
    last_id = models.BigIntegerField()
    count = models.BigIntegerField()
    first_prev_hash = models.CharField(max_length=64, help_text="prev_hash of the first archived event")
    head_hash = models.CharField(max_length=64, help_text="hash of the last archived event: the chain head at the cut")
    removed = models.BooleanField(default=False, help_text="the archived events are gone from the table")

    class Meta:
        ordering = ["-last_id"]

    def __str__(self):
        return f"events {self.first_id}-{self.last_id} ({self.count}) in {self.path}"


class RefusalBurst(models.Model):
    """Repeated identical refusals being counted instead of written (services.record, "repeated
    refusals"): bookkeeping, not evidence, until the window ends and its summary event is appended to the
    chain. One row per key (actor, action, target, cluster, outcome) seen within the last window."""

    key = models.CharField(max_length=64, unique=True)
    actor = models.CharField(max_length=150)
    actor_kind = models.CharField(max_length=10, choices=ActorKind.choices)
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    cluster_id = models.BigIntegerField(null=True, blank=True)
    cluster_name = models.CharField(max_length=200, blank=True)
    target = models.CharField(max_length=300, blank=True)
    action = models.CharField(max_length=100)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    window_start = models.DateTimeField()
    last_at = models.DateTimeField(help_text="the latest refusal of this key, written or counted")
    written = models.PositiveIntegerField(default=0, help_text="written one by one since the allowance began")
    folded = models.PositiveBigIntegerField(default=0, help_text="counted in this window, not written yet")
    first_folded_at = models.DateTimeField(null=True, blank=True)
    sample = models.JSONField(
        default=list,
        blank=True,
        encoder=DjangoJSONEncoder,
        help_text="distinct source addresses and details of the counted refusals",
    )
    sample_complete = models.BooleanField(default=True)

    class Meta:
        indexes = [models.Index(fields=["folded", "window_start"], name="audit_burst_due")]
