"""The executor's steps for change sets (registered in change_set_kind.py): read back every node's runtime, and
record the version once the nodes run it."""

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from django.db import transaction

from apps.audit.actor import Actor
from apps.audit.services import record as record_event
from apps.clients import proxysql_versions as versions
from apps.clients.proxysql import ProxySQLAdmin
from apps.fleet.models import Cluster
from apps.plans.registry import StepFailed, capture
from apps.plans.vocabulary import Step

from . import content as C
from . import nodes as N
from .change_set import node_diff
from .drift import managers_view
from .models import ChangeSet
from .services import known_secrets, record_version
from .statements import diff_scope


class Operation(Protocol):
    """What these steps read of operations.Operation (an app above: not imported)."""

    @property
    def pk(self) -> int: ...
    @property
    def cluster(self) -> Cluster: ...
    @property
    def title(self) -> str: ...


class Run(Protocol):
    """What these steps use of the executor's run (operations/executor.py Run: an app above, not imported)."""

    @property
    def op(self) -> Operation: ...
    @property
    def pool(self) -> ThreadPoolExecutor: ...
    def admin(self, node_id: str) -> ProxySQLAdmin: ...
    def plan_nodes(self) -> list[str]: ...  # the ids (step.nodes' keys: strings) of the nodes the plan writes
    def defer(self, node_id: str, exc: Exception) -> None: ...


# A step handler's arguments beside the run (registry.StepHandler.execute): `row` is the step's
# operations.OperationStep (an app above; unused here), `executed` what it ran, `detail` the step's JSON detail.


def verify(run: Run, step: Step, row: object, executed: list[str], detail: dict[str, Any]) -> None:
    """Every node's runtime equals the new configuration in the rows this change set wrote (a write-back: every
    row of the tables it touched), Monitor's placement in a native manager's hostgroups folded back; a password the
    change set kept is the node's own, whatever it is."""
    cs = ChangeSet.objects.select_related("base").get(pk=step.params["change_set"])
    target = C.apply_edits(cs.base.content, cs.edits)
    hostgroups = C.claimed_hostgroups(cs.base.content) | C.claimed_hostgroups(target)
    tables = set(step.params["tables"])
    write_back = cs.source == "write_back"
    rows, variables, new_passwords = diff_scope(C.diff(cs.base.content, target))

    def fields(
        c: C.RowChange,
    ) -> list[str] | None:  # what to report of a difference; None when the change set did not write it
        if write_back:
            return c.fields if c.table in tables else None
        if (c.table, c.key) not in rows:
            return None
        found = [f for f in c.fields if not (f == "password" and c.key not in new_passwords)]
        return found if found or c.change != "changed" else None

    same_secret = C.same_secret(known_secrets(cs.cluster).get)

    def one(node_id: str) -> list[str]:  # in a pool thread: network only
        layers = N.read_layers(run.admin(node_id), ("runtime",), tables=tables)
        servers = layers["runtime"].get("mysql_servers")
        if servers is not None:  # where ProxySQL's own manager moved them is not a difference (fleet/native.py)
            layers["runtime"]["mysql_servers"] = managers_view(target, servers)
        nc = N.NodeConfig(int(node_id), str(node_id), layers)
        d = node_diff(nc, target, hostgroups, same_secret)
        version = (layers["runtime"].get("global_variables") or {}).get("admin-version")
        return [
            f"{c.table} {list(c.key)} {c.change}"
            + (f" ({', '.join(found)})" if found else "")
            + (
                f": {'/'.join(versions.MIRROR_COLUMNS)} exchanged; {versions.MIRROR_SWAP_WORDS}"
                if c.table == "mysql_query_rules" and versions.mirror_swapped(c.before, c.after)
                else ""
            )
            for c in d.rows
            for found in [fields(c)]
            if found is not None
        ] + [
            (f"{name}: differs" if C.is_secret(after) else f"{name}: runtime {before!r}, expected {after!r}")
            for name, before, after in d.variables
            if "global_variables" in tables
            and (write_back or name in variables)
            and not versions.versions_differ(name, target, before, version)
        ]

    node_ids = [n for n in run.plan_nodes()]
    problems: dict[str, list[str]] = {}
    for node_id, (found, error) in zip(node_ids, run.pool.map(capture(one), node_ids)):
        if error is not None:
            run.defer(node_id, error)  # past the point of no return (a dead run finished): kept for later
            continue
        if found:
            problems[node_id] = found
    detail["problems"] = [f"node {n}: {p}" for n, found in problems.items() for p in found]
    if problems:
        raise StepFailed("runtime differs from the new configuration: " + "; ".join(detail["problems"][:20]))


def record(run: Run, step: Step, row: object, executed: list[str], detail: dict[str, Any]) -> None:
    op = run.op
    with transaction.atomic():
        cs = ChangeSet.objects.select_for_update().select_related("base", "result").get(pk=step.params["change_set"])
        if cs.state == ChangeSet.State.APPLIED:  # its worker died after the record committed (executor._resume)
            detail["version"] = cs.result.number if cs.result else None
            return
        if cs.source == "write_back":  # the nodes run the base version again: no new version
            ChangeSet.objects.filter(pk=cs.pk).update(state=ChangeSet.State.APPLIED, result=cs.base)
            record_event(
                "configuration written back",
                actor=Actor.of_operation(op),
                cluster=op.cluster,
                target=f"{op.cluster} v{cs.base.number}",
                details={"version": cs.base.number, "operation": op.pk, "nodes": cs.nodes},
            )
            detail["version"] = cs.base.number
            return
        target = C.apply_edits(cs.base.content, cs.edits)
        version = record_version(
            op.cluster,
            target,
            actor=Actor.of_operation(op),
            reason=cs.reason or op.title,
            source=cs.source,
            operation=op,
        )
        ChangeSet.objects.filter(pk=cs.pk).update(state=ChangeSet.State.APPLIED, result=version)
    detail["version"] = version.number
