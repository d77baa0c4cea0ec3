"""History: narrow time-series rows, rates not raw counters, at three resolutions.

resolution 0 = raw (one row per poll), 60 = one-minute rollup, 3600 = one-hour rollup. Rollup rows
carry the bucket's start time; gauges are averaged, queue figures keep the bucket's maximum (the worst
moment is what an operator needs to see). Every averaged figure also keeps its bucket's minimum and
maximum (`<field>_min`, `<field>_max`, null on raw rows where the figure is its own extreme), so a
one-poll spike survives every rollup. The connection pool is one PoolSnapshot row per poll with every
server packed (pool.py), a server's status the worst of the bucket in rollups (POOL_STATUS_SEVERITY).
The foreign keys have no index of their own: the (owner, resolution, ts) index serves them. Timestamps
are the poller's clock, never a node's, so a node with a skewed clock cannot reorder its samples.
"""

from django.db import models

RAW, MINUTE, HOUR = 0, 60, 3600
RESOLUTIONS = (RAW, MINUTE, HOUR)

# A pool row's status, best to worst: a drain (OFFLINE_SOFT) still serves its connections, a lagging
# replica is shunned for a while, SHUNNED is ProxySQL's verdict on a failing server, OFFLINE_HARD takes
# it out at once. A rollup keeps the worst status seen in its bucket.
POOL_STATUS_SEVERITY = ("ONLINE", "OFFLINE_SOFT", "SHUNNED_REPLICATION_LAG", "SHUNNED", "OFFLINE_HARD")


def worst_status(statuses):
    """The worst of these pool statuses (one ProxySQL 2.7 does not have ranks worst of all)."""
    rank = {s: i for i, s in enumerate(POOL_STATUS_SEVERITY)}
    return max(statuses, key=lambda s: rank.get(s, len(rank)))


class Float32Field(models.FloatField):
    """A figure in 4 bytes on MariaDB (FLOAT: 7 significant digits; the charts show 4) instead of DOUBLE's
    8: history rows are mostly such figures. SQLite stores REAL in 8 bytes (a whole number as an integer)."""

    def db_type(self, connection):
        return "float" if connection.vendor == "mysql" else super().db_type(connection)


def with_extremes(model, names):
    """Add `<name>_min` and `<name>_max` to `model` for its averaged figures (the rollups average `names`)."""
    for name in names:
        for end in ("min", "max"):
            model.add_to_class(f"{name}_{end}", Float32Field(null=True, help_text=f"{end}imum in the bucket (rollups)"))
    model.EXTREMES = tuple(names)
    return model


class ProxySQLSample(models.Model):
    """One poll of one ProxySQL node: stats_mysql_global figures and pool totals."""

    node = models.ForeignKey("fleet.ProxySQLNode", on_delete=models.CASCADE, related_name="+", db_index=False)
    ts = models.DateTimeField()
    resolution = models.PositiveSmallIntegerField(default=RAW)
    reachable = models.BooleanField(default=True)
    questions_ps = Float32Field(null=True)
    slow_queries_ps = Float32Field(null=True)
    prepared_ps = Float32Field(null=True, help_text="prepared statement executions per second (not mirrored)")
    client_connections_connected = Float32Field(null=True)
    client_connections_created_ps = Float32Field(null=True)
    client_connections_aborted_ps = Float32Field(null=True)
    server_connections_connected = Float32Field(null=True)
    server_connections_aborted_ps = Float32Field(null=True)
    active_transactions = Float32Field(null=True)
    conn_used = Float32Field(null=True, help_text="sum of ConnUsed over the pool")
    conn_free = Float32Field(null=True)
    conn_err_ps = Float32Field(null=True)
    mirror_concurrency = Float32Field(null=True)
    mirror_queue_length = Float32Field(null=True, help_text="total over mysql-threads; max in rollups")
    mirror_max_concurrency = models.IntegerField(null=True)
    mirror_max_queue_length = models.IntegerField(null=True, help_text="per worker thread")
    mysql_threads = models.IntegerField(null=True)

    class Meta:
        indexes = [models.Index(fields=["node", "resolution", "ts"], name="pxsample_node_res_ts")]


with_extremes(
    ProxySQLSample,
    [
        "questions_ps",
        "slow_queries_ps",
        "prepared_ps",
        "client_connections_connected",
        "client_connections_created_ps",
        "client_connections_aborted_ps",
        "server_connections_connected",
        "server_connections_aborted_ps",
        "active_transactions",
        "conn_used",
        "conn_free",
        "conn_err_ps",
        "mirror_concurrency",
    ],
)


class PoolServer(models.Model):
    """A server in a hostgroup as one ProxySQL node's connection pool names it: stored once, referenced by
    id from the packed PoolSnapshot rows."""

    node = models.ForeignKey("fleet.ProxySQLNode", on_delete=models.CASCADE, related_name="+")
    hostgroup = models.PositiveIntegerField()
    srv_host = models.CharField(max_length=255)
    srv_port = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "hostgroup", "srv_host", "srv_port"], name="poolserver_node_key")
        ]


class PoolSnapshot(models.Model):
    """One node's stats_mysql_connection_pool at one poll (or one rollup bucket): every server's status
    and figures packed in `servers` (apps/monitoring/pool.py says how; a rollup keeps each figure's
    average, minimum and maximum and the bucket's worst status)."""

    node = models.ForeignKey("fleet.ProxySQLNode", on_delete=models.CASCADE, related_name="+", db_index=False)
    ts = models.DateTimeField()
    resolution = models.PositiveSmallIntegerField(default=RAW)
    servers = models.BinaryField()

    class Meta:
        indexes = [models.Index(fields=["node", "resolution", "ts"], name="poolsnapshot_node_res_ts")]


class HistoryChunk(models.Model):
    """A ProxySQL node's history of one span in one row: an hour of raw polls, half an hour of one-minute
    buckets, a day of one-hour buckets, each record its ProxySQLSample figures and its PoolSnapshot servers,
    deflated together (apps/monitoring/chunks.py). Rows become a chunk once the rollups have read them."""

    node = models.ForeignKey("fleet.ProxySQLNode", on_delete=models.CASCADE, related_name="+", db_index=False)
    resolution = models.PositiveSmallIntegerField()
    ts = models.DateTimeField(help_text="start of the span")
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "resolution", "ts"], name="historychunk_node_res_ts")]


class BackendSample(models.Model):
    """One poll of one backend node (Galera figures are null on a non-Galera node)."""

    server = models.ForeignKey("fleet.Server", on_delete=models.CASCADE, related_name="+", db_index=False)
    ts = models.DateTimeField()
    resolution = models.PositiveSmallIntegerField(default=RAW)
    reachable = models.BooleanField(default=True)
    local_state = models.SmallIntegerField(null=True, help_text="wsrep_local_state; worst (lowest) in rollups")
    primary = models.BooleanField(null=True)
    ready = models.BooleanField(null=True)
    cluster_size = models.SmallIntegerField(null=True)
    recv_queue = models.IntegerField(null=True, help_text="wsrep_local_recv_queue; max in rollups")
    flow_control_paused = Float32Field(null=True)
    desync = models.BooleanField(null=True)
    reject_queries = models.BooleanField(null=True)
    read_only = models.BooleanField(null=True)
    lag_seconds = Float32Field(null=True, help_text="replica lag for async replicas")

    class Meta:
        indexes = [models.Index(fields=["server", "resolution", "ts"], name="backendsample_srv_res_ts")]


with_extremes(BackendSample, ["cluster_size", "flow_control_paused", "lag_seconds"])


class BackendChunk(models.Model):
    """A backend's history of one span in one row (apps/monitoring/chunks.py), as HistoryChunk for a node."""

    server = models.ForeignKey("fleet.Server", on_delete=models.CASCADE, related_name="+", db_index=False)
    resolution = models.PositiveSmallIntegerField()
    ts = models.DateTimeField(help_text="start of the span")
    data = models.BinaryField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["server", "resolution", "ts"], name="backendchunk_srv_res_ts")]


class MirrorRuleSample(models.Model):
    """One mirror rule of one ProxySQL node over one window between two digest polls: the copies it should
    have made and those that ran in its mirror hostgroup (apps/monitoring/mirror.py says how). Rates per
    second, so rollups average them; the loss keeps its worst window in rollups."""

    node = models.ForeignKey("fleet.ProxySQLNode", on_delete=models.CASCADE, related_name="+", db_index=False)
    rule_id = models.PositiveIntegerField()
    ts = models.DateTimeField(help_text="end of the window (the digest poll)")
    resolution = models.PositiveSmallIntegerField(default=RAW)
    mirror_hostgroup = models.PositiveIntegerField(null=True)
    interval_s = Float32Field(null=True, help_text="length of the window")
    hits_ps = Float32Field(null=True, help_text="stats_mysql_query_rules.hits per second")
    prepared_share = Float32Field(null=True, help_text="estimated share of prepared statements (not mirrored)")
    expected_ps = Float32Field(null=True, help_text="hits x (1 - prepared share), per second")
    mirrored_ps = Float32Field(null=True, help_text="executions of the rule's digests in the mirror hostgroup")
    loss = Float32Field(null=True, help_text="1 - mirrored / expected; worst window in rollups")
    ambiguous = models.BooleanField(
        null=True, help_text="a routing rule sends the same digests to the mirror hostgroup"
    )

    class Meta:
        indexes = [models.Index(fields=["node", "resolution", "ts"], name="mirrorsample_node_res_ts")]


with_extremes(MirrorRuleSample, ["interval_s", "hits_ps", "prepared_share", "expected_ps", "mirrored_ps"])


class RollupMark(models.Model):
    """How far a rollup has gone: buckets before rolled_until are done."""

    name = models.CharField(max_length=60, unique=True)
    rolled_until = models.DateTimeField(null=True)
