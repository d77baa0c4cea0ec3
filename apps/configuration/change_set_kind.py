"""This app's operation kind, a change set applied (registry.OperationSpec), and its two step kinds (StepHandler),
registered in ConfigurationConfig.ready() as operations and dr register theirs: the executor runs them by
registry lookup and never names them."""

from typing import Protocol

from apps.accounts.roles import ADMIN
from apps.fleet.models import Cluster
from apps.plans.registry import PROPAGATE, RULES_OF_THE_NODES, OperationSpec, StepHandler, register_kind, register_step

from . import change_set, change_set_steps
from .change_set import CONFIG, CONFIG_RECORD, CONFIG_VERIFY


class _OnACluster(Protocol):
    """What confirm_role reads of an operation (operations.Operation, an app above this one)."""

    @property
    def cluster(self) -> Cluster: ...


def confirm_role(op: _OnACluster) -> tuple[str, str] | None:
    """A cluster may ask that only an admin confirm its configuration changes (Cluster.config_confirm_role)."""
    if op.cluster.config_confirm_role == ADMIN:
        return ADMIN, "On this cluster only an admin confirms configuration changes."
    return None


SPEC = OperationSpec(
    CONFIG,
    "configuration change",
    change_set.plan_change_set,
    change_set.replan,
    cluster_sync=PROPAGATE,
    confirm=confirm_role,
    holds=RULES_OF_THE_NODES,
)
HANDLERS = [
    StepHandler(CONFIG_VERIFY, change_set_steps.verify, check=True),
    StepHandler(CONFIG_RECORD, change_set_steps.record),
]


def register() -> None:
    register_kind(SPEC)
    for handler in HANDLERS:
        register_step(handler)
