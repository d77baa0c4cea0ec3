"""The recipe for a new operation kind (AGENTS.md), followed from a test module: a planner, one spec and one step
handler registered, and the shared machinery (save, confirm, the re-check at start, the executor, the audit) runs
it end to end. No migration and no edit in apps/operations."""

import pytest

from apps.audit.models import AuditEvent
from apps.fleet.models import ProxySQLNode
from apps.operations import shared
from apps.operations.choices import OperationState, StepState
from apps.plans.vocabulary import Guard, Plan, Step
from apps.plans.registry import KINDS, STEPS, OperationSpec, StepHandler, register_kind, register_step

from .conftest import run_plan

pytestmark = pytest.mark.django_db

COUNT_ROWS, COUNT = "count_rows", "count_rows"  # the kind and its one step kind


def plan_count(cluster, node):
    """The planner: one step that counts the node's runtime mysql_servers rows (Plan.options: how to plan it again)."""
    steps = [Step("count", f"Count {node.name}'s runtime servers", COUNT, params={"node": str(node.pk)})]
    guards = [Guard("node_in_cluster", "The node belongs to the cluster", node.cluster_id == cluster.pk, node.name)]
    return shared.annotate(
        Plan(COUNT_ROWS, cluster.pk, f"Count rows on {node.name}", guards, steps, options={"node": node.pk}), cluster
    )


def count(run, step, row, executed, detail):
    """The step's handler: it reads through the run's connection to the node, as every step does."""
    rows = run.admin(step.params["node"]).servers("runtime")
    executed.append({"node": step.params["node"], "rows": len(rows)})
    detail["rows"] = len(rows)


@pytest.fixture
def count_rows_kind():
    register_kind(
        OperationSpec(
            COUNT_ROWS,
            "count the rows",
            plan_count,
            lambda cluster, o: plan_count(cluster, ProxySQLNode.objects.get(pk=o["node"])),
            why_held="it writes nothing",
        )
    )
    register_step(StepHandler(COUNT, count, check=True))
    yield
    del KINDS[COUNT_ROWS], STEPS[COUNT]


def test_a_kind_registered_from_outside_runs_end_to_end(adopted_lab, operator_user, count_rows_kind):
    cluster, (first, _second) = adopted_lab
    node = cluster.proxysql_nodes.get(admin_port=first.port)

    op = run_plan(plan_count(cluster, node), operator_user)

    assert op.state == OperationState.DONE, op.error
    assert op.get_kind_display() == "count the rows"
    assert op.timings["recheck_ms"] is not None  # planned again at start by its spec's replan, and the same
    (step,) = op.steps.all()
    assert step.state == StepState.DONE
    assert step.detail["rows"] > 0 and step.executed == [{"node": str(node.pk), "rows": step.detail["rows"]}]
    assert set(
        AuditEvent.objects.filter(cluster_id=cluster.pk, action__startswith="count_rows ").values_list(
            "action", flat=True
        )
    ) == {"count_rows planned", "count_rows confirmed", "count_rows done"}
