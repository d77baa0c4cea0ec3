"""Reads of operations that the pages and the API share: one filter, two doors (the operations list page and
GET /api/v1/operations/ answer the same rows for the same filter)."""

from typing import Any, NotRequired, TypedDict

from django.db.models import QuerySet

from apps.clients.proxysql import ProxySQLAdmin
from apps.clients.wire import ClientError
from apps.plans.registry import kind_spec, step_handler
from apps.plans.vocabulary import Plan

from . import switchover
from .models import Operation


def operations(*, cluster: int | None = None, kind: str = "", state: str = "") -> QuerySet[Operation]:
    """Operations newest first, narrowed to a cluster (its id), a kind and a state when given. The doors check the
    values first (the page ignores one it does not understand, the API refuses it)."""
    ops = Operation.objects.order_by("-id")
    if cluster is not None:
        ops = ops.filter(cluster_id=cluster)
    if kind:
        ops = ops.filter(kind=kind)
    if state:
        ops = ops.filter(state=state)
    return ops


class NodeSessions(TypedDict):
    """One node's answer: the sessions holding the server (switchover.pinned_sessions), or why it was not read."""

    node: str
    sessions: NotRequired[list[dict[str, Any]]]
    error: NotRequired[str]


class SessionsHolding(TypedDict):
    server: str
    old_writer: bool
    nodes: list[NodeSessions]


def sessions_holding(op: Operation) -> SessionsHolding | None:
    """Live: the server being drained (a switchover's old writer, a drained backend), and the sessions that
    hold it on each node and why (stats_mysql_processlist)."""
    plan = Plan.from_json(op.plan)
    wait = next((s for s in plan.steps if step_handler(s.kind).on_timeout), None)  # the step waiting for the drain
    if wait is None:
        return None
    out: list[NodeSessions] = []
    for node in op.cluster.proxysql_nodes.all():
        try:
            with ProxySQLAdmin.for_node(node) as admin:
                processlist = admin.processlist()
                rows = [
                    s
                    for hg, host, port in wait.params["targets"]
                    for s in switchover.pinned_sessions(processlist, hg, host, port)
                ]
            out.append({"node": node.name, "sessions": rows})
        except ClientError as exc:
            out.append({"node": node.name, "error": str(exc)})
    server = ", ".join(sorted({f"{host}:{port}" for _, host, port in wait.params["targets"]}))
    return {"server": server, "old_writer": kind_spec(op.kind).moves_writer, "nodes": out}
