"""The operation kinds of this app, one OperationSpec each (registry.py): label, planner and how it is planned again
at start from the options its planner stored in Plan.options, who confirms it, how it meets ProxySQL Cluster sync,
what its inventory step records, the alerts it holds. Other apps register theirs in their own AppConfig.ready()
(dr: channel moves; configuration: change sets)."""

from apps.fleet.models import Server
from apps.plans.registry import (
    CLUSTER,
    INVOLVED,
    LAYERS,
    PROPAGATE,
    RULES_OF_THE_NODES,
    WRITER,
    OperationSpec,
    holding,
    register_kind,
)

from . import drain, inventory, repair, rules, switchover
from .choices import OperationKind


def _switchover(cluster, o):
    return switchover.plan_switchover(
        cluster,
        Server.objects.get(pk=o["new_writer"]),
        drain_timeout_ms=o["drain_timeout_ms"],
        on_timeout=o["on_timeout"],
        lower_autoinc=o["lower_autoinc"],
        old_writer_to=o["old_writer_to"],
        monitor_timeout_ms=o.get("monitor_timeout_ms"),
    )


def _drain(cluster, o):
    return drain.plan_drain(
        Server.objects.get(pk=o["server"]),
        drain_timeout_ms=o["drain_timeout_ms"],
        on_timeout=o["on_timeout"],
        note=o.get("note", ""),
    )


def _restore(cluster, o):
    return drain.plan_restore(Server.objects.get(pk=o["server"]))


def _read_pool(cluster, o):
    changes = {(server, hg): (status, reason) for server, hg, status, reason in o["changes"]}
    return rules.plan_changes(cluster, changes, figures={}, alerts=[])


def _failover(cluster, o):
    return rules.plan_failover(
        cluster, Server.objects.get(pk=o["dead"]), o["new"], o["evidence"], manual=o.get("manual", False)
    )


def _repair(cluster, o):
    return repair.plan_repair(cluster, o.get("nodes"))


# The alerts planned work is expected to cause: the common sets are in the registry (LAYERS, WRITER...).
# The backend a switchover, drain or restore is about: its own alerts while it moves.
_ITS_BACKENDS = holding(
    INVOLVED,
    "backend_shunned",
    "backend_flapping",
    "backend_unreachable",
    "galera_non_primary",
    "galera_not_ready",
    "galera_desynced",
    "galera_recv_queue",
    "galera_flow_control",
    "replica_lag",
    "replication_stopped",
)
_MAINTENANCE_WORK = {
    **_ITS_BACKENDS,
    **holding(CLUSTER, "writer_disagree", "readers_low", "galera_cluster_size"),
    **LAYERS,
}
# A read-pool rule or a failover must reach every node at once, not when a peer pulls it 2-3 s later.
_AT_ONCE = "must reach every node at once, not when a peer pulls it 2-3 s later"

SPECS = [
    OperationSpec(
        OperationKind.SWITCHOVER,
        "planned switchover",
        switchover.plan_switchover,
        _switchover,
        why_held="a switchover drains its writer on every node before it moves it, and a peer pulling in between "
        "would have no writer",
        records=inventory.writer_swap,
        holds={**WRITER, **_ITS_BACKENDS, **holding(CLUSTER, "galera_cluster_size"), **LAYERS},
        moves_writer=True,
        report_noun="planned switchover",
    ),
    OperationSpec(
        OperationKind.DRAIN,
        "maintenance drain",
        drain.plan_drain,
        _drain,
        cluster_sync=PROPAGATE,
        records=inventory.maintenance,
        holds=_MAINTENANCE_WORK,
    ),
    OperationSpec(
        OperationKind.RESTORE,
        "restore from maintenance",
        drain.plan_restore,
        _restore,
        cluster_sync=PROPAGATE,
        records=inventory.maintenance,
        holds=_MAINTENANCE_WORK,
    ),
    OperationSpec(
        OperationKind.READ_POOL,
        "read-pool rule",
        rules.plan_changes,
        _read_pool,
        why_held=f"a read-pool rule {_AT_ONCE}",
        records=inventory.statuses,
        holds={**holding(CLUSTER, "backend_flapping"), **LAYERS},
        run_by_rule=True,
    ),
    OperationSpec(
        OperationKind.FAILOVER,
        "automatic failover",
        rules.plan_failover,
        _failover,
        why_held=f"a failover {_AT_ONCE}",
        records=inventory.writer_swap,
        holds={**holding(CLUSTER, "writer_disagree", "backend_flapping"), **LAYERS},
        run_by_rule=True,
        moves_writer=True,
        report_noun="automatic failover",
    ),
    OperationSpec(
        OperationKind.REPAIR,
        "repair from the inventory",
        repair.plan_repair,
        _repair,
        why_held="a repair writes each node what that node lacks",
        records=inventory.resolve_pending_rollbacks,
        holds=RULES_OF_THE_NODES,
    ),
]


def register():
    for spec in SPECS:
        register_kind(spec)
