"""Operation kinds and step kinds are registered, not switched on. Each operation kind is one OperationSpec (its
label, planner and re-planner, who confirms it, how it meets ProxySQL Cluster sync, what its inventory step
records, the alerts it holds), each step kind one StepHandler (execute, undo, statements for the re-check). The
app that owns a kind registers it in its AppConfig.ready() (operations: kinds.py and steps.py; dr: moves.py);
the executor, the re-check, confirm, sync_hold and the alert holds read them here. Pure data: no Django import.
It sits below every app that plans (apps/tests/test_boundaries.py ORDER), so that configuration registers its change
sets here as operations and dr register theirs."""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

Item = TypeVar("Item")

# ProxySQL Cluster sync (sync_hold.py): HOLD keeps the peers from pulling while the plan runs; PROPAGATE lets the
# plan write one node and its peers pull it, where the cluster's mode asks for it and the plan allows it.
HOLD, PROPAGATE = "hold", "propagate"
# An alert an operation holds: for the whole cluster, or only for the backends the operation is about.
CLUSTER, INVOLVED = "cluster", "involved"


def holding(scope: str, *rules: str) -> dict[str, str]:
    return dict.fromkeys(rules, scope)


# The alerts planned work is expected to cause (alerts/holds.py; the rule keys are alerts/catalogue.py's).
# Every operation changes a node's layers for a while (memory, LOAD to runtime, SAVE to disk).
LAYERS = holding(CLUSTER, "drift", "restart_drift", "proxysql_cluster_diverged", "proxysql_cluster_diff_growing")
# Those that write the writer hostgroup, on the whole cluster.
WRITER = holding(CLUSTER, "writer_none", "writer_many", "writer_disagree", "readers_low")
# Those that write the nodes' rows and rules as a whole (a change set, a repair).
RULES_OF_THE_NODES = {**WRITER, **holding(CLUSTER, "backend_shunned", "backend_flapping"), **LAYERS}


@dataclass(frozen=True)
class OperationSpec:
    kind: str  # stored in Operation.kind (at most 20 characters)
    label: str  # what the pages and reports call it
    planner: Callable  # the doors' planner (arguments of its own) -> Plan
    replan: Callable  # (cluster, options) -> Plan: planned again at start from Plan.options (recheck.replan)
    cluster_sync: str = HOLD
    why_held: str = ""  # why it holds the sync whatever the cluster's mode (said on the plan)
    # What its INVENTORY step records: (run, params, detail) -> None, its change as the next configuration version
    # (configuration.services.record_operation; inventory.py). None: it records in steps of its own, or nothing.
    records: Callable | None = None
    holds: dict = field(default_factory=dict)  # {alert rule key: CLUSTER or INVOLVED} (alerts/holds.py)
    confirm: Callable | None = None  # (op) -> (role, why) or None: a role beyond the operator's to confirm it
    run_by_rule: bool = False  # reports call an operation of it without a requester "automatic"
    moves_writer: bool = False  # reports list it among the writer changes
    report_noun: str = ""  # how a report's summary names a writer change of this kind


@dataclass(frozen=True)
class StepHandler:
    kind: str  # Step.kind
    # (run, step, row, executed, detail): does the step's work, appending what it ran to `executed`
    execute: Callable
    # (run, step, row) -> [what was undone]: the undo of what it changed outside its ProxySQL statements (those
    # are undone by the executor from the nodes it ran on); None: nothing besides them
    undo: Callable | None = None
    # (step) -> {label: {"sql", "rollback"}}: what it sends besides step.nodes, for the re-check at start to compare
    statements: Callable | None = None
    check: bool = False  # only reads: run again before a dead worker's operation is finished (executor._resume)
    sends_nodes: bool = False  # step.nodes are statements it sends to each ProxySQL node (sync_hold: what loads)
    # (step) -> [server id]: the backends it talks to, connected up front (executor.connect_all)
    backends: Callable | None = None
    # (step) -> {node_id: {"name", "sql", "rollback"}} or None: the statements it sends only when it times out
    on_timeout: Callable | None = None
    # (step, row) -> {node_id: {"rollback": [...]}, ...}: the nodes whose statements it ran (default: step.nodes)
    ran_on: Callable | None = None
    # (step) -> the ProxySQL Cluster wait it does ({"origin", "peers", ...}) or None: a rollback waits the same way
    sync_wait: Callable | None = None
    # it checks each node's mysql_servers rows (params "expect", "rows"): a plan's VERIFY, where shared.py adds the
    # other clusters' rows on shared nodes ("others")
    row_verify: bool = False


class StepFailed(Exception):
    """A step handler's refusal to go on: the executor rolls the operation back (or keeps it for later past the point
    of no return)."""


def capture(fn: Callable[[Item], Any]) -> Callable[[Item], tuple[Any, Exception | None]]:
    """fn(x) -> (result, None) or ([], exception): lets every parallel node finish and report."""

    def wrapped(item: Item) -> tuple[Any, Exception | None]:
        try:
            return fn(item), None
        except Exception as exc:  # handed back to the caller, which raises the first one
            return [], exc

    return wrapped


@dataclass(frozen=True)
class PlanningServices:
    """What a planner in an app below operations (configuration's change sets) asks of the apps above it, served by
    the operations app in its AppConfig.ready() (serve()): the plan is made where its data lives; the Operation is
    kept, locked and run where every operation is."""

    holder: Callable  # (cluster) -> who holds the cluster or one of its ProxySQL nodes (locks.current_holder), or None
    pending_guard: Callable  # (cluster) -> Guard: no rollback or finish pending on the cluster (pending_rows.guard)
    annotate: Callable  # (plan, cluster) -> plan: what every planner ends with (shared.annotate)
    save_plan: Callable  # (plan, *, actor) -> Operation, stored as planned and audited (services.save_plan)
    traffic: (
        Callable  # (cluster_id) -> the cluster's stored digests of the last hour (digests.selectors.cluster_traffic)
    )


_SERVED: list[PlanningServices] = []


def serve(services: PlanningServices) -> None:
    _SERVED[:] = [services]


def planning() -> PlanningServices:
    """The services planners below operations ask for (PlanningServices); none before the apps are ready."""
    if not _SERVED:
        raise RuntimeError("the operations app has not served the planning services yet (apps not ready)")
    return _SERVED[0]


KINDS: dict[str, OperationSpec] = {}
STEPS: dict[str, StepHandler] = {}


def register_kind(spec: OperationSpec) -> None:
    if len(spec.kind) > 20:
        raise ValueError(f"operation kind {spec.kind!r} is longer than 20 characters (Operation.kind)")
    KINDS[spec.kind] = spec


def register_step(handler: StepHandler) -> None:
    STEPS[handler.kind] = handler


def kind_spec(kind: str) -> OperationSpec:
    """The registered spec of an operation kind; a kind nobody registered is refused by name."""
    try:
        return KINDS[kind]
    except KeyError:
        raise ValueError(f"no operation kind {kind!r} is registered") from None


def step_handler(kind: str) -> StepHandler:
    try:
        return STEPS[kind]
    except KeyError:
        raise ValueError(f"no step kind {kind!r} is registered") from None


def label(kind: str) -> str:
    """A kind's label; a kind no longer registered (an old row) shows as it is stored."""
    spec = KINDS.get(kind)
    return spec.label if spec else kind


def choices() -> list[tuple[str, str]]:
    """(kind, label) of every registered kind, in the order registered, for the pages' and the API's filters."""
    return [(s.kind, s.label) for s in KINDS.values()]


def held_by(rule: str) -> dict[str, str]:
    """{operation kind: CLUSTER or INVOLVED}: the kinds whose run holds this alert rule."""
    return {s.kind: s.holds[rule] for s in KINDS.values() if rule in s.holds}
