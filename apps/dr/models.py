"""Disaster-recovery channels: asynchronous replication from one cluster (a site) into another, whose
source and replica ends can both move to another node of their cluster."""

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.fleet.secrets import EncryptedTextField
from apps.monitoring.models import with_extremes
from apps.fleet.validators import validate_no_nul

SOURCE, REPLICA = "source", "replica"


class ReplicationChannel(models.Model):
    """The default replication connection of `replica_server` reading from `source_server` by MariaDB GTID
    (MASTER_USE_GTID=slave_pos). Either end may move to one of its candidates (ChannelCandidate)."""

    name = models.CharField(max_length=200, unique=True, validators=[validate_no_nul])
    source_cluster = models.ForeignKey("fleet.Cluster", on_delete=models.PROTECT, related_name="outgoing_channels")
    replica_cluster = models.ForeignKey("fleet.Cluster", on_delete=models.PROTECT, related_name="incoming_channels")
    source_server = models.ForeignKey(
        "fleet.Server", on_delete=models.PROTECT, related_name="+", help_text="the node the channel reads from now"
    )
    replica_server = models.ForeignKey(
        "fleet.Server", on_delete=models.PROTECT, related_name="+", help_text="the node that runs the channel now"
    )
    replication_user = models.CharField(max_length=80, validators=[validate_no_nul])
    replication_password = EncryptedTextField(blank=True)
    max_lag_s = models.PositiveIntegerField(default=60, help_text="lag above this many seconds shows as a problem")
    auto_failover_enabled = models.BooleanField(
        default=False, help_text="move the channel by itself when its source or replica node fails"
    )
    failover_after_polls = models.PositiveSmallIntegerField(
        default=2,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="consecutive polls with an end failing (unreachable, not Synced in a Primary component, or the "
        "IO thread failing) before the channel moves",
    )
    # No failback unless asked (MySQL's native asynchronous failover never fails back either).
    failback_enabled = models.BooleanField(
        default=False, help_text="move the source back to the preferred source once it has stayed Synced long enough"
    )
    failback_after_s = models.PositiveIntegerField(
        default=300, validators=[MaxValueValidator(86400)], help_text="...for this many seconds"
    )
    preferred_source = models.ForeignKey(
        "fleet.Server",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="where failback brings the source; empty: the source an automatic failover left",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def clean(self):
        errors = {}
        if self.source_cluster_id and self.source_cluster_id == self.replica_cluster_id:
            errors["replica_cluster"] = "The replica cluster must differ from the source cluster."
        if self.source_server_id and self.source_server.cluster_id != self.source_cluster_id:
            errors["source_server"] = f"{self.source_server} is not in the source cluster."
        if self.replica_server_id and self.replica_server.cluster_id != self.replica_cluster_id:
            errors["replica_server"] = f"{self.replica_server} is not in the replica cluster."
        if self.preferred_source_id and self.preferred_source.cluster_id != self.source_cluster_id:
            errors["preferred_source"] = f"{self.preferred_source} is not in the source cluster."
        if errors:
            raise ValidationError(errors)

    def candidates_for(self, side):
        """[(server, weight)], best first (higher weight, then hostname/port), the current end included."""
        rows = (
            self.candidates.filter(side=side)
            .select_related("server")
            .order_by("-weight", "server__hostname", "server__port")
        )
        return [(c.server, c.weight) for c in rows]


class ChannelCandidate(models.Model):
    """A node an end of the channel may move to, with its weight (the higher, the more preferred), like
    MySQL's asynchronous_connection_failover_add_source()."""

    channel = models.ForeignKey(ReplicationChannel, on_delete=models.CASCADE, related_name="candidates")
    side = models.CharField(max_length=8, choices=[(SOURCE, "source"), (REPLICA, "replica")])
    server = models.ForeignKey("fleet.Server", on_delete=models.CASCADE, related_name="+")
    weight = models.PositiveSmallIntegerField(default=50, validators=[MaxValueValidator(100)])

    class Meta:
        ordering = ["channel", "side", "-weight"]
        constraints = [models.UniqueConstraint(fields=["channel", "server"], name="one_candidacy_per_server")]

    def __str__(self):
        return f"{self.side} candidate {self.server} ({self.weight})"

    def clean(self):
        if not (self.channel_id and self.server_id):
            return
        cluster = self.channel.source_cluster_id if self.side == SOURCE else self.channel.replica_cluster_id
        if self.server.cluster_id != cluster:
            raise ValidationError({"server": f"{self.server} is not in the channel's {self.side} cluster."})


class ChannelSample(models.Model):
    """One poll of a channel: its threads, lag and GTID positions (in the source cluster's domain)."""

    channel = models.ForeignKey(ReplicationChannel, on_delete=models.CASCADE, related_name="samples")
    ts = models.DateTimeField()
    resolution = models.PositiveSmallIntegerField(
        default=0, help_text="0 raw, 60 or 3600: rollups (apps/monitoring/rollups.py)"
    )
    source_server = models.ForeignKey("fleet.Server", null=True, on_delete=models.SET_NULL, related_name="+")
    replica_server = models.ForeignKey("fleet.Server", null=True, on_delete=models.SET_NULL, related_name="+")
    reachable = models.BooleanField(default=True, help_text="the replica node answered")
    io_running = models.BooleanField(null=True)
    sql_running = models.BooleanField(null=True)
    lag_seconds = models.FloatField(null=True, help_text="Seconds_Behind_Master")
    source_seq = models.BigIntegerField(null=True, help_text="the source's last GTID sequence in its domain")
    applied_seq = models.BigIntegerField(null=True, help_text="the replica's gtid_slave_pos in that domain")

    class Meta:
        indexes = [models.Index(fields=["channel", "resolution", "ts"], name="channelsample_chan_res_ts")]


with_extremes(ChannelSample, ["lag_seconds"])  # rollups keep each bucket's least and greatest lag
