"""Operation kinds are registered by their apps, not switched on: every kind there is has one spec (registry.py)
with its planners, and the re-check at start refuses plainly a kind nobody registered."""
import pytest

from apps.alerts.catalogue import BY_KEY
from apps.operations import recheck
from apps.operations.choices import OperationKind
from apps.operations.registry import CLUSTER, HOLD, INVOLVED, KINDS, PROPAGATE


def test_every_operation_kind_has_a_registered_spec_with_its_planners():
    assert set(KINDS) == set(OperationKind.values)
    assert all(spec.kind == kind for kind, spec in KINDS.items())
    assert all(callable(spec.replan) and callable(spec.planner) and spec.label for spec in KINDS.values())


def test_each_spec_names_real_alert_rules_and_a_sync_policy_with_its_reason():
    for spec in KINDS.values():
        assert set(spec.holds) <= set(BY_KEY), spec.kind
        assert set(spec.holds.values()) <= {CLUSTER, INVOLVED}, spec.kind
        assert spec.cluster_sync in (HOLD, PROPAGATE), spec.kind
    assert {k for k, s in KINDS.items() if s.cluster_sync == PROPAGATE} == {
        OperationKind.CONFIG, OperationKind.DRAIN, OperationKind.RESTORE}
    assert all(s.why_held for k, s in KINDS.items() if s.cluster_sync == HOLD and k != OperationKind.CHANNEL_MOVE)


def test_a_kind_without_a_planner_is_refused_by_name():
    class Unregistered:
        kind = "not_a_kind"
        cluster = None
        plan = {"options": {}}

    with pytest.raises(ValueError, match="no planner registered for 'not_a_kind'"):
        recheck.replan(Unregistered())
