"""What the API answers (output) and what it takes (input). Output serializers only pick fields: the
figures come from the selectors the pages use. Input serializers check types and ranges and name the field
on a 400; the rules (guards, roles, the two-person rule...) stay in the services."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from apps.alerts.catalogue import BY_KEY as ALERT_RULES
from apps.alerts.catalogue import SEVERITIES
from apps.alerts.models import Alert, AlertState, Channel, ChannelKind, Silence
from apps.audit.models import AuditEvent, Outcome
from apps.configuration.models import ChangeSet, ConfigVersion
from apps.dr.models import ChannelCandidate, ChannelSample, ReplicationChannel
from apps.fleet import tags as fleet_tags
from apps.fleet.choices import ClusterKind
from apps.fleet.models import HOSTGROUP_MAX, Cluster, HostgroupMembership, ProxySQLNode, Server, clusters_served_by
from apps.monitoring import charts
from apps.plans import registry
from apps.operations.choices import OnDrainTimeout, OperationState
from apps.operations.forms import DRAIN_TIMEOUT_MAX_MS, DRAIN_TIMEOUT_MIN_MS
from apps.operations.models import Operation, OperationStep
from apps.operations.rule_settings import FIELDS as RULE_FIELDS
from apps.reports.choices import Period
from apps.reports.models import Report, ReportSchedule
from apps.configuration import content as C
from apps.configuration.change_set import diff_lines
from apps.configuration.services import MAX_EDITS, target_of
from apps.configuration import edits

from .base import IdField, ServerRefField


def text(max_length, **kwargs):
    """Free text: no NUL (the databases and ProxySQL refuse it), bounded."""
    return serializers.RegexField(
        r"^[^\x00]*$", max_length=max_length, error_messages={"invalid": "NUL characters are not allowed."}, **kwargs
    )


# -- the inventory ---------------------------------------------------------------------------------------
# A model as the API answers it, never as input: every field read-only, and so no input ranges in the schema
# (a model's integer ranges come from the database in use; the schema must not). No docstring: the schema would
# give it to every answer as its description.
class Answer(serializers.ModelSerializer):
    def get_extra_kwargs(self):
        extra = super().get_extra_kwargs()
        for name in self.Meta.fields:
            extra[name] = {**extra.get(name, {}), "read_only": True}
        return extra


def values_of(serializer_class, exclude=()):
    """The model fields a model serializer shows, for queryset.values() in the long lists."""
    return [f for f in serializer_class.Meta.fields if f not in exclude]


class ClusterSerializer(Answer):
    tags = serializers.SerializerMethodField(help_text="free key=value labels (environment, region, team...)")

    def get_tags(self, cluster) -> dict[str, str]:
        return fleet_tags.of(cluster)

    class Meta:
        model = Cluster
        fields = [
            "id",
            "name",
            "kind",
            "description",
            "writer_hostgroup",
            "reader_hostgroup",
            "backup_writer_hostgroup",
            "offline_hostgroup",
            "writer_is_also_reader",
            "max_replication_lag",
            "min_available_readers",
            "drain_timeout_ms",
            "poll_interval_s",
            "backend_poll_interval_s",
            "read_pool_rules_enabled",
            "rules_dry_run",
            "auto_failover_enabled",
            "failover_after_polls",
            "failback_enabled",
            "failback_after_s",
            "preferred_writer",
            "plan_validity_s",
            "two_person_rule",
            "config_confirm_role",
            "cluster_sync_mode",
            "native_hostgroups",
            "native_manager",
            "created_at",
            "updated_at",
            "tags",
        ]


class MembershipSerializer(Answer):
    class Meta:
        model = HostgroupMembership
        fields = [
            "hostgroup_id",
            "status",
            "weight",
            "max_connections",
            "max_replication_lag",
            "compression",
            "use_ssl",
            "max_latency_ms",
            "gtid_port",
            "comment",
        ]


class MemberSerializer(MembershipSerializer):
    server = serializers.IntegerField(source="server_id")
    hostname = serializers.CharField(source="server.hostname")
    port = serializers.IntegerField(source="server.port")

    class Meta(MembershipSerializer.Meta):
        fields = ["server", "hostname", "port", *MembershipSerializer.Meta.fields]


class HostgroupSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    role = serializers.CharField()
    members = MemberSerializer(many=True)


class ServerSerializer(Answer):
    memberships = MembershipSerializer(many=True)

    class Meta:
        model = Server
        fields = ["id", "cluster", "hostname", "port", "maintenance", "maintenance_note", "memberships"]


class ServedClusterSerializer(serializers.Serializer):
    cluster = serializers.IntegerField()
    name = serializers.CharField()
    node = serializers.IntegerField(help_text="the ProxySQL's node row in that cluster")


class ProxySQLNodeSerializer(Answer):
    clusters_served = serializers.SerializerMethodField(
        help_text="every cluster this ProxySQL serves, this node's first: more than one when the ProxySQL is shared "
        "(its global figures and mirror are then node-wide; each cluster has its own node row)"
    )

    class Meta:
        model = ProxySQLNode
        fields = [
            "id",
            "cluster",
            "name",
            "admin_host",
            "admin_port",
            "admin_user",
            "comment",
            "version",
            "peers",
            "adopted_at",
            "clusters_served",
        ]

    @extend_schema_field(ServedClusterSerializer(many=True))
    def get_clusters_served(self, node):
        return clusters_served_by(
            [{"id": node.pk, "cluster": node.cluster_id, "admin_host": node.admin_host, "admin_port": node.admin_port}]
        )[node.pk]

    @staticmethod
    def rows(page):
        """The long list's rows (plain values): clusters_served for the whole page in one query."""
        served = clusters_served_by(page)
        return [{**row, "clusters_served": served[row["id"]]} for row in page]


class ClusterFilter(serializers.Serializer):
    kind = serializers.ChoiceField(choices=ClusterKind.choices, required=False)
    name = text(200, required=False)
    tag = text(200, required=False, help_text="only the clusters with this tag, as key:value (env:prod)")

    def validate_tag(self, value):
        try:
            return fleet_tags.parse_filter(value)
        except fleet_tags.BadTag as exc:
            raise serializers.ValidationError(str(exc)) from None


class InventoryFilter(serializers.Serializer):
    cluster = IdField(required=False)


class ServerFilter(InventoryFilter):
    hostname = text(255, required=False)
    port = serializers.IntegerField(min_value=1, max_value=65535, required=False)
    maintenance = serializers.BooleanField(required=False, allow_null=True, default=None)


# -- latest state and history ----------------------------------------------------------------------------
class LiveSerializer(serializers.Serializer):
    """A latest-state answer: how fresh it is, or why there is none ("unavailable" when Redis is down;
    the last stored poll stands in where one exists, with its time in `from_history`)."""

    unavailable = serializers.CharField(allow_blank=True, help_text="why live state cannot be read ('' when it can)")
    state = serializers.CharField(help_text="ok, stale, unreachable, never polled")
    age_s = serializers.FloatField(allow_null=True)
    error = serializers.CharField(allow_null=True)
    error_kind = serializers.CharField(allow_null=True)
    error_since = serializers.DateTimeField(allow_null=True)
    last_ok = serializers.DateTimeField(allow_null=True)
    from_history = serializers.DateTimeField(allow_null=True)


class PoolRowSerializer(serializers.Serializer):
    hostgroup = serializers.IntegerField()
    role = serializers.CharField()
    host = serializers.CharField()
    port = serializers.IntegerField()
    status = serializers.CharField(allow_null=True)
    conn_used = serializers.IntegerField(allow_null=True)
    conn_free = serializers.IntegerField(allow_null=True)
    queries_ps = serializers.FloatField(allow_null=True)
    latency_us = serializers.FloatField(allow_null=True)
    conn_err_ps = serializers.FloatField(allow_null=True)
    bytes_sent_ps = serializers.FloatField(allow_null=True)
    bytes_recv_ps = serializers.FloatField(allow_null=True)


class NodeStateSerializer(LiveSerializer):
    node = serializers.IntegerField()
    figures = serializers.DictField(help_text="global status figures of the last poll (rates per second)")
    pool = PoolRowSerializer(many=True)
    mirror = serializers.DictField(help_text="queue and concurrency against their limits")
    mirror_rules = serializers.ListField(child=serializers.DictField())


class BackendStateSerializer(LiveSerializer):
    server = serializers.IntegerField()
    label = serializers.CharField(allow_blank=True)
    wsrep = serializers.DictField()
    lag_seconds = serializers.FloatField(allow_null=True)
    problems = serializers.ListField(child=serializers.DictField())


class ClusterStateSerializer(serializers.Serializer):
    cluster = serializers.IntegerField()
    unavailable = serializers.CharField(allow_blank=True)
    nodes = serializers.ListField(child=serializers.DictField())
    hostgroups = serializers.ListField(child=serializers.DictField())
    backends = serializers.ListField(child=serializers.DictField())


class HistoryFilter(serializers.Serializer):
    range = serializers.ChoiceField(choices=list(charts.RANGES), default=charts.DEFAULT_RANGE)
    resolution = serializers.ChoiceField(
        choices=list(charts.RESOLUTIONS),
        default="auto",
        help_text="auto follows the range (raw up to 6 h, 1 min up to 7 d, 1 h beyond)",
    )


class SeriesSerializer(serializers.Serializer):
    label = serializers.CharField()
    style = serializers.CharField()
    values = serializers.ListField(child=serializers.FloatField(allow_null=True), help_text="null: a gap")


class HistorySerializer(serializers.Serializer):
    title = serializers.CharField()
    unit = serializers.CharField(allow_blank=True)
    range = serializers.CharField()
    resolution = serializers.IntegerField(help_text="seconds per stored sample: 0 raw, 60, 3600")
    bucket = serializers.IntegerField(help_text="seconds per point (0: one point per poll)")
    start = serializers.IntegerField(help_text="epoch milliseconds")
    end = serializers.IntegerField(help_text="epoch milliseconds")
    t = serializers.ListField(child=serializers.IntegerField(), help_text="epoch milliseconds of each point")
    series = SeriesSerializer(many=True)


# -- digests ---------------------------------------------------------------------------------------------
class DigestFilter(serializers.Serializer):
    window = serializers.ChoiceField(choices=["5m", "1h", "24h", "custom"], default="1h")
    start = serializers.DateTimeField(required=False, help_text="window=custom: from (ISO 8601, UTC if no zone)")
    end = serializers.DateTimeField(required=False, help_text="window=custom: to (default now)")
    cluster = IdField(required=False)
    node = IdField(required=False)
    hostgroup = serializers.IntegerField(min_value=0, max_value=HOSTGROUP_MAX, required=False)
    user = text(80, required=False)
    schema = text(64, required=False)
    q = text(200, required=False, help_text="text the digest contains, or its 0x... hash")
    sort = serializers.ChoiceField(choices=["total", "count", "avg", "max"], default="total")
    dir = serializers.ChoiceField(choices=["desc", "asc"], default="desc")
    page = serializers.IntegerField(min_value=1, max_value=1_000_000, default=1)
    page_size = serializers.IntegerField(min_value=1, max_value=500, default=50)

    def validate(self, data):
        if data["window"] == "custom" and not data.get("start"):
            raise serializers.ValidationError({"start": ["window=custom needs a start."]})
        if data.get("start") and data.get("end") and data["start"] >= data["end"]:
            raise serializers.ValidationError({"end": ["must be after start."]})
        return data


class DigestRowSerializer(serializers.Serializer):
    id = serializers.IntegerField(source="digest_id")
    digest = serializers.CharField()
    text = serializers.CharField()
    count = serializers.IntegerField()
    total_us = serializers.IntegerField()
    avg_us = serializers.FloatField(allow_null=True)
    max_us = serializers.IntegerField(allow_null=True)
    min_us = serializers.IntegerField(allow_null=True)
    mirrored_count = serializers.IntegerField(
        help_text="executions of mirrored copies in a mirror hostgroup: not in count, total_us nor max_us"
    )
    unmeasured_count = serializers.IntegerField(
        help_text="of count: executions in a mirror hostgroup whose mirror"
        " rule's pattern the poll could not run (PCRE's match limit, or its"
        " search budget): whether they are copies is not measured"
    )
    where = serializers.DictField(help_text="hostgroups, user@schema and the number of nodes it ran on")


class WindowSerializer(serializers.Serializer):
    start = serializers.IntegerField(help_text="epoch seconds")
    end = serializers.IntegerField(help_text="epoch seconds")
    snapped = serializers.BooleanField(help_text="the edges were widened to the buckets still kept")


class DigestPageSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    page = serializers.IntegerField()
    pages = serializers.IntegerField()
    window = WindowSerializer()
    mirror_note = serializers.CharField(
        help_text="why some rows' unmeasured_count is not 0, as the page says it; empty when every copy was told apart"
    )
    results = DigestRowSerializer(many=True)


class DigestDetailSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    digest = serializers.CharField()
    text = serializers.CharField()
    window = WindowSerializer()
    breakdown = serializers.ListField(child=serializers.DictField())


class DigestHistorySerializer(serializers.Serializer):
    bucket_s = serializers.IntegerField()
    start = serializers.IntegerField()
    end = serializers.IntegerField()
    points = serializers.ListField(child=serializers.DictField())
    partial = serializers.IntegerField()
    nodes = serializers.IntegerField()


# -- operations ------------------------------------------------------------------------------------------
class StepSerializer(Answer):
    class Meta:
        model = OperationStep
        fields = ["index", "key", "title", "state", "started_at", "finished_at", "duration_ms", "executed", "detail"]


class GuardSerializer(serializers.Serializer):
    key = serializers.CharField()
    label = serializers.CharField()
    passed = serializers.BooleanField()
    value = serializers.CharField(allow_blank=True)
    overridable = serializers.BooleanField(help_text="an admin may confirm despite it, with a reason")


class PlanStepSerializer(serializers.Serializer):
    key = serializers.CharField()
    title = serializers.CharField()
    kind = serializers.CharField()
    nodes = serializers.DictField(help_text="per ProxySQL node id: {name, sql: [...], rollback: [...]}")
    params = serializers.DictField()
    point_of_no_return = serializers.BooleanField()


class PlanSerializer(serializers.Serializer):
    kind = serializers.CharField()
    title = serializers.CharField()
    guards = GuardSerializer(many=True)
    steps = PlanStepSerializer(many=True)
    facts = serializers.DictField()
    options = serializers.DictField()


class OperationSerializer(Answer):
    kind = serializers.ChoiceField(
        choices=registry.choices(), read_only=True
    )  # Operation.kind: a registered kind (no model choices)
    planned_by = serializers.CharField(source="actor")
    confirmed_by = serializers.CharField(source="confirmer")
    finished = serializers.BooleanField()
    duration_ms = serializers.FloatField(allow_null=True)

    class Meta:
        model = Operation
        fields = [
            "id",
            "cluster",
            "kind",
            "state",
            "title",
            "planned_by",
            "created_at",
            "confirmed_by",
            "confirmed_at",
            "override_reason",
            "started_at",
            "finished_at",
            "finished",
            "duration_ms",
            "cancel_requested",
            "point_of_no_return",
            "error",
            "timings",
        ]


class OperationDetailSerializer(OperationSerializer):
    plan = PlanSerializer(help_text="exactly as previewed: guards with their values, SQL and rollback per node")
    steps = StepSerializer(many=True, help_text="what ran, step by step (empty until confirmed)")
    pending_rollbacks = serializers.SerializerMethodField(
        help_text="per ProxySQL node, the statements it has not taken (or took on retry): finish_or_rollback says "
        "whether they are the operation's rollback (state rollback_pending) or its rest past the point of "
        "no return (state finish_pending: done on the other nodes)"
    )

    class Meta(OperationSerializer.Meta):
        fields = [*OperationSerializer.Meta.fields, "plan", "steps", "pending_rollbacks"]

    def get_pending_rollbacks(self, op) -> list[dict]:
        return [
            {
                "node": p.node_id,
                "node_name": p.node.name,
                "finish_or_rollback": op.finish_or_rollback,
                "state": p.state,
                "statements": p.statements,
                "attempts": p.attempts,
                "last_error": p.last_error,
                "next_try_at": p.next_try_at,
                "resolution": p.resolution,
            }
            for p in op.pending_rollbacks.select_related("node")
        ]


class OperationFilter(serializers.Serializer):
    cluster = IdField(required=False)
    state = serializers.ChoiceField(choices=OperationState.choices, required=False)
    kind = serializers.ChoiceField(choices=registry.choices(), required=False)  # the kinds registered at start


class SwitchoverInput(serializers.Serializer):
    new_writer = ServerRefField(help_text="the backend that becomes the writer: its id or HOST:PORT")
    drain_timeout_ms = serializers.IntegerField(
        min_value=DRAIN_TIMEOUT_MIN_MS,
        max_value=DRAIN_TIMEOUT_MAX_MS,
        required=False,
        help_text="default: the cluster's",
    )
    on_timeout = serializers.ChoiceField(choices=OnDrainTimeout.choices, default=OnDrainTimeout.ROLLBACK)
    lower_autoinc = serializers.BooleanField(
        default=None,
        allow_null=True,
        help_text="lower mysql-auto_increment_delay_multiplex to 0 during the drain "
        "(restored after); default (null): when sessions are pinned by auto-increment tokens, the plan says why",
    )
    old_writer_to = serializers.ChoiceField(choices=["reader", "offline"], default="reader")


class DrainInput(serializers.Serializer):
    drain_timeout_ms = serializers.IntegerField(
        min_value=DRAIN_TIMEOUT_MIN_MS,
        max_value=DRAIN_TIMEOUT_MAX_MS,
        required=False,
        help_text="default: the cluster's",
    )
    on_timeout = serializers.ChoiceField(choices=OnDrainTimeout.choices, default=OnDrainTimeout.ROLLBACK)
    note = text(2000, required=False, allow_blank=True, default="")


class FailoverInput(serializers.Serializer):
    new_writer = ServerRefField(
        help_text="the backend that takes the writer's place at once (no drain): its id or HOST:PORT"
    )


class RepairInput(serializers.Serializer):
    node = IdField(required=False, allow_null=True, default=None, help_text="one ProxySQL node (id); default: all")


class ConfirmInput(serializers.Serializer):
    override_reason = text(
        2000,
        required=False,
        allow_blank=True,
        default="",
        help_text="admins only: why failed (overridable) guards may be ignored",
    )


# -- DR channels -----------------------------------------------------------------------------------------
class ChannelCandidateSerializer(Answer):
    class Meta:
        model = ChannelCandidate
        fields = ["side", "server", "weight"]


class ChannelStateSerializer(serializers.Serializer):
    state = serializers.CharField(
        allow_null=True, help_text="running, connecting, stopped, error, unreachable, misdirected; null: never polled"
    )
    age_s = serializers.FloatField(allow_null=True, help_text="seconds since the poll")
    stale = serializers.BooleanField(help_text="no poll for three of the replica cluster's backend intervals")
    from_history = serializers.BooleanField(help_text="Redis is down: the last stored poll")
    lag_seconds = serializers.FloatField(allow_null=True, help_text="Seconds_Behind_Master")
    lag_high = serializers.BooleanField(allow_null=True, help_text="above the channel's max_lag_s")
    behind_trx = serializers.IntegerField(
        allow_null=True, help_text="transactions of the source's GTID domain not applied yet"
    )
    io_running = serializers.CharField(allow_null=True)
    sql_running = serializers.CharField(allow_null=True)
    last_io_error = serializers.CharField(allow_null=True)
    last_sql_error = serializers.CharField(allow_null=True)
    gtid_slave_pos = serializers.CharField(allow_null=True)
    source_binlog_pos = serializers.CharField(allow_null=True)
    failing_polls = serializers.DictField(
        child=serializers.IntegerField(),
        allow_null=True,
        help_text="consecutive polls with the source / replica end failing",
    )


class ChannelSerializer(Answer):
    candidates = ChannelCandidateSerializer(many=True)
    latest = ChannelStateSerializer(help_text="the latest poll (Redis), or the last stored one when Redis is down")

    class Meta:
        model = ReplicationChannel
        fields = [
            "id",
            "name",
            "source_cluster",
            "replica_cluster",
            "source_server",
            "replica_server",
            "replication_user",
            "max_lag_s",
            "auto_failover_enabled",
            "failover_after_polls",
            "failback_enabled",
            "failback_after_s",
            "preferred_source",
            "candidates",
            "latest",
            "updated_at",
        ]


class ChannelSampleSerializer(Answer):
    class Meta:
        model = ChannelSample
        fields = [
            "ts",
            "resolution",
            "source_server",
            "replica_server",
            "reachable",
            "io_running",
            "sql_running",
            "lag_seconds",
            "source_seq",
            "applied_seq",
        ]


class ChannelDetailSerializer(ChannelSerializer):
    history = ChannelSampleSerializer(many=True, help_text="the newest raw polls, newest first (at most 100)")
    moves = OperationSerializer(many=True, help_text="the channel's moves, newest first (at most 20)")

    class Meta(ChannelSerializer.Meta):
        fields = ChannelSerializer.Meta.fields + ["history", "moves"]


class ChannelFilter(serializers.Serializer):
    cluster = IdField(required=False, help_text="channels leaving or entering this cluster")


class ChannelMoveInput(serializers.Serializer):
    new_source = IdField(
        required=False,
        allow_null=True,
        default=None,
        help_text="a server (id) of the source cluster the channel reads from next",
    )
    new_replica = IdField(
        required=False,
        allow_null=True,
        default=None,
        help_text="a server (id) of the replica cluster that runs the channel next",
    )

    def validate(self, data):
        if data["new_source"] is None and data["new_replica"] is None:
            raise serializers.ValidationError("Give new_source, new_replica, or both.")
        return data


# -- audit -----------------------------------------------------------------------------------------------
class AuditEventSerializer(Answer):
    class Meta:
        model = AuditEvent
        fields = [
            "id",
            "created_at",
            "actor",
            "actor_kind",
            "source_address",
            "cluster_id",
            "cluster_name",
            "target",
            "action",
            "outcome",
            "duration_ms",
            "details",
            "prev_hash",
            "hash",
        ]


class AuditCursor(serializers.Serializer):
    before = IdField(required=False, help_text="cursor: the page older than this event (from `next`)")
    after = IdField(required=False, help_text="cursor: the page newer than this event (from `previous`)")
    page_size = serializers.IntegerField(min_value=1, max_value=500, default=50)


class AuditFilter(AuditCursor):
    """The review page's filters (its form, apps/audit/forms.py, checks them), and the cursor."""

    range = serializers.ChoiceField(choices=["1h", "24h", "7d", "30d"], required=False)
    start = serializers.CharField(required=False, help_text="UTC, YYYY-MM-DDTHH:MM[:SS]")
    end = serializers.CharField(required=False)
    actor = serializers.CharField(required=False)
    cluster = serializers.CharField(required=False)
    target = serializers.CharField(required=False)
    action = serializers.CharField(required=False)
    outcome = serializers.ChoiceField(choices=Outcome.choices, required=False)
    q = serializers.CharField(required=False, help_text="words in any field or the details")


class AuditPageSerializer(serializers.Serializer):
    next = serializers.URLField(allow_null=True, help_text="the older page")
    previous = serializers.URLField(allow_null=True, help_text="the newer page")
    results = AuditEventSerializer(many=True)


# -- reports ---------------------------------------------------------------------------------------------
class ReportSerializer(Answer):
    title = serializers.SerializerMethodField()

    def get_title(self, report) -> str:
        if hasattr(report, "data_title"):  # the list: read in the query, the data left out
            return report.data_title or f"{report.get_period_display()} report of {report.scope_name}"
        return report.title

    class Meta:
        model = Report
        fields = [
            "id",
            "title",
            "scope",
            "cluster",
            "scope_name",
            "period",
            "start",
            "end",
            "built_at",
            "built_by",
            "build_ms",
            "headline",
            "emailed_to",
            "emailed_at",
            "email_error",
        ]


class ReportDetailSerializer(ReportSerializer):
    class Meta(ReportSerializer.Meta):
        fields = [*ReportSerializer.Meta.fields, "data"]


class ReportFilter(serializers.Serializer):
    cluster = IdField(required=False)
    period = serializers.ChoiceField(choices=Period.choices, required=False)


# -- configuration ---------------------------------------------------------------------------------------
class VersionSerializer(Answer):
    parent = serializers.IntegerField(source="parent.number", allow_null=True, default=None)

    class Meta:
        model = ConfigVersion
        fields = ["id", "cluster", "number", "parent", "author", "reason", "created_at", "operation", "source"]


class VersionDetailSerializer(VersionSerializer):
    content = serializers.JSONField(help_text="the configuration; a password is {secret: ref}, never its value")

    class Meta(VersionSerializer.Meta):
        fields = [*VersionSerializer.Meta.fields, "content"]


class DiffLineSerializer(serializers.Serializer):
    table = serializers.CharField()
    key = serializers.ListField(child=serializers.JSONField())
    change = serializers.CharField()
    fields = serializers.ListField(child=serializers.DictField())
    row = serializers.DictField()


class DiffSerializer(serializers.Serializer):
    a = serializers.IntegerField()
    b = serializers.IntegerField()
    empty = serializers.BooleanField()
    lines = DiffLineSerializer(many=True)


class DiffFilter(serializers.Serializer):
    a = serializers.IntegerField(min_value=1, max_value=2**31 - 1, help_text="version number")
    b = serializers.IntegerField(min_value=1, max_value=2**31 - 1, help_text="version number")


class ChangeSetFilter(serializers.Serializer):
    state = serializers.MultipleChoiceField(
        choices=ChangeSet.State.choices,
        required=False,
        help_text="only change sets in these states (repeat the parameter for several)",
    )


class ChangeSetSerializer(Answer):
    base = serializers.IntegerField(source="base.number")
    result = serializers.IntegerField(source="result.number", allow_null=True, default=None)
    author = serializers.CharField(source="author_name")

    class Meta:
        model = ChangeSet
        fields = [
            "id",
            "cluster",
            "base",
            "author",
            "reason",
            "source",
            "state",
            "operation",
            "result",
            "nodes",
            "created_at",
            "updated_at",
        ]


class ChangeSetDetailSerializer(ChangeSetSerializer):
    edits = serializers.SerializerMethodField()
    diff = serializers.SerializerMethodField()

    class Meta(ChangeSetSerializer.Meta):
        fields = [*ChangeSetSerializer.Meta.fields, "edits", "diff"]

    def get_edits(self, cs) -> list[dict]:
        return [{"describe": C.describe(e), "edit": e} for e in cs.edits]  # passwords are refs: {"secret": ...}

    def get_diff(self, cs) -> list[dict]:
        try:
            return diff_lines(C.diff(cs.base.content, target_of(cs)))
        except C.EditError as exc:
            return [{"error": str(exc)}]


class EditSerializer(serializers.Serializer):
    """One edit, as the change set editor makes it (apps/configuration/content.py applies and checks it)."""

    op = serializers.ChoiceField(choices=["upsert", "delete", "set", "roles"])
    table = serializers.CharField(required=False, max_length=100)
    row = serializers.DictField(
        required=False,
        help_text="upsert: every column you set; mysql_users.password in clear text is stored encrypted, as its hash",
    )
    key = serializers.ListField(
        child=serializers.JSONField(),
        required=False,
        max_length=10,
        help_text="delete (or an upsert that moves a row): the row's key",
    )
    name = text(200, required=False, help_text="set/delete on global_variables: the variable")
    value = serializers.CharField(required=False, allow_blank=True, allow_null=True, max_length=10_000)
    roles = serializers.DictField(
        child=serializers.IntegerField(min_value=0, max_value=HOSTGROUP_MAX, allow_null=True), required=False
    )

    def validate(self, data):
        try:
            return edits.shape(data)  # the one edit builder's checks (apps/configuration/edits.py)
        except edits.EditRefused as exc:
            raise serializers.ValidationError({f: [m] for f, m in exc.fields.items()}) from None


class TagsInput(serializers.Serializer):
    tags = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=1000),
        help_text="every tag the cluster keeps, {key: value} (e.g. env: prod); {} removes all",
    )


class NativeManagerInput(serializers.Serializer):
    native_manager = serializers.CharField(
        allow_blank=True,
        trim_whitespace=False,
        max_length=40,
        help_text="'' (this product places the servers), 'galera', 'replication' or "
        "'group_replication' (ProxySQL's Monitor places them)",
    )
    reason = serializers.CharField(allow_blank=True, max_length=1000, help_text="why (audited); required")


class ConnectionsInput(serializers.Serializer):
    """Types only; the rules are the cluster page's form's (fleet.forms.ConnectionsForm). Name only what you set."""

    credential_hosts = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=20000,
        help_text="hosts that may receive the cluster's stored credentials: addresses, networks (10.0.0.0/8), name "
        "patterns (db-*.example.net), separated by spaces, commas or lines; empty: the cluster's own "
        "backends and nodes, and loopback",
    )
    tls_ca = serializers.CharField(
        required=False,
        allow_blank=True,
        trim_whitespace=False,
        max_length=70000,
        help_text="the CA (PEM) of the backends' and admin ports' certificates; empty: no TLS",
    )
    tls_verify = serializers.BooleanField(
        required=False, help_text="with a CA: verify certificates and host names against it (the default)"
    )


class ConnectionsSerializer(serializers.Serializer):
    credential_hosts = serializers.CharField()
    tls_ca = serializers.CharField()
    tls_verify = serializers.BooleanField()
    tls_ca_described = serializers.CharField(help_text="the CA's certificates: subject and SHA-256 fingerprint")


class ChangeSetInput(serializers.Serializer):
    # required by the service (a blank one: 400 on this field, the page's and the command line's message)
    reason = text(
        2000, required=False, allow_blank=True, default="", help_text="what it is for, for the people after you"
    )
    edits = EditSerializer(many=True, required=False, max_length=MAX_EDITS)
    file = serializers.CharField(
        required=False,
        max_length=5 * 1024 * 1024,
        trim_whitespace=False,
        help_text="instead of edits: a YAML file as exported (manage.py config export), "
        "applied as desired state against the current version",
    )
    expect_version = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=1,
        max_value=2**31 - 1,
        help_text="with a file: refuse (409) unless the cluster's current version is this one, an optimistic lock",
    )

    def validate(self, data):
        if bool(data.get("edits")) == bool(data.get("file")):
            raise serializers.ValidationError({"non_field_errors": ["Give either edits or a file (one of the two)."]})
        if data.get("expect_version") is not None and not data.get("file"):
            raise serializers.ValidationError({"expect_version": ["expect_version goes with a file."]})
        return data


class NothingToDoSerializer(serializers.Serializer):
    outcome = serializers.CharField(help_text='"nothing to do"')
    version = serializers.IntegerField(help_text="the current version, which the file equals")
    message = serializers.CharField()


class ReasonInput(serializers.Serializer):
    reason = text(2000, required=False, allow_blank=True, default="")


class RecordNodesReadingSerializer(serializers.Serializer):
    version = serializers.IntegerField(allow_null=True, help_text="the latest version the difference is read against")
    refusal = serializers.CharField(help_text="why the nodes' rows cannot be recorded now; empty when they can")
    lines = DiffLineSerializer(many=True, help_text="the latest version -> what every node runs")


class RecordNodesInput(serializers.Serializer):
    reason = text(2000, allow_blank=False, help_text="why the nodes' rows become intent (kept with the version)")
    version = serializers.IntegerField(
        min_value=1, max_value=2**31 - 1, help_text="the latest version the difference was read against (GET)"
    )


class RecordNodesAnswer(serializers.Serializer):
    version = VersionSerializer()
    lines = DiffLineSerializer(many=True, help_text="what the new version changed")


class WriteBackInput(ReasonInput):
    node = IdField(
        required=False,
        allow_null=True,
        default=None,
        help_text="one ProxySQL node (id); default: every node that differs",
    )


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.CharField(allow_null=True)
    authenticated_by = serializers.ChoiceField(choices=["token", "session"])
    token = serializers.DictField(allow_null=True)


# -- alerts ----------------------------------------------------------------------------------------------
class AlertSerializer(Answer):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True)

    class Meta:
        model = Alert
        fields = [
            "id",
            "rule",
            "cluster",
            "cluster_name",
            "subject",
            "subject_label",
            "node",
            "server",
            "hostgroup",
            "operation",
            "severity",
            "state",
            "summary",
            "value",
            "since",
            "fires_at",
            "fired_at",
            "resolved_at",
            "last_seen_at",
            "held",
            "hold_reason",
            "hold_operation",
            "was_held",
            "notified",
            "acked_at",
            "acked_by",
        ]


class AlertDetailSerializer(AlertSerializer):
    class Meta(AlertSerializer.Meta):
        fields = AlertSerializer.Meta.fields + ["ack_note", "details"]


class AlertFilter(serializers.Serializer):
    cluster = IdField(required=False)
    state = serializers.ChoiceField(
        choices=["open", "held", "all", *AlertState.values],
        required=False,
        help_text="open: pending or firing; pending: not held; held: held by planned work now, or "
        "resolved after a hold (the alerts page's meanings)",
    )
    severity = serializers.ChoiceField(choices=list(SEVERITIES), required=False)
    rule = serializers.ChoiceField(choices=sorted(ALERT_RULES), required=False)


class AcknowledgeInput(serializers.Serializer):
    note = text(2000, required=False, allow_blank=True, default="", help_text="what you are doing about it")


class SilenceSerializer(Answer):
    cluster_name = serializers.CharField(source="cluster.name", read_only=True, default=None)

    class Meta:
        model = Silence
        fields = [
            "id",
            "cluster",
            "cluster_name",
            "rule",
            "subject",
            "subject_label",
            "reason",
            "starts_at",
            "ends_at",
            "created_by",
            "created_at",
            "from_alert",
            "expired_by",
            "expired_at",
        ]


class SilenceFilter(serializers.Serializer):
    active = serializers.BooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="true: only the silences in force now (the page's Active); false: only those ended (its Ended)",
    )


class SilenceInput(serializers.Serializer):
    cluster = serializers.PrimaryKeyRelatedField(
        queryset=Cluster.objects.all(), required=False, allow_null=True, default=None, help_text="empty: every cluster"
    )
    rule = serializers.ChoiceField(
        choices=sorted(ALERT_RULES), required=False, allow_blank=True, default="", help_text="empty: every rule"
    )
    subject = text(200, required=False, allow_blank=True, default="", help_text="an alert's subject; empty: every one")
    minutes = serializers.IntegerField(min_value=1, max_value=10080, help_text="how long, from now (at most a week)")
    reason = text(2000, help_text="why (shown with the silence, audited)")

    def validate(self, data):
        if not data.get("cluster") and not data.get("rule") and not data.get("subject"):
            raise serializers.ValidationError(
                "Choose at least a cluster, a rule or a subject: a silence of everything everywhere is not allowed."
            )
        return data


# -- adoption --------------------------------------------------------------------------------------------
# Types only: the rules are the adopt form's (apps/fleet/forms.AdoptForm), which the endpoint runs on this input.
class AdoptInput(serializers.Serializer):
    admin_host = text(255, help_text="the ProxySQL admin endpoint's host")
    admin_port = serializers.IntegerField(default=6032)
    admin_user = text(80)
    admin_password = text(
        200,
        required=False,
        allow_blank=True,
        default="",
        write_only=True,
        help_text="never answered back, never stored outside the inventory's encrypted field",
    )
    node_name = text(200, help_text="the name of this ProxySQL node in the inventory")
    cluster = IdField(required=False, allow_null=True, default=None, help_text="an existing cluster (id), or:")
    new_cluster_name = text(200, required=False, allow_blank=True, default="", help_text="the name of a new cluster")
    kind = serializers.CharField(
        max_length=40,
        required=False,
        allow_blank=True,
        default="",
        help_text="a new cluster's kind; empty: inferred from the node",
    )
    writer_hostgroup = serializers.IntegerField(required=False, allow_null=True, default=None)
    reader_hostgroup = serializers.IntegerField(required=False, allow_null=True, default=None)
    backup_writer_hostgroup = serializers.IntegerField(required=False, allow_null=True, default=None)
    offline_hostgroup = serializers.IntegerField(required=False, allow_null=True, default=None)
    writer_is_also_reader = serializers.IntegerField(
        required=False, allow_null=True, default=None, help_text="0, 1 or 2; null: inferred from the layout"
    )
    hostgroups = serializers.ListField(
        child=serializers.IntegerField(),
        required=False,
        default=list,
        max_length=1000,
        help_text="for a ProxySQL fronting several clusters: this cluster's hostgroups",
    )
    overwrite = serializers.BooleanField(required=False, default=False)
    backend_hosts = serializers.ListField(
        child=serializers.CharField(max_length=300),
        required=False,
        default=list,
        max_length=1000,
        help_text='a new cluster: the node\'s backends ("host:port") that may receive its monitor credentials. The '
        "preview reads only these and loopback; after the confirm the others are not polled (the cluster's "
        "credential hosts leave them out) until an admin adds them. Give the confirm the same list",
    )


class AdoptConfirmInput(AdoptInput):
    fingerprint = serializers.RegexField(
        r"^[0-9a-f]{64}$", help_text="the preview's fingerprint: the node must not have changed since"
    )


class AdoptionPlanSerializer(serializers.Serializer):
    ok = serializers.BooleanField(help_text="false: `errors` say why it cannot be confirmed")
    unconfirmed_backends = serializers.ListField(
        child=serializers.CharField(),
        help_text='a new cluster\'s backends ("host:port") neither confirmed '
        "(backend_hosts) nor loopback: not read, and not polled after the "
        "confirm",
    )
    fingerprint = serializers.CharField()
    cluster_name = serializers.CharField()
    cluster_exists = serializers.BooleanField()
    kind = serializers.CharField()
    roles = serializers.DictField(child=serializers.IntegerField(allow_null=True))
    writer_is_also_reader = serializers.IntegerField()
    reasons = serializers.ListField(child=serializers.DictField(), help_text="how each role was decided")
    node_name = serializers.CharField()
    admin_host = serializers.CharField()
    admin_port = serializers.IntegerField()
    node_exists = serializers.BooleanField()
    version = serializers.CharField()
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="rows per action")
    rows = serializers.ListField(child=serializers.DictField())
    servers_new = serializers.ListField(child=serializers.CharField())
    backends = serializers.ListField(child=serializers.DictField(), help_text="what each backend said")
    groups = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField()))
    hostgroups = serializers.ListField(child=serializers.IntegerField())
    shared_with = serializers.ListField(child=serializers.CharField())
    native_sync = serializers.ListField(child=serializers.CharField())
    members = serializers.ListField(
        child=serializers.DictField(), help_text="the other nodes of its ProxySQL Cluster, adopted with it"
    )
    warnings = serializers.ListField(child=serializers.CharField())
    errors = serializers.ListField(child=serializers.CharField())


class AdoptedSerializer(serializers.Serializer):
    cluster = serializers.IntegerField()
    nodes = serializers.ListField(child=serializers.IntegerField())
    versions = serializers.ListField(
        child=serializers.IntegerField(allow_null=True),
        help_text="the configuration version recorded from each node (null: none)",
    )


# -- alert channels, report schedules --------------------------------------------------------------------
# Input: types only, every field optional (a change names what it changes); the rules and their messages are the
# pages' forms (apps/alerts/forms.ChannelForm, apps/reports/forms.ScheduleForm), run by the endpoint.
class AlertChannelSerializer(Answer):
    destination = serializers.CharField(
        read_only=True,
        help_text="host:port it posts to (the URL itself is not answered: a Slack-style URL is a credential)",
    )
    secret_set = serializers.SerializerMethodField()

    def get_secret_set(self, channel) -> bool:
        return bool(channel.secret)

    class Meta:
        model = Channel
        fields = [
            "id",
            "name",
            "kind",
            "destination",
            "recipients",
            "min_severity",
            "clusters",
            "send_resolved",
            "enabled",
            "secret_set",
            "created_at",
        ]


class AlertChannelInput(serializers.Serializer):
    name = text(100, required=False)
    kind = serializers.CharField(max_length=20, required=False, help_text=", ".join(ChannelKind.values))
    url = text(500, required=False, allow_blank=True)
    recipients = text(2000, required=False, allow_blank=True, help_text="e-mail: comma-separated addresses")
    min_severity = serializers.CharField(max_length=10, required=False)
    clusters = serializers.ListField(
        child=IdField(), required=False, max_length=1000, help_text="only these clusters (empty: every cluster)"
    )
    send_resolved = serializers.BooleanField(required=False)
    enabled = serializers.BooleanField(required=False)
    secret = text(
        500,
        required=False,
        allow_blank=True,
        write_only=True,
        help_text="PagerDuty routing key or bearer token; never answered back; absent or empty keeps it",
    )


class ReportScheduleSerializer(Answer):
    class Meta:
        model = ReportSchedule
        fields = [
            "id",
            "cluster",
            "period",
            "hour",
            "weekday",
            "recipients",
            "enabled",
            "last_run_at",
            "last_error",
            "created_at",
            "updated_at",
        ]


class ReportScheduleInput(serializers.Serializer):
    cluster = IdField(required=False, allow_null=True, help_text="null: the whole fleet")
    period = serializers.CharField(max_length=10, required=False, help_text=", ".join(Period.values))
    hour = serializers.IntegerField(required=False, help_text="local hour, 0-23")
    weekday = serializers.IntegerField(required=False, help_text="weekly reports: 0 (Monday) to 6")
    recipients = text(5000, required=False, allow_blank=True)
    enabled = serializers.BooleanField(required=False)


# -- the read-pool rules and automatic failover of a cluster (apps/operations/rule_settings.py) ------------------
class RuleSettingsSerializer(Answer):
    class Meta:
        model = Cluster
        fields = list(RULE_FIELDS)


class RuleSettingsInput(serializers.Serializer):
    """Types only; the ranges are the page's form's, and who may change which field is rule_settings.change()'s:
    operators the read-pool thresholds, admins the switches that let the product act on its own."""

    max_replication_lag = serializers.IntegerField(required=False)
    reader_return_mark = serializers.IntegerField(
        required=False, allow_null=True, help_text="null: half of max_replication_lag"
    )
    reader_return_after_s = serializers.IntegerField(required=False)
    offline_hard_grace_s = serializers.IntegerField(required=False)
    min_available_readers = serializers.IntegerField(required=False)
    read_pool_rules_enabled = serializers.BooleanField(required=False)
    rules_dry_run = serializers.BooleanField(required=False)
    auto_failover_enabled = serializers.BooleanField(required=False)
    failover_after_polls = serializers.IntegerField(required=False)
    failback_enabled = serializers.BooleanField(required=False)
    failback_after_s = serializers.IntegerField(required=False)


# -- fleet rollouts (apps/rollouts) ------------------------------------------------------------------------
class RolloutSelectorInput(serializers.Serializer):
    tags = serializers.DictField(
        child=serializers.CharField(max_length=200),
        required=False,
        default=dict,
        help_text='tags every selected cluster has, e.g. {"env": "prod"}',
    )
    names = serializers.ListField(
        child=serializers.CharField(max_length=200),
        required=False,
        default=list,
        max_length=5000,
        help_text="only these clusters (all must exist and match the tags)",
    )
    versions = serializers.ListField(
        child=serializers.CharField(max_length=50),
        required=False,
        default=list,
        max_length=20,
        help_text='only clusters whose every ProxySQL node runs one of these versions, e.g. ["2.7"] (2.7.x)',
    )

    def validate_tags(self, tags):
        """Checked as a cluster's tags are (at most 20, each key and value): each tag is one more subquery."""
        try:
            return fleet_tags.checked(tags)
        except fleet_tags.BadTag as exc:
            raise serializers.ValidationError(str(exc)) from None


class RolloutInput(serializers.Serializer):
    reason = text(2000, help_text="why: kept with the rollout, each cluster's change set and the audit log")
    edits = EditSerializer(many=True, required=False, max_length=MAX_EDITS, help_text="a change set's edits")
    file = serializers.CharField(
        required=False,
        max_length=5 * 1024 * 1024,
        trim_whitespace=False,
        help_text="instead of edits: a YAML fragment (the tables it names, whole, and the "
        "global_variables it names; no cluster:)",
    )
    select = RolloutSelectorInput()
    waves = serializers.RegexField(
        r"^[0-9%, .]{1,200}$",
        default="1,1,25%,100%",
        help_text="N more clusters, or up to P% of the selection; wave 0 is the canary",
    )
    bake_canary_s = serializers.FloatField(default=60, min_value=0, max_value=86400)
    bake_s = serializers.FloatField(default=30, min_value=0, max_value=86400)
    max_error_rate = serializers.FloatField(
        default=1.0, min_value=0, max_value=1e9, help_text="errors/s per node above the window before the wave"
    )
    when_busy = serializers.ChoiceField(
        ["wait", "skip"],
        default="wait",
        help_text="a cluster another operation holds: wait for it (up to "
        "busy_wait_s, then the rollout halts) or skip it",
    )
    busy_wait_s = serializers.FloatField(default=300, min_value=0, max_value=86400)
    max_latency_ratio = serializers.FloatField(
        default=2.0,
        min_value=1,
        max_value=1e6,
        help_text="the latency of the digests the change touches (its "
        "rules' matches and hostgroups; every digest when it "
        "edits no query rule) since the change against the "
        "window before (2: halts when twice as slow)",
    )
    max_mirror_queue_share = serializers.FloatField(
        default=0.8, min_value=0.01, max_value=1, help_text="a node's mirror queue against its limit that halts"
    )
    roll_back_before = serializers.BooleanField(
        default=False, help_text="on a halt, roll back every wave before the failing one too, newest first"
    )

    def validate(self, data):
        if bool(data.get("edits")) == bool(data.get("file")):
            raise serializers.ValidationError({"non_field_errors": ["Give either edits or a file (one of the two)."]})
        return data


class RolloutHaltInput(serializers.Serializer):
    reason = text(2000, allow_blank=False, help_text="why you halt it (the page, the alert and the audit log say it)")


class RolloutClusterSerializer(serializers.Serializer):
    name = serializers.CharField()
    state = serializers.CharField()
    error = serializers.CharField()
    change_set = serializers.IntegerField(allow_null=True, help_text="the cluster's change set of the rollout")
    revert = serializers.IntegerField(
        allow_null=True, help_text="the change set that rolled it back (to its version before), when it was rolled back"
    )


class RolloutWaveSerializer(serializers.Serializer):
    wave = serializers.IntegerField()
    canary = serializers.BooleanField(
        help_text="wave 0: one ProxySQL node of the first cluster (or that cluster, when it has one node)"
    )
    node = serializers.CharField(allow_null=True, help_text="the canary's ProxySQL node (wave 0), else null")
    rest_of_canary = serializers.BooleanField(help_text="wave 1 holds the rest of the canary's cluster")
    state = serializers.CharField(help_text="pending, applying, baking, passed, rolled_back")
    gate = serializers.JSONField(
        allow_null=True,
        help_text="the health gate's last figures: per node errors/s, "
        "backends down, mirror queue before and since the "
        "change; per cluster digest latency; alerts fired",
    )
    clusters = RolloutClusterSerializer(many=True)


class RolloutSerializer(serializers.Serializer):
    rollout = serializers.IntegerField()
    state = serializers.CharField(help_text="planned, running, paused, halted, rolled_back, done, aborted")
    reason = serializers.CharField()
    waves_text = serializers.CharField()
    halt_reason = serializers.CharField()
    bake_canary_s = serializers.FloatField()
    bake_s = serializers.FloatField()
    thresholds = serializers.DictField(
        child=serializers.FloatField(),
        help_text="the gates' thresholds: max_error_rate, max_latency_ratio, max_mirror_queue_share",
    )
    roll_back_before = serializers.BooleanField(help_text="a halt rolls back every wave before the failing one too")
    waves = RolloutWaveSerializer(many=True)
