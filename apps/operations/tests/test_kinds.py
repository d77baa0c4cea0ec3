"""Operation kinds are registered by their apps, not switched on: every kind there is has one spec (registry.py)
with its planners, and the re-check at start refuses plainly a kind nobody registered."""

import pytest

from apps.alerts.catalogue import BY_KEY
from apps.dr.moves import CHANNEL_MOVE
from apps.operations import recheck
from apps.operations.choices import OperationKind
from apps.operations.models import Operation
from apps.plans.registry import CLUSTER, HOLD, INVOLVED, KINDS, PROPAGATE
from apps.rollouts.canary import KIND as ROLLOUT_CANARY


def test_every_operation_kind_has_a_registered_spec_with_its_planners():
    built_in = {value for name, value in vars(OperationKind).items() if name.isupper()}
    assert set(KINDS) == built_in | {CHANNEL_MOVE, ROLLOUT_CANARY}
    assert all(spec.kind == kind for kind, spec in KINDS.items())
    assert all(callable(spec.replan) and callable(spec.planner) and spec.label for spec in KINDS.values())


def test_each_spec_names_real_alert_rules_and_a_sync_policy_with_its_reason():
    for spec in KINDS.values():
        assert set(spec.holds) <= set(BY_KEY), spec.kind
        assert set(spec.holds.values()) <= {CLUSTER, INVOLVED}, spec.kind
        assert spec.cluster_sync in (HOLD, PROPAGATE), spec.kind
    assert {k for k, s in KINDS.items() if s.cluster_sync == PROPAGATE} == {
        OperationKind.CONFIG,
        OperationKind.DRAIN,
        OperationKind.RESTORE,
    }
    assert all(s.why_held for k, s in KINDS.items() if s.cluster_sync == HOLD and k != CHANNEL_MOVE)


def test_a_kind_without_a_planner_is_refused_by_name():
    class Unregistered:
        kind = "not_a_kind"
        cluster = None
        plan = {"options": {}}

    with pytest.raises(ValueError, match="no planner registered for 'not_a_kind'"):
        recheck.replan(Unregistered())


def test_an_operation_of_a_kind_nobody_registered_is_not_stored():
    # Operation.kind has no choices (a new kind needs no migration): the registry is what it is checked against.
    with pytest.raises(ValueError, match="no operation kind 'not_a_kind' is registered"):
        Operation(kind="not_a_kind", cluster_id=1, title="x", actor="t", plan={}).save()
    assert Operation(kind=OperationKind.REPAIR).get_kind_display() == "repair from the inventory"
