"""The built-in rules, as data: what each watches, its subject, its default severity, `for` duration and
thresholds, and which planned work is expected to cause it (holds). conditions.py holds the checks, one
function per rule key; settings.py merges these defaults with the fleet-wide and per-cluster overrides
stored in RuleSetting rows.

Subjects (one alert per rule and subject, deduplicated):
  node        a ProxySQL node                         "n<node>"
  node_hg     a hostgroup as one ProxySQL node has it  "n<node>:hg<id>"
  node_server a backend as one ProxySQL node sees it   "n<node>:<host>:<port>"
  cluster_hg  a hostgroup across the cluster's nodes   "c<cluster>:hg<id>"
  server      a backend                                "s<server>"
  cluster     the cluster                              "c<cluster>"
  mirror_rule a mirror rule on one node                "n<node>:r<rule_id>"
  operation   an operation                             "o<operation>"
  digest      a query digest within the cluster        "c<cluster>:d<digest>"
  channel     a DR channel (its replica cluster's)     "ch<channel>"
  rollout     a fleet rollout (its failing wave's first cluster's)  "ro<rollout>"
"""

from dataclasses import dataclass, field

from apps.plans import registry

CRITICAL, WARNING, INFO = "critical", "warning", "info"
SEVERITIES = (CRITICAL, WARNING, INFO)
SEVERITY_RANK = {INFO: 0, WARNING: 1, CRITICAL: 2}

MAINTENANCE = "maintenance"  # a backend in maintenance (drained, not yet restored)


@dataclass(frozen=True)
class Param:
    default: float | None  # None: taken from the cluster's policy (see `from_cluster`)
    unit: str
    label: str
    minimum: float = 0
    maximum: float = 1e9
    from_cluster: str = ""  # a Cluster field whose value is the default when `default` is None

    def value_for(self, cluster: object) -> float | None:
        if self.default is None and self.from_cluster:
            return getattr(cluster, self.from_cluster)
        return self.default


@dataclass(frozen=True)
class RuleSpec:
    key: str
    title: str
    family: str
    subject: str
    severity: str
    for_s: float
    why: str
    params: dict[str, Param] = field(default_factory=dict)
    # A backend in maintenance is expected to cause this alert about itself. Which operations are, each operation
    # kind's spec says (apps/plans/registry.py OperationSpec.holds): see held_by.
    held_in_maintenance: bool = False
    # Where it is evaluated: "poll" (after the ProxySQL/backend poll rounds), "digest" (after the digest
    # poll rounds: mirror loss and query digests); "event": raised by the work it is about (events.py).
    after: str = "poll"

    @property
    def held_by(self) -> dict[str, str]:
        """Planned work that is expected to cause this alert: {operation kind or MAINTENANCE: "cluster" (the whole
        cluster) or "involved" (only the backends the operation or maintenance is about)}."""
        return {**registry.held_by(self.key), **({MAINTENANCE: "involved"} if self.held_in_maintenance else {})}


RULES = [
    # -- writer and read pool, as each ProxySQL node routes -------------------------------------------
    RuleSpec(
        "writer_none",
        "Writer hostgroup without a usable ONLINE server",
        "writer",
        "node_hg",
        CRITICAL,
        2,
        "No ONLINE row in the writer hostgroup of this ProxySQL node points at a backend that answers and is "
        "Primary and ready: writes through this node fail.",
    ),
    RuleSpec(
        "writer_many",
        "More than one ONLINE writer",
        "writer",
        "node_hg",
        WARNING,
        5,
        "Two or more ONLINE servers in the writer hostgroup of one node: writes are spread over several "
        "Galera nodes (certification conflicts) or over an async primary and a replica.",
    ),
    RuleSpec(
        "writer_disagree",
        "ProxySQL nodes disagree on the writer",
        "writer",
        "cluster_hg",
        WARNING,
        5,
        "The cluster's ProxySQL nodes send writes to different backends.",
    ),
    RuleSpec(
        "readers_low",
        "Reader pool below the cluster's minimum",
        "pool",
        "node_hg",
        WARNING,
        5,
        "Fewer usable ONLINE readers on this node than the cluster's minimum of available readers.",
        params={"minimum": Param(None, "readers", "minimum usable readers", 0, 1000, "min_available_readers")},
    ),
    RuleSpec(
        "backend_shunned",
        "Backend SHUNNED on a ProxySQL node",
        "pool",
        "node_server",
        WARNING,
        30,
        "ProxySQL shunned the backend after connection errors and sends it nothing until it recovers.",
        held_in_maintenance=True,
    ),
    RuleSpec(
        "backend_flapping",
        "Backend flapping",
        "pool",
        "node_server",
        WARNING,
        0,
        "The backend's status on this node changed many times in a few minutes (ONLINE, SHUNNED, "
        "OFFLINE...): clients see errors and retries.",
        params={
            "changes": Param(4, "status changes", "changes", 2, 1000),
            "minutes": Param(10, "min", "within", 0.1, 30),
        },
        held_in_maintenance=True,
    ),
    # -- backends ---------------------------------------------------------------------------------------
    RuleSpec(
        "backend_unreachable",
        "Backend unreachable or its state stale",
        "backend",
        "server",
        WARNING,
        10,
        "The monitor user's poll of this backend fails, or no poll happened for three intervals.",
        held_in_maintenance=True,
    ),
    RuleSpec(
        "galera_non_primary",
        "Galera node not in the Primary component",
        "galera",
        "server",
        CRITICAL,
        5,
        "wsrep_cluster_status is not Primary: the node refuses queries (split brain or quorum loss).",
        held_in_maintenance=True,
    ),
    RuleSpec(
        "galera_not_ready",
        "Galera node not ready",
        "galera",
        "server",
        WARNING,
        5,
        "wsrep_ready is OFF: the node accepts no queries.",
        held_in_maintenance=True,
    ),
    RuleSpec(
        "galera_desynced",
        "Galera node Donor/Desynced for long",
        "galera",
        "server",
        WARNING,
        300,
        "wsrep_local_state 2 for longer than the `for` duration (an SST/backup donor, or wsrep_desync left "
        "ON): it lags and takes no part in flow control.",
        held_in_maintenance=True,
    ),
    RuleSpec(
        "galera_recv_queue",
        "Galera receive queue above its threshold",
        "galera",
        "server",
        WARNING,
        10,
        "wsrep_local_recv_queue is above the threshold: the node applies write-sets later than the others.",
        params={"threshold": Param(None, "write-sets", "threshold", 0, 1e9, "max_replication_lag")},
        held_in_maintenance=True,
    ),
    RuleSpec(
        "galera_flow_control",
        "Galera flow control paused the cluster",
        "galera",
        "server",
        WARNING,
        0,
        "Replication was paused by flow control for more than the given share of the window "
        "(wsrep_flow_control_paused_ns): every write of the cluster waits for the slowest node.",
        params={
            "percent": Param(10, "%", "paused above", 0, 100),
            "window_s": Param(60, "s", "over a window of", 10, 600),
        },
        held_in_maintenance=True,
    ),
    RuleSpec(
        "galera_cluster_size",
        "Galera cluster smaller than expected",
        "galera",
        "cluster",
        WARNING,
        10,
        "The largest wsrep_cluster_size any backend reports is below the expected count (the cluster's "
        "Galera backends in the inventory, less those in maintenance).",
        params={"expected": Param(0, "nodes", "expected (0: the inventory's count)", 0, 1000)},
    ),
    RuleSpec(
        "replica_lag",
        "Replica lag above its threshold",
        "async",
        "server",
        WARNING,
        30,
        "Seconds_Behind_Master above the threshold on an async replica.",
        params={"seconds": Param(None, "s", "threshold", 0, 1e9, "max_replication_lag")},
        held_in_maintenance=True,
    ),
    RuleSpec(
        "replication_stopped",
        "Replication stopped",
        "async",
        "server",
        CRITICAL,
        10,
        "An async replica's IO or SQL thread is not running: it falls behind for good.",
        held_in_maintenance=True,
    ),
    # -- ProxySQL nodes -----------------------------------------------------------------------------------
    RuleSpec(
        "proxysql_unreachable",
        "ProxySQL node unreachable or its state stale",
        "proxysql",
        "node",
        CRITICAL,
        10,
        "The admin interface does not answer (or answers too slowly), or no poll happened for three intervals: "
        "what this node routes is unknown, and it may be down for its clients too.",
    ),
    RuleSpec(
        "proxysql_auth",
        "Admin credentials refused",
        "proxysql",
        "node",
        WARNING,
        0,
        "The node refuses the admin user and password stored for it: nothing on it is monitored or changed.",
    ),
    RuleSpec(
        "poll_latency",
        "Poll latency far above its usual",
        "proxysql",
        "node",
        WARNING,
        30,
        "One poll of this node's admin interface takes far longer than its usual (an hour's average): the node "
        "is overloaded or its host is.",
        params={
            "factor": Param(5, "×", "above its usual by", 1.5, 1000),
            "floor_ms": Param(500, "ms", "and at least", 0, 60000),
        },
    ),
    RuleSpec(
        "mirror_queue",
        "Mirror queue near its limit",
        "mirror",
        "node",
        WARNING,
        30,
        "Mirror_queue_length above the given share of mysql-mirror_max_queue_length × mysql-threads: "
        "mirrored queries are being dropped.",
        params={"percent": Param(80, "%", "above", 1, 100)},
    ),
    RuleSpec(
        "mirror_loss",
        "Measured mirror loss",
        "mirror",
        "mirror_rule",
        WARNING,
        0,
        "A mirror rule's copies that did not run in its mirror hostgroup, over the last digest-poll window "
        "(its hits less the prepared-statement share against the executions of its digests there).",
        params={"percent": Param(5, "%", "lost above", 0, 100)},
        after="digest",
    ),
    RuleSpec(
        "conn_errors",
        "Backend connection errors",
        "proxysql",
        "node",
        WARNING,
        30,
        "ConnERR per second over this node's connection pool above the threshold.",
        params={"per_second": Param(1, "/s", "above", 0, 1e9)},
    ),
    # -- configuration and operations ------------------------------------------------------------------
    RuleSpec(
        "drift",
        "Configuration drift",
        "config",
        "node",
        WARNING,
        600,
        "The node's runtime differs from intent for longer than the `for` duration: mysql_servers against the "
        "inventory at every poll (status ignored where ProxySQL set it itself), every other table and the "
        "global variables against the configuration version at each run of the drift watcher (30 s).",
    ),
    RuleSpec(
        "restart_drift",
        "A restart would change this node's configuration",
        "config",
        "node",
        WARNING,
        300,
        "The node's disk layer (disk.mysql_servers: what ProxySQL loads when it restarts) differs from the "
        "inventory, e.g. it holds another writer: a restart would route as the disk says; or the disk of any "
        "other table (users, query rules, scheduler...) or a variable differs from the configuration version. "
        "mysql_servers' memory and disk are polled with the variables and after each change of the runtime; "
        "the other tables are read by the drift watcher every 30 s.",
    ),
    RuleSpec(
        "proxysql_cluster_diverged",
        "ProxySQL Cluster nodes have not converged",
        "config",
        "cluster",
        WARNING,
        30,
        "A module whose native sync (ProxySQL Cluster) is on holds different checksums on the cluster's nodes for "
        "longer than the `for` duration, the bound: at ProxySQL's defaults a peer pulls a change 2-3 s after its "
        "LOAD, so nodes that still differ are not syncing (same-second LOADs, every node at version 1, a peer "
        "that cannot pull). The cluster page's ProxySQL Cluster panel says which and what clears it.",
    ),
    RuleSpec(
        "proxysql_cluster_diff_growing",
        "ProxySQL Cluster diff_check only grows",
        "config",
        "node",
        WARNING,
        10,
        "This node has seen a peer's different checksum for more checks than admin-cluster_<module>_"
        "diffs_before_sync (+3) without any pull: diff_check only grows (sysown/proxysql #1173, #3269; before "
        "2.6 #2146). On 2.6+ mysql_servers_v2, on which the mysql_servers pull is decided, is watched too: it "
        "climbs when two nodes LOAD different hostgroup tables in the same second. The summary says which trap "
        "it is and the action that clears it.",
    ),
    RuleSpec(
        "operation_failed",
        "An operation failed",
        "operations",
        "operation",
        CRITICAL,
        0,
        "An operation ended failed (past its point of no return, or its rollback did not complete): the "
        "nodes may not be as planned. It stays for the window unless a later operation of the cluster succeeds.",
        params={"window_min": Param(60, "min", "shown for", 1, 10080)},
    ),
    RuleSpec(
        "rollback_pending",
        "Rollback pending",
        "operations",
        "operation",
        CRITICAL,
        0,
        "An operation could not finish its rollback on a node that stopped answering; the statements still to "
        "run are retried until it answers.",
    ),
    RuleSpec(
        "finish_pending",
        "Finish pending",
        "operations",
        "operation",
        CRITICAL,
        0,
        "An operation passed its point of no return and is done on the other nodes and in the inventory (nothing "
        "was rolled back), but a node stopped answering before it took the last statements: that node does not "
        "do what the others do until a retry goes through (they are retried until it answers).",
    ),
    # -- fleet rollouts (apps/rollouts): raised by the rollout when it halts (events.py), not judged from the polls
    RuleSpec(
        "rollout_halted",
        "A fleet rollout halted",
        "rollouts",
        "rollout",
        CRITICAL,
        0,
        "A wave of a fleet rollout failed its health gate (or its apply) and was rolled back; the rollout waits "
        "for an operator (abort rolls back the waves before it). The summary names the gate and its figures. "
        "It resolves when the rollout is aborted and rolled back.",
        after="event",
    ),
    # -- ProxySQL's own manager (Cluster.native_manager): its failover seen by native_failover.py, not judged by rules
    RuleSpec(
        "native_failover",
        "ProxySQL's manager is failing over the writer",
        "writer",
        "cluster",
        CRITICAL,
        0,
        "On a natively managed cluster the writer Monitor placed left the writer hostgroup or stopped answering: "
        "ProxySQL's Galera manager places another at its next healthcheck; the replication manager promotes "
        "nobody (a new primary is the DBA's or their tooling's). It resolves when one writer is ONLINE on every "
        "node, with the time from the writer's death to then (also in the audit log).",
        after="event",
    ),
    # -- DR channels (apps/dr), judged after each channel poll, on the replica cluster -----------------------
    RuleSpec(
        "channel_stopped",
        "DR channel stopped",
        "dr",
        "channel",
        CRITICAL,
        10,
        "The channel's IO or SQL thread is not running on its replica node (stopped, an error, still "
        "connecting, replicating from elsewhere, or the node does not answer): the replica site falls behind.",
    ),
    RuleSpec(
        "channel_lag",
        "DR channel lag above its threshold",
        "dr",
        "channel",
        WARNING,
        30,
        "Seconds_Behind_Master of the channel's replica above the threshold: a failover to the replica site "
        "would lose or wait for that much.",
        params={"seconds": Param(0, "s", "threshold (0: the channel's own max lag)", 0, 1e9)},
    ),
    # -- query digests -----------------------------------------------------------------------------------
    RuleSpec(
        "digest_new_top",
        "New query among the top by total time",
        "digests",
        "digest",
        INFO,
        0,
        "A digest first seen recently is among the cluster's top digests by total time in the window.",
        params={
            "top": Param(10, "digests", "top", 1, 100),
            "window_min": Param(60, "min", "over", 5, 1440),
            "new_hours": Param(24, "h", "first seen within", 1, 168),
        },
        after="digest",
    ),
    RuleSpec(
        "digest_slower",
        "Query slower than its 7-day baseline",
        "digests",
        "digest",
        WARNING,
        0,
        "A top digest's average time in the window is the given factor above its average over the 7 days before.",
        params={
            "factor": Param(3, "×", "slower by", 1.1, 1000),
            "top": Param(20, "digests", "among the top", 1, 200),
            "window_min": Param(15, "min", "over", 5, 1440),
            "min_count": Param(100, "executions", "at least", 1, 1e9),
            "min_ms": Param(1, "ms", "and an average above", 0, 1e6),
        },
        after="digest",
    ),
]

BY_KEY = {r.key: r for r in RULES}
FAMILIES = {
    "writer": "Writer",
    "pool": "Read pool",
    "backend": "Backends",
    "galera": "Galera",
    "async": "Async replication",
    "proxysql": "ProxySQL nodes",
    "mirror": "Mirroring",
    "config": "Configuration",
    "operations": "Operations",
    "digests": "Query digests",
    "dr": "DR channels",
    "rollouts": "Fleet rollouts",
}
