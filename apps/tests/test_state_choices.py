"""Issue 25: states are compared through their choice sets, never as bare strings. A bare "done" or "failed" in a
filter or a comparison is a typo away from a check that silently never matches (and a renamed state leaves it
behind); OperationState.DONE fails loudly. Checked over every product module (tests may spell states out)."""

import ast

from apps.alerts.models import AlertState, DeliveryState
from apps.configuration.models import ChangeSet
from apps.operations.choices import OperationState, PendingState, StepState
from apps.rollouts.models import ClusterState, RolloutState, WaveState
from apps.tests.test_boundaries import ROOT, product_modules

STATE_VALUES = {
    str(v)
    for choices in (
        OperationState,
        PendingState,
        StepState,
        AlertState,
        DeliveryState,
        ChangeSet.State,
        RolloutState,
        ClusterState,
        WaveState,
    )
    for v in choices.values
}


def _literals(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
    return []


def bare_states(source):
    """(line, value) for each state spelled as a bare string: `x.state == "done"`, `x.state in ("a", "b")`,
    `.filter(state="done")`, `.exclude(state__in=[...])`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(n, ast.Attribute) and n.attr == "state" for n in sides):
                found += [(node.lineno, v) for n in sides for v in _literals(n) if v in STATE_VALUES]
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in ("state", "state__in"):
                    found += [(node.lineno, v) for v in _literals(kw.value) if v in STATE_VALUES]
    return found


def test_the_check_finds_each_way_of_spelling_a_state():
    assert bare_states(
        'op.state == "done"\nif step.state in ("pending", "running"): pass\n'
        'Operation.objects.filter(state="failed")\nqs.exclude(state__in=["planned"])\n'
        'op.state == OperationState.DONE\nf.state == "all"\nstate = "running"\n'
    ) == [(1, "done"), (2, "pending"), (2, "running"), (3, "failed"), (4, "planned")]


def test_no_product_module_compares_a_state_to_a_bare_string():
    modules = list(product_modules())
    assert any(str(m) == "apps/operations/executor.py" for m in modules)  # the walk really reads the apps
    offenders = {str(m): found for m in modules if (found := bare_states((ROOT / m).read_text()))}
    assert offenders == {}, "compare states through their choice sets (OperationState.DONE...): " + repr(offenders)
