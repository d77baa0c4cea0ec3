"""A rollout's canary (issue 38): wave 0 is ONE ProxySQL node of the first cluster, wave 1 the rest of that cluster.

It is that cluster's change set, planned by plan_change_set as every change set is, as one operation of the kind
"rollout_canary": its apply step split in two, the canary node's statements, then a bake step (the rollout's gate
read on the canary node for the canary's bake time), then the other nodes' statements; verify, save and record
after, as for any change set. The kind holds ProxySQL Cluster sync whatever the cluster's mode (OperationSpec
cluster_sync HOLD, why_held): the hold's first step covers every node the plan writes, so no peer pulls the canary's
change while it bakes, and the last step restores it once the whole cluster runs the change. A gate that fails ends
the step failed: the executor rolls the canary back (its undo, then the hold's restore) as any operation's rollback,
and no version is recorded. The version is recorded once, when every node runs the change."""

from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.utils import timezone

from apps.configuration.models import ChangeSet
from apps.configuration.secrets import Collector
from apps.configuration.services import Refused
from apps.configuration.change_set import plan_change_set
from apps.fleet.models import Cluster
from apps.operations.executor import Run, StepFailed
from apps.operations.choices import OperationKind
from apps.plans.vocabulary import Plan, Step
from apps.plans.registry import HOLD, OperationSpec, StepHandler, kind_spec, register_kind, register_step

from . import gates, waves
from .models import Rollout, WaveState

KIND = "rollout_canary"
BAKE = "rollout_bake"
APPLY, APPLY_CANARY, BAKE_KEY = "apply", "apply_canary", "canary_bake"


class CanaryOptions(TypedDict):
    """The canary operation's options (kept in Plan.options: the re-check at start plans it again the same way)."""

    rollout: int
    wave: int
    node: int
    bake_s: float


def plan_canary(cs: ChangeSet, options: CanaryOptions) -> tuple[Plan, Collector]:
    """(Plan, Collector): the change set's plan, its canary node first, baked, then the rest."""
    plan, collector = plan_change_set(cs, kind=KIND)
    node = str(options["node"])
    at = next(i for i, s in enumerate(plan.steps) if s.key == APPLY)
    apply = plan.steps[at]
    if node not in apply.nodes:
        raise Refused(f"the canary node #{node} cannot be read now: {plan.facts.get('unreachable')}")
    name = apply.nodes[node]["name"]
    rest = {k: v for k, v in apply.nodes.items() if k != node}
    canary = Step(
        APPLY_CANARY,
        f"Write the changes to memory and LOAD them to runtime on {name} only (the canary)",
        apply.kind,
        {node: apply.nodes[node]},
    )
    bake = Step(
        BAKE_KEY,
        f"Bake the canary {options['bake_s']:g} s: the rollout's health gate read on {name} "
        "(its peers do not pull the change meanwhile: the sync is held)",
        BAKE,
        params={"rollout": options["rollout"], "wave": options["wave"], "node": int(node), "bake_s": options["bake_s"]},
    )
    apply.nodes, apply.title = rest, "Write the changes to memory and LOAD them to runtime on the other nodes"
    plan.steps[at : at + 1] = [canary, bake, apply]
    plan.options = {"change_set": cs.pk, **options}
    plan.facts["canary"] = {"node": name, "bake_s": options["bake_s"]}
    return plan, collector


def replan(cluster: Cluster, options: dict[str, Any]) -> Plan:
    cs = ChangeSet.objects.select_related("base", "cluster").get(pk=options["change_set"])
    canary = CanaryOptions(
        rollout=options["rollout"], wave=options["wave"], node=options["node"], bake_s=options["bake_s"]
    )
    return plan_canary(cs, canary)[0]


def bake(run: Run, step: Step, row: object, executed: list[str], detail: dict[str, Any]) -> None:
    """The canary's bake inside its operation: the rollout's gate on the canary node every GATE_STEP_S until the
    bake time is over; the first bad reading (or an abort of the rollout) fails the step, and the executor rolls the
    canary back. The rollout's wave 0 says what happens (baking, its gate, passed) and wave 1 starts applying."""
    p = step.params
    rollout = Rollout.objects.get(pk=p["rollout"])
    wave = p["wave"]
    applied = timezone.now()
    waves.wave(rollout, wave, state=WaveState.BAKING, applied_at=applied.isoformat())
    started = datetime.fromisoformat(rollout.waves[wave]["started_at"])
    ends = applied + timedelta(seconds=p["bake_s"])
    seen = 0.0  # the newest poll of the canary judged so far
    kept = gates.Kept()
    while True:
        verdict = waves.gate(rollout, wave, started, applied, nodes=[p["node"]], kept=kept)
        detail["gate"] = verdict
        if verdict["ok"] and waves.halt_requested(rollout):  # an operator's halt: as a failed gate
            verdict = waves.operator_halt(verdict, waves.halt_requested(rollout))
        if not verdict["ok"]:
            waves.wave(rollout, wave, gate=verdict)
            raise StepFailed(f"wave {wave} failed its health gate: {verdict['why']}")
        if timezone.now() >= ends:
            break
        if waves.aborting(rollout):
            raise StepFailed("the rollout was aborted during the canary's bake")
        run.beat()  # the operation's heartbeat and lock
        Rollout.objects.filter(pk=rollout.pk).update(heartbeat_at=timezone.now())
        # judged again at the canary's next poll (as soon as it lands), at the latest after GATE_STEP_S
        seen = gates.wait_for_poll(
            [p["node"]], min(waves.GATE_STEP_S, max(0.0, (ends - timezone.now()).total_seconds())), seen
        )
    waves.wave(rollout, wave, gate=verdict, state=WaveState.PASSED)
    waves.wave(rollout, wave + 1, state=WaveState.APPLYING, started_at=timezone.now().isoformat())


def register() -> None:
    config = kind_spec(OperationKind.CONFIG)  # a change set's: who confirms it, the alerts it holds
    register_kind(
        OperationSpec(
            KIND,
            "rollout canary",
            plan_canary,
            replan,
            cluster_sync=HOLD,
            why_held="a rollout's canary: its peers must not pull its change while it bakes",
            confirm=config.confirm,
            holds=config.holds,
        )
    )
    register_step(StepHandler(BAKE, bake))
