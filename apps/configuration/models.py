"""A cluster's configuration as versions: what the console intends every ProxySQL node of the cluster to run.

A version's `content` is plain data (see content.py): the cluster's hostgroups and roles, its rows of
mysql_servers, the hostgroup tables, mysql_users, mysql_query_rules, scheduler and the global variables.
Passwords never sit in it: a row or variable names a ConfigSecret instead. Versions are append-only.
"""

from django.conf import settings
from django.db import models
from django.urls import reverse

from apps.fleet.secrets import EncryptedTextField


class ConfigVersion(models.Model):
    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.CASCADE, related_name="config_versions")
    number = models.PositiveIntegerField()
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.RESTRICT, related_name="+")
    author = models.CharField(max_length=150, help_text="user or rule name")
    reason = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    content = models.JSONField()
    operation = models.ForeignKey(
        "operations.Operation",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="the operation that applied it, if one did",
    )
    source = models.CharField(max_length=20, help_text="adopt, change, revert, runtime, operation")

    class Meta:
        ordering = ["cluster", "-number"]
        constraints = [models.UniqueConstraint(fields=["cluster", "number"], name="unique_version_number")]

    def __str__(self):
        return f"{self.cluster} v{self.number}"

    def get_absolute_url(self):
        return reverse("configuration:version", args=[self.pk])


class ConfigSecret(models.Model):
    """A password a configuration refers to by name (`ref`), encrypted at rest and never rendered back.
    A new value is a new ref, so an old version still names the value it was applied with."""

    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.CASCADE, related_name="config_secrets")
    ref = models.CharField(max_length=300)
    value = EncryptedTextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "ref"], name="unique_secret_ref")]


class ChangeSet(models.Model):
    """Edits on top of a base version, with a reason; planned into an Operation, applied as the next version."""

    class State(models.TextChoices):
        DRAFT = "draft", "draft"
        PLANNED = "planned", "planned"
        APPLIED = "applied", "applied"
        FAILED = "failed", "not applied"
        DISCARDED = "discarded", "discarded"

    cluster = models.ForeignKey("fleet.Cluster", on_delete=models.CASCADE, related_name="change_sets")
    base = models.ForeignKey(ConfigVersion, on_delete=models.RESTRICT, related_name="+")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_name = models.CharField(max_length=150)
    reason = models.TextField(blank=True)
    source = models.CharField(max_length=20, default="change", help_text="change, file, revert, runtime, write_back")
    # write_back only: the nodes to bring back to the base version (empty: every node that differs).
    nodes = models.JSONField(default=list, blank=True)
    # [{"op": "upsert"|"delete", "table": ..., "row"/"key": ...}, {"op": "set", "table": "global_variables",
    #   "name": ..., "value": ...}, {"op": "roles", "roles": {...}}]; secrets as encrypted tokens only.
    edits = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=12, choices=State.choices, default=State.DRAFT)
    operation = models.ForeignKey(
        "operations.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    result = models.ForeignKey(ConfigVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self):
        return f"change set #{self.pk} on {self.cluster} v{self.base.number}"

    def get_absolute_url(self):
        return reverse("configuration:change_set", args=[self.pk])
