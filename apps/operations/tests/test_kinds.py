"""Operation kinds are registered by their apps, not switched on: the re-check at start finds a planner for
every kind there is, and refuses plainly a kind nobody registered."""
import pytest

from apps.operations import recheck
from apps.operations.choices import OperationKind
from apps.operations.plans import REPLANNERS


def test_every_operation_kind_has_a_registered_planner():
    assert set(REPLANNERS) == set(OperationKind.values)
    assert all(callable(planner) for planner in REPLANNERS.values())


def test_a_kind_without_a_planner_is_refused_by_name():
    class Unregistered:
        kind = "not_a_kind"
        cluster = None
        plan = {"options": {}}

    with pytest.raises(ValueError, match="no planner registered for 'not_a_kind'"):
        recheck.replan(Unregistered())
