"""This app's step kinds, one StepHandler each (registry.py), registered exactly as other apps register theirs (dr:
moves.py): what each does (the executor's Run methods), what it undoes besides its ProxySQL statements, what the
re-check compares. The executor looks each step's handler up; it switches on no kind. A change set's steps are
configuration's (apps/configuration/change_set_kind.py)."""

from apps.plans.vocabulary import (
    BACKEND,
    INVENTORY,
    MONITOR_WRITER,
    PROXYSQL,
    VERIFY,
    WAIT_CATCHUP,
    WAIT_DRAIN,
    WAIT_MONITOR,
    WAIT_SYNC,
)
from apps.plans.registry import StepHandler, register_step

from . import native_switchover


def run_proxysql(run, step, row, executed, detail):
    """Each node's statements; past the point of no return (or a step already past it) a node that does not
    answer keeps the rest for later instead of failing the operation."""
    if run.op.point_of_no_return or step.forward_only:
        run.run_past_no_return(step, executed, detail)
    else:
        run.run_proxysql(step, executed)


def wait_drain(run, step, row, executed, detail):
    run.wait_drain(step, executed, detail)


def wait_sync(run, step, row, executed, detail):
    run.wait_sync(step.params, detail)


def wait_catchup(run, step, row, executed, detail):
    run.wait_catchup(step, detail)


def backend(run, step, row, executed, detail):
    run.backend_actions(step, executed)


def undo_backend(run, step, row):
    """read_only back where it was, a promoted replica demoted back: newest first."""
    undone = []
    for action in reversed(row.executed):
        if action.get("action") == "read_only" and action["from"] != action["to"]:
            run.backend(action["server"]).set_read_only(action["from"])
            undone.append(action)
        elif action.get("action") == "promote_replica":
            run.demote_back(action)
            undone.append(action)
    return undone


def verify(run, step, row, executed, detail):
    run.verify(step, detail)


def inventory(run, step, row, executed, detail):
    run.inventory(step, detail)


def drained_on(step, row):
    """A drain that timed out into OFFLINE_HARD ran those statements; otherwise its own (none)."""
    return step.params["offline_hard"] if row.detail.get("offline_hard") else step.nodes


HANDLERS = [
    StepHandler(PROXYSQL, run_proxysql, sends_nodes=True),
    StepHandler(
        WAIT_DRAIN,
        wait_drain,
        on_timeout=lambda step: step.params.get("offline_hard") or {},
        ran_on=drained_on,
        sync_wait=lambda step: step.params.get("then_sync"),
    ),
    StepHandler(WAIT_SYNC, wait_sync, sync_wait=lambda step: step.params),
    StepHandler(WAIT_CATCHUP, wait_catchup, backends=lambda step: [step.params["old"], step.params["new"]]),
    StepHandler(
        BACKEND,
        backend,
        undo=undo_backend,
        backends=lambda step: [action["server"] for action in step.params["actions"]],
    ),
    StepHandler(VERIFY, verify, check=True, row_verify=True),
    StepHandler(INVENTORY, inventory),
    # a switchover through ProxySQL's replication manager (native_switchover.py)
    StepHandler(WAIT_MONITOR, native_switchover.wait_monitor, check=True),
    StepHandler(MONITOR_WRITER, native_switchover.monitor_writer),
]


def register():
    for handler in HANDLERS:
        register_step(handler)
