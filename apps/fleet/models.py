"""The inventory: what we intend the fleet to be. Runtime truth lives on the ProxySQL nodes; drift.py
compares the two."""

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse

from .choices import ClusterKind, ClusterSyncMode, HostgroupRole, NativeManager, ServerStatus, WriterIsAlsoReader
from .native import managed_hostgroups
from .secrets import EncryptedTextField
from .validators import validate_credential_hosts, validate_hostname, validate_name, validate_no_nul, validate_tls_ca

HOSTGROUP_MAX = 2_147_483_647
hostgroup_validators = [MinValueValidator(0), MaxValueValidator(HOSTGROUP_MAX)]
port_validators = [MinValueValidator(1), MaxValueValidator(65535)]


class Cluster(models.Model):
    name = models.CharField(max_length=200, unique=True, validators=[validate_name])
    kind = models.CharField(max_length=20, choices=ClusterKind.choices, default=ClusterKind.GALERA)
    description = models.TextField(blank=True, validators=[validate_no_nul])

    # The roles: a read model of the latest configuration version's "roles", written only with it.
    writer_hostgroup = models.PositiveIntegerField(validators=hostgroup_validators)
    reader_hostgroup = models.PositiveIntegerField(validators=hostgroup_validators)
    backup_writer_hostgroup = models.PositiveIntegerField(null=True, blank=True, validators=hostgroup_validators)
    offline_hostgroup = models.PositiveIntegerField(null=True, blank=True, validators=hostgroup_validators)

    monitor_user = models.CharField(max_length=80, blank=True, validators=[validate_no_nul])
    monitor_password = EncryptedTextField(blank=True)
    # Async replication only: what replicas use to connect to a new primary after a switchover.
    replication_user = models.CharField(max_length=80, blank=True, validators=[validate_no_nul])
    replication_password = EncryptedTextField(blank=True)
    # The digest page's EXPLAIN: a user of its own with SELECT only (checked before each EXPLAIN), never the
    # application's nor the monitor user (which ProxySQL and the operations use, with write privileges).
    explain_user = models.CharField(
        max_length=80,
        blank=True,
        validators=[validate_no_nul],
        help_text="a dedicated read-only backend user for EXPLAIN (SELECT only); empty: no EXPLAIN",
    )
    explain_password = EncryptedTextField(blank=True)

    # Policy the rules and operations read (see DOMAIN.md).
    max_replication_lag = models.PositiveIntegerField(
        default=100,
        help_text="Galera: highest wsrep_local_recv_queue for a desynced node to stay a reader; "
        "async: highest replica lag in seconds.",
    )
    min_available_readers = models.PositiveIntegerField(default=1)
    writer_is_also_reader = models.PositiveSmallIntegerField(
        choices=WriterIsAlsoReader.choices, default=WriterIsAlsoReader.YES
    )
    drain_timeout_ms = models.PositiveIntegerField(default=5000, validators=[MinValueValidator(50)])
    poll_interval_s = models.FloatField(
        default=2.0,
        validators=[MinValueValidator(1.0), MaxValueValidator(3600)],
        help_text="seconds between polls of each ProxySQL node",
    )
    # Backends are polled more often: automatic failover and the read-pool rules react to these polls.
    backend_poll_interval_s = models.FloatField(
        default=1.0,
        validators=[MinValueValidator(1.0), MaxValueValidator(3600)],
        help_text="seconds between polls of each backend (beat ticks every second: 1 is the shortest)",
    )
    read_pool_rules_enabled = models.BooleanField(default=False)
    rules_dry_run = models.BooleanField(default=True, help_text="show what the read-pool rules would do, do nothing")
    reader_return_mark = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="a desynced reader taken out comes back only once its recv queue stays at or "
        "under this (default: half of max_replication_lag)...",
    )
    reader_return_after_s = models.PositiveIntegerField(default=10, help_text="...for this many seconds")
    offline_hard_grace_s = models.PositiveIntegerField(
        default=30, help_text="a broken node goes OFFLINE_SOFT at once, OFFLINE_HARD after this grace period"
    )
    auto_failover_enabled = models.BooleanField(default=False)
    failover_after_polls = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1)],
        help_text="consecutive backend polls with the writer unreachable or non-Primary before failing over, the "
        "last one confirmed at once by a direct re-probe of the writer; a writer that only stops "
        "answering (timeouts) needs one poll more",
    )
    failback_enabled = models.BooleanField(default=False)
    failback_after_s = models.PositiveIntegerField(
        default=300, help_text="the preferred writer must stay Synced this long"
    )
    preferred_writer = models.ForeignKey("Server", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    plan_validity_s = models.PositiveIntegerField(
        default=10,
        validators=[MinValueValidator(1)],
        help_text="a confirmed plan that has not started within this many seconds expires (its guards are stale)",
    )
    two_person_rule = models.BooleanField(
        default=False, help_text="an operation must be confirmed by someone other than the person who planned it"
    )

    config_confirm_role = models.CharField(
        max_length=10,
        choices=[("operator", "operators"), ("admin", "admins only")],
        default="operator",
        help_text="who may confirm a configuration change set on this cluster",
    )
    # ProxySQL Cluster (native sync) on the nodes: see operations/sync_hold.py. The hold is the default: measured,
    # it costs two 2-3 ms steps; propagating costs a 2-3 s wait (docs/benchmarks.md, "The default, and why").
    cluster_sync_mode = models.CharField(
        max_length=10,
        choices=ClusterSyncMode.choices,
        default=ClusterSyncMode.HOLD,
        help_text="nodes that sync a module a plan loads: hold the sync and write every node (a switchover, a "
        "failover, the read-pool rules and a repair always do), or write one node and wait for its peers "
        "to pull (change sets of one module, maintenance drains and restores)",
    )

    # Where stored credentials may go (credential_hosts.py): admins only (cluster page, API, Django admin; audited).
    credential_hosts = models.TextField(
        blank=True,
        validators=[validate_no_nul, validate_credential_hosts],
        help_text="hosts that may receive this cluster's stored credentials (monitor, admin): addresses, networks "
        "(10.0.0.0/8) and name patterns (db-*.example.net), separated by spaces, commas or lines. Empty: "
        "the cluster's current backends and nodes and loopback only. Change sets adding a server "
        "elsewhere are refused and the pollers do not log in there.",
    )

    # TLS for every connection to this cluster's backends and ProxySQL admin ports (apps/clients/wire.py): admins only.
    tls_ca = models.TextField(
        blank=True,
        validators=[validate_tls_ca],
        help_text="the CA (PEM) that signed the backends' and ProxySQL admin ports' certificates: every connection is "
        "then TLS, or none is made. Empty: no TLS.",
    )
    tls_verify = models.BooleanField(
        default=True,
        help_text="with a CA: check each server's certificate and host name against it (off: TLS with "
        "any certificate, encrypted but not proved; the password-revealing plugins stay "
        "refused)",
    )

    # What ProxySQL's own galera/replication/group-replication hostgroups say, as last read at adopt.
    native_hostgroups = models.JSONField(default=list, blank=True)
    # Natively managed: ProxySQL's Monitor moves the servers of these hostgroups at runtime (set at adoption from
    # the active manager row on the cluster's hostgroups). Drift folds its placement back (fleet/native.py).
    native_manager = models.CharField(
        max_length=20, choices=NativeManager.choices, default=NativeManager.NONE, blank=True
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    def get_absolute_url(self):
        return reverse("pages:cluster", args=[self.pk])

    def clean(self):
        ids = [
            ("writer", self.writer_hostgroup),
            ("reader", self.reader_hostgroup),
            ("backup writer", self.backup_writer_hostgroup),
            ("offline", self.offline_hostgroup),
        ]
        seen = {}
        for role, hg in ids:
            if hg is None:
                continue
            if hg in seen:
                raise ValidationError(f"The {role} hostgroup ({hg}) is the same as the {seen[hg]} hostgroup.")
            seen[hg] = role

    def client_tls(self):
        """The TLS keywords of the network clients (BackendClient, ProxySQLAdmin) for this cluster's servers."""
        return {"tls_ca": self.tls_ca or None, "tls_verify": self.tls_verify}

    def hostgroup_roles(self):
        """{hostgroup_id: role} for this cluster's hostgroups."""
        roles = {self.writer_hostgroup: HostgroupRole.WRITER, self.reader_hostgroup: HostgroupRole.READER}
        if self.backup_writer_hostgroup is not None:
            roles[self.backup_writer_hostgroup] = HostgroupRole.BACKUP_WRITER
        if self.offline_hostgroup is not None:
            roles[self.offline_hostgroup] = HostgroupRole.OFFLINE
        return roles

    @property
    def return_mark(self):
        return self.reader_return_mark if self.reader_return_mark is not None else self.max_replication_lag // 2

    def hostgroup_ids(self):
        """Every hostgroup this cluster owns on a ProxySQL node: its roles and the inventory's rows. On a node
        shared with other clusters, only rows in these hostgroups are this cluster's to compare or change."""
        ids = set(self.hostgroup_roles())
        ids |= set(HostgroupMembership.objects.filter(server__cluster=self).values_list("hostgroup_id", flat=True))
        return ids

    def managed_hostgroups(self):
        """The hostgroups ProxySQL's own active manager places (empty when the cluster is not natively managed)."""
        return managed_hostgroups(self.active_native_hostgroups()) if self.native_manager else set()

    def active_native_hostgroups(self):
        """Native ProxySQL hostgroup managers that are active on these hostgroups (we must not fight them)."""
        mine = set(self.hostgroup_roles())
        return [
            n
            for n in self.native_hostgroups
            if n.get("active")
            and mine
            & {
                n.get(k)
                for k in ("writer_hostgroup", "reader_hostgroup", "backup_writer_hostgroup", "offline_hostgroup")
            }
        ]


class ClusterTag(models.Model):
    """A free key=value label of a cluster (environment, region, team...), for the fleet page's and the API's
    filters and the search (apps/fleet/tags.py checks them)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="tags")
    key = models.CharField(max_length=40)
    value = models.CharField(max_length=100)

    class Meta:
        ordering = ["key"]
        constraints = [models.UniqueConstraint(fields=["cluster", "key"], name="one_value_per_tag_key")]
        indexes = [models.Index(fields=["key", "value"], name="cluster_tag_key_value")]

    def __str__(self):
        return f"{self.key}={self.value}"


class ProxySQLNode(models.Model):
    """One ProxySQL instance's admin endpoint as one cluster sees it. Several nodes front one cluster; one
    ProxySQL may front several clusters: then it has one row per cluster, all with the same admin endpoint
    (shares_with()), and each cluster compares and changes only the rows of its own hostgroups."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="proxysql_nodes")
    name = models.CharField(max_length=200, validators=[validate_no_nul])
    admin_host = models.CharField(max_length=255, validators=[validate_hostname])
    admin_port = models.PositiveIntegerField(default=6032, validators=port_validators)
    admin_user = models.CharField(max_length=80, validators=[validate_no_nul])
    admin_password = EncryptedTextField(blank=True)
    comment = models.TextField(blank=True, validators=[validate_no_nul])
    version = models.CharField(max_length=100, blank=True)
    peers = models.JSONField(default=list, blank=True, help_text="runtime_proxysql_servers as last read")
    adopted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [
            models.UniqueConstraint(
                fields=["cluster", "admin_host", "admin_port"], name="unique_admin_endpoint_per_cluster"
            ),
            models.UniqueConstraint(fields=["cluster", "name"], name="unique_node_name_per_cluster"),
        ]
        # The poll shards find a ProxySQL's rows by endpoint on every tick (monitoring.pollers).
        indexes = [models.Index(fields=["admin_host", "admin_port"], name="proxysql_node_endpoint")]

    def __str__(self):
        return f"{self.name} ({self.admin_host}:{self.admin_port})"

    def get_absolute_url(self):
        return reverse("pages:proxysql_node", args=[self.pk])

    @property
    def endpoint(self):
        """The ProxySQL instance's identity: the same admin host and port is the same ProxySQL."""
        return endpoint_key(self.admin_host, self.admin_port)

    def shares_with(self):
        """The rows of the same ProxySQL in other clusters (empty: this ProxySQL serves one cluster)."""
        return (
            ProxySQLNode.objects.filter(admin_host__iexact=self.admin_host, admin_port=self.admin_port)
            .exclude(pk=self.pk)
            .select_related("cluster")
        )

    def clusters_served(self):
        """Every cluster this ProxySQL serves, this row's first."""
        return [self.cluster] + [n.cluster for n in self.shares_with()]


def endpoint_key(host, port):
    return f"{host.lower()}:{int(port)}"


def clusters_served_by(nodes):
    """{node id: [{"cluster": id, "name": cluster name, "node": that cluster's node row id}, ...]} for node rows
    given as dicts (id, cluster, admin_host, admin_port): every cluster each one's ProxySQL serves, the row's own
    cluster first, then by name. One query for a page of nodes."""
    endpoints = {endpoint_key(n["admin_host"], n["admin_port"]) for n in nodes}
    by_endpoint = {}
    for pk, host, port, cluster_id, name in (
        ProxySQLNode.objects.filter(
            admin_host__in={n["admin_host"] for n in nodes}, admin_port__in={n["admin_port"] for n in nodes}
        )
        .order_by("cluster__name", "pk")
        .values_list("pk", "admin_host", "admin_port", "cluster_id", "cluster__name")
    ):
        key = endpoint_key(host, port)
        if key in endpoints:
            by_endpoint.setdefault(key, []).append({"cluster": cluster_id, "name": name, "node": pk})
    out = {}
    for n in nodes:
        served = by_endpoint.get(endpoint_key(n["admin_host"], n["admin_port"]), [])
        out[n["id"]] = sorted(served, key=lambda s: s["node"] != n["id"])
    return out


class Server(models.Model):
    """A backend MySQL/MariaDB node. One row per node, whatever its hostgroups."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="servers")
    hostname = models.CharField(max_length=255, validators=[validate_hostname])
    port = models.PositiveIntegerField(default=3306, validators=port_validators)
    # Set by a maintenance drain, cleared by its restore; automatic rules leave such a server alone.
    maintenance = models.BooleanField(default=False)
    maintenance_note = models.TextField(blank=True, validators=[validate_no_nul])

    class Meta:
        ordering = ["hostname", "port"]
        constraints = [models.UniqueConstraint(fields=["hostname", "port"], name="unique_backend_endpoint")]

    def __str__(self):
        return f"{self.hostname}:{self.port}"

    def get_absolute_url(self):
        return reverse("pages:server", args=[self.pk])


class HostgroupMembership(models.Model):
    """One intended row of mysql_servers: a server in a hostgroup with its settings. A read model of the cluster's
    latest configuration version (the one record of intent), written only with it (configuration.services
    .record_version); never edit it to change intent."""

    server = models.ForeignKey(Server, on_delete=models.CASCADE, related_name="memberships")
    hostgroup_id = models.PositiveIntegerField(validators=hostgroup_validators)
    status = models.CharField(max_length=12, choices=ServerStatus.choices, default=ServerStatus.ONLINE)
    weight = models.PositiveIntegerField(default=1, validators=[MaxValueValidator(10_000_000)])
    max_connections = models.PositiveIntegerField(default=1000, validators=[MaxValueValidator(HOSTGROUP_MAX)])
    max_replication_lag = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(126_144_000)])
    compression = models.PositiveSmallIntegerField(default=0, choices=[(0, "0"), (1, "1")])
    use_ssl = models.PositiveSmallIntegerField(default=0, choices=[(0, "0"), (1, "1")])
    max_latency_ms = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(HOSTGROUP_MAX)])
    gtid_port = models.PositiveIntegerField(default=0, validators=[MaxValueValidator(65535)])
    comment = models.TextField(blank=True, validators=[validate_no_nul])

    class Meta:
        ordering = ["hostgroup_id", "server__hostname", "server__port"]
        constraints = [models.UniqueConstraint(fields=["server", "hostgroup_id"], name="unique_server_hostgroup")]

    def __str__(self):
        return f"hg {self.hostgroup_id} {self.server}"

    def clean(self):
        if self.status == ServerStatus.SHUNNED:
            raise ValidationError({"status": "SHUNNED is set by ProxySQL itself; choose ONLINE or OFFLINE_*."})

    @property
    def key(self):
        return (self.hostgroup_id, self.server.hostname, self.server.port)


class MirrorRule(models.Model):
    """The mirror-related columns of a mysql_query_rules row on one ProxySQL node, as last read."""

    proxysql_node = models.ForeignKey(ProxySQLNode, on_delete=models.CASCADE, related_name="mirror_rules")
    rule_id = models.PositiveIntegerField()
    active = models.BooleanField(default=True)
    match_digest = models.TextField(blank=True)
    match_pattern = models.TextField(blank=True)
    destination_hostgroup = models.PositiveIntegerField(null=True, blank=True)
    mirror_hostgroup = models.PositiveIntegerField(null=True, blank=True)
    mirror_flag_out = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["proxysql_node", "rule_id"]
        constraints = [models.UniqueConstraint(fields=["proxysql_node", "rule_id"], name="unique_rule_per_node")]
