"""Operation kinds and step kinds are registered, not switched on (issue 35): apps/operations reads a kind's spec or a
step's handler (apps/plans/registry.py) and never compares a kind, so a new kind is a planner module, one
registration and its doors. A cluster's topology kind (ClusterKind: Galera, async...) is not an operation's kind."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _is_kind(node):
    return (isinstance(node, ast.Attribute) and node.attr == "kind") or (
        isinstance(node, ast.Name) and node.id == "kind"
    )


def _cluster_kind(node):
    """cluster.kind, or a ClusterKind member: the topology, which planners rightly ask about."""
    return (
        isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "cluster"
    ) or "ClusterKind" in ast.unparse(node)


def kind_switches(source):
    """Each place the source decides on a kind: a comparison with a kind (==, !=, in, not in), a dict literal
    indexed by one ({...}[step.kind], {...}.get(step.kind)), a test on its text (step.kind.endswith(...))."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_kind(s) for s in sides) and not any(_cluster_kind(s) for s in sides):
                found.append(ast.unparse(node))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Dict) and _is_kind(node.slice):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            on = node.func.value
            if (_is_kind(on) and not _cluster_kind(on)) or (
                isinstance(on, ast.Dict) and node.func.attr == "get" and node.args and _is_kind(node.args[0])
            ):
                found.append(ast.unparse(node))
    return found


def test_the_check_finds_each_way_of_switching_on_a_kind():
    source = (
        "if step.kind == PROXYSQL:\n    pass\n"
        "x = [s for s in steps if s.kind != VERIFY]\n"
        "y = op.kind in (A, B)\n"
        "z = {PROXYSQL: 1}.get(step.kind, {})\n"
        "w = {PROXYSQL: 1}[step.kind]\n"
        "v = step.kind.endswith('_verify')\n"
        "if kind == 'x':\n    pass\n"
        "if cluster.kind == ClusterKind.GALERA:\n    pass\n"
        "u = node.kind != ClusterKind.ASYNC\n"
        "t = step_handler(step.kind).check\n"
    )
    assert sorted(kind_switches(source)) == sorted(
        [
            "step.kind == PROXYSQL",
            "s.kind != VERIFY",
            "op.kind in (A, B)",
            "{PROXYSQL: 1}.get(step.kind, {})",
            "{PROXYSQL: 1}[step.kind]",
            "step.kind.endswith('_verify')",
            "kind == 'x'",
        ]
    )


def test_operations_switch_on_no_kind():
    modules = [
        p
        for p in sorted((ROOT / "apps" / "operations").rglob("*.py"))
        if "tests" not in p.relative_to(ROOT).parts and "migrations" not in p.relative_to(ROOT).parts
    ]
    assert any(p.name == "executor.py" for p in modules)  # the walk really reads the app
    offenders = {str(p.relative_to(ROOT)): found for p in modules if (found := kind_switches(p.read_text()))}
    assert offenders == {}, (
        "apps/operations decides on a kind: register it instead (a field of its OperationSpec or "
        "StepHandler, apps/plans/registry.py): " + repr(offenders)
    )
