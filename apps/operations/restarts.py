"""A ProxySQL node that restarted during an operation: it loaded its disk, which may hold something else than what
the operation wrote (a SAVE killed in its write leaves a table without rows). Read by the executor's rollback and by
the retry of a pending row (rollbacks.py), which check such a node against the inventory before it counts."""

from django.utils import timezone

from apps.clients.wire import ClientError

from . import repair
from .choices import StepState


def restarted_during(op, admin):
    """Whether the node started after the operation did (ProxySQL_Uptime, whole seconds, rounded down: never a restart
    missed, at most one said of a node started less than a second before the operation; unknown: assumed; an operation
    no worker started ran nothing on it). Its
    statements, kept as a diff, then do not bring it back: the restart dropped what it held in memory only and loaded
    its disk, which a SAVE killed in its write leaves without rows (per table a DELETE then an INSERT ... SELECT, not
    one transaction: measured on real 2.7.1)."""
    if op.started_at is None:
        return False
    uptime = admin.stats_global().get("ProxySQL_Uptime")
    if uptime is None:
        return True
    return int(uptime) < (timezone.now() - op.started_at).total_seconds()


def restarted_nodes(op, runner, rows, pending):
    """The nodes of the steps that started (`rows`: the operation's steps as they ended) that took their undo in the
    run (not in `pending`) but restarted during the operation, before the rollback reached them: kept open with no
    statement left, so that the retry checks them against the inventory (_recheck) before the operation counts as
    rolled back. One that stops answering now is kept open too (it may be restarting). {node_id: as rollback() keeps}."""
    steps = {s.key: s for s in runner.plan.steps}
    names = {}
    for row in rows:
        if row.state in (StepState.DONE, StepState.RUNNING, StepState.FAILED):
            names.update({n: spec.get("name", n) for n, spec in steps[row.key].nodes.items()})
    out = {}
    for node_id, name in names.items():
        if node_id in pending:
            continue
        try:
            if restarted_during(op, runner.admin(node_id)) and differs_from_inventory(op.cluster, node_id):
                out[node_id] = {
                    "name": name,
                    "statements": [],
                    "error": "it restarted during the operation and its "
                    "layers differ from the inventory: repaired from it before the rollback counts as "
                    "complete",
                }
        except ClientError as exc:
            if exc.retryable:
                out[node_id] = {
                    "name": name,
                    "statements": [],
                    "error": f"it stopped answering after its undo ({exc}): "
                    "its layers are checked against the inventory when it answers",
                }
    return out


def differs_from_inventory(cluster, node_id):
    """Reads only: whether the node's memory, runtime or disk differ from the inventory (what a repair would write)."""
    node = repair.plan_repair(cluster, [int(node_id)]).facts["nodes"].get(str(node_id))
    return node is None or not node["nothing_to_do"]
