"""The operation kinds of this app, one OperationSpec each (registry.py): label, planner and how it is planned again
at start from the options its planner stored in Plan.options, who confirms it, how it meets ProxySQL Cluster sync,
what its inventory step records, the alerts it holds. Other apps register theirs in their own AppConfig.ready()
(dr: channel moves)."""
from apps.accounts.roles import ADMIN
from apps.fleet.models import Server

from . import change_set, drain, inventory, repair, rules, switchover
from .choices import OperationKind
from .registry import CLUSTER, INVOLVED, PROPAGATE, OperationSpec, register_kind


def _switchover(cluster, o):
    return switchover.plan_switchover(cluster, Server.objects.get(pk=o["new_writer"]),
                                      drain_timeout_ms=o["drain_timeout_ms"], on_timeout=o["on_timeout"],
                                      lower_autoinc=o["lower_autoinc"], old_writer_to=o["old_writer_to"])


def _drain(cluster, o):
    return drain.plan_drain(Server.objects.get(pk=o["server"]), drain_timeout_ms=o["drain_timeout_ms"],
                            on_timeout=o["on_timeout"], note=o.get("note", ""))


def _restore(cluster, o):
    return drain.plan_restore(Server.objects.get(pk=o["server"]))


def _read_pool(cluster, o):
    changes = {(server, hg): (status, reason) for server, hg, status, reason in o["changes"]}
    return rules.plan_changes(cluster, changes, figures={}, alerts=[])


def _failover(cluster, o):
    return rules.plan_failover(cluster, Server.objects.get(pk=o["dead"]), o["new"], o["evidence"],
                               manual=o.get("manual", False))


def _repair(cluster, o):
    return repair.plan_repair(cluster, o.get("nodes"))


def _config_confirm(op):
    """A cluster may ask that only an admin confirm its configuration changes (Cluster.config_confirm_role)."""
    if op.cluster.config_confirm_role == ADMIN:
        return ADMIN, "On this cluster only an admin confirms configuration changes."
    return None


def _holding(scope, *rules):
    return dict.fromkeys(rules, scope)


# The alerts planned work is expected to cause (alerts/holds.py; the rule keys are alerts/catalogue.py's).
# Every operation changes a node's layers for a while (memory, LOAD to runtime, SAVE to disk).
_LAYERS = _holding(CLUSTER, "drift", "restart_drift", "proxysql_cluster_diverged", "proxysql_cluster_diff_growing")
# Those that write the writer hostgroup, on the whole cluster.
_WRITER = _holding(CLUSTER, "writer_none", "writer_many", "writer_disagree", "readers_low")
# The backend a switchover, drain or restore is about: its own alerts while it moves.
_ITS_BACKENDS = _holding(INVOLVED, "backend_shunned", "backend_flapping", "backend_unreachable", "galera_non_primary",
                         "galera_not_ready", "galera_desynced", "galera_recv_queue", "galera_flow_control",
                         "replica_lag", "replication_stopped")
_MAINTENANCE_WORK = {**_ITS_BACKENDS, **_holding(CLUSTER, "writer_disagree", "readers_low", "galera_cluster_size"),
                     **_LAYERS}
_RULES_OF_THE_NODES = {**_WRITER, **_holding(CLUSTER, "backend_shunned", "backend_flapping"), **_LAYERS}
# A read-pool rule or a failover must reach every node at once, not when a peer pulls it 2-3 s later.
_AT_ONCE = "must reach every node at once, not when a peer pulls it 2-3 s later"

SPECS = [
    OperationSpec(
        OperationKind.SWITCHOVER, "planned switchover", switchover.plan_switchover, _switchover,
        why_held="a switchover drains its writer on every node before it moves it, and a peer pulling in between "
                 "would have no writer",
        records=inventory.writer_swap,
        holds={**_WRITER, **_ITS_BACKENDS, **_holding(CLUSTER, "galera_cluster_size"), **_LAYERS},
        moves_writer=True, report_noun="planned switchover"),
    OperationSpec(
        OperationKind.DRAIN, "maintenance drain", drain.plan_drain, _drain, cluster_sync=PROPAGATE,
        records=inventory.maintenance, holds=_MAINTENANCE_WORK),
    OperationSpec(
        OperationKind.RESTORE, "restore from maintenance", drain.plan_restore, _restore, cluster_sync=PROPAGATE,
        records=inventory.maintenance, holds=_MAINTENANCE_WORK),
    OperationSpec(
        OperationKind.READ_POOL, "read-pool rule", rules.plan_changes, _read_pool,
        why_held=f"a read-pool rule {_AT_ONCE}", records=inventory.statuses,
        holds={**_holding(CLUSTER, "backend_flapping"), **_LAYERS}, run_by_rule=True),
    OperationSpec(
        OperationKind.FAILOVER, "automatic failover", rules.plan_failover, _failover, why_held=f"a failover {_AT_ONCE}",
        records=inventory.writer_swap,
        holds={**_holding(CLUSTER, "writer_disagree", "backend_flapping"), **_LAYERS},
        run_by_rule=True, moves_writer=True, report_noun="automatic failover"),
    OperationSpec(
        OperationKind.CONFIG, "configuration change", change_set.plan_change_set, change_set.replan,
        cluster_sync=PROPAGATE, confirm=_config_confirm, holds=_RULES_OF_THE_NODES),
    OperationSpec(
        OperationKind.REPAIR, "repair from the inventory", repair.plan_repair, _repair,
        why_held="a repair writes each node what that node lacks", records=inventory.resolve_pending_rollbacks,
        holds=_RULES_OF_THE_NODES),
]


def register():
    for spec in SPECS:
        register_kind(spec)

