"""Fleet rollouts (issue 38): one change to many clusters, wave by wave, each cluster through the existing change
set machinery (create -> plan_and_save -> confirm -> the executor: guards, effect check, SQL per node with undo,
versions, three layers, audit), a health gate after each wave, and a rollback of a wave through revert change sets.

Wave 0 is the canary: ONE ProxySQL node of the first cluster, wave 1 the rest of that cluster (with the other
clusters of the first wave size): that cluster's change set runs as one "rollout_canary" operation (canary.py) that
writes the canary node, bakes it under the held ProxySQL Cluster sync, then writes the rest. A one-node cluster is
its own canary (wave 0 then is the first wave size's clusters).
The state is in the database (Rollout.waves, RolloutCluster.state): run() may be called again after a worker's
death and goes on from what is stored; a change set left mid-run is waited for (the executor's reaper ends it)."""

import math
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from datetime import datetime, timedelta
from typing import Any, TypedDict

import yaml
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.accounts.roles import OPERATOR, has_role
from apps.alerts import events
from apps.audit.actor import Actor
from apps.audit.models import ActorKind
from apps.audit.services import record
from apps.configuration import files
from apps.configuration import services as config
from apps.configuration.tables import TABLES
from apps.configuration.models import ChangeSet
from apps.fleet import tags as fleet_tags
from apps.fleet.models import Cluster, ProxySQLNode
from apps.operations import executor
from apps.operations import services as operations
from apps.configuration.change_set import plan_and_save, plan_change_set
from apps.operations.choices import OperationState
from apps.operations.locks import current_holder
from apps.operations.models import Operation
from controlplane import tasks

from . import gates
from .canary import CanaryOptions, plan_canary
from . import waves
from .waves import GATE_STEP_S, HALTED_RULE, Verdict, gate, halt_requested, operator_halt
from .models import ENDED, ClusterState, Rollout, RolloutCluster, RolloutState, WaveState, WhenBusy

STALE_AFTER_S = 60  # a running rollout whose worker has not beaten for this long is taken up again


class Refused(Exception):
    pass


class Selector(TypedDict):
    """Which clusters a rollout picks (Rollout.selector): every tag ([key, value]), and these names and versions
    when given (parse_selector, the API)."""

    tags: list[list[str]]
    names: list[str]
    versions: list[str]


class Change(TypedDict, total=False):
    """The change (Rollout.change), one of the two: a change set's edits (create_change_set's JSON edits) or a YAML
    fragment (fragment_file). _check_change refuses any other shape."""

    edits: list[dict[str, Any]]
    file: str


class FirstPlan(TypedDict):
    cluster: str
    lines: list[str]


class ClusterRow(TypedDict):
    name: str
    state: str
    error: str
    change_set: int | None
    revert: int | None


class WaveRow(TypedDict):
    wave: int
    canary: bool
    node: str | None
    rest_of_canary: bool
    state: str
    gate: Verdict | None
    clusters: list[ClusterRow]


class Thresholds(TypedDict):
    max_error_rate: float
    max_latency_ratio: float
    max_mirror_queue_share: float


class Described(TypedDict):
    """describe(): the rollout as the doors print it (API RolloutSerializer, the pages, the command, the audit)."""

    rollout: int
    state: str
    reason: str
    waves_text: str
    clusters: int
    halt_reason: str
    bake_canary_s: float
    bake_s: float
    thresholds: Thresholds
    roll_back_before: bool
    waves: list[WaveRow]


# -- the plan ---------------------------------------------------------------------------------------------------
def parse_waves(text: str, fleet_size: int) -> list[int]:
    """Wave sizes from "1,1,25%,100%": N is N more clusters, P% is up to P% of the selected fleet in total
    (rounded up); a wave that adds nothing is dropped, and the last wave takes every cluster left."""
    items = [t.strip() for t in str(text).split(",") if t.strip()]
    if not items:
        raise Refused("waves: give at least one, e.g. 1,1,25%,100%")
    sizes: list[int] = []
    total = 0
    for item in items:
        try:
            if item.endswith("%"):
                percent = float(item[:-1])
                if not 0 < percent <= 100:
                    raise ValueError
                size = math.ceil(fleet_size * percent / 100) - total
            else:
                size = int(item)
                if size < 1:
                    raise ValueError
        except ValueError:
            raise Refused(f"waves: {item!r} is neither a count (1, 2...) nor a share of the fleet (25%)") from None
        size = min(size, fleet_size - total)
        if size > 0:
            sizes.append(size)
            total += size
    if total < fleet_size:
        sizes[-1] += fleet_size - total
    return sizes


def parse_selector(items: Iterable[str] | None) -> Selector:
    """{"tags": [[key, value]], "names": [...], "versions": [...]} from command-line words: env=prod (a tag),
    name=alpha (a cluster), version=2.7 (clusters whose every ProxySQL node runs 2.7.x)."""
    selector: Selector = {"tags": [], "names": [], "versions": []}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not value:
            raise Refused(f"select: {item!r} is not key=value (env=prod, or name=CLUSTER)")
        if key == "name":
            selector["names"].append(value)
        elif key == "version":
            selector["versions"].append(value)
        else:
            try:
                selector["tags"].append(list(fleet_tags.check(key, value)))
            except fleet_tags.BadTag as exc:
                raise Refused(f"select: {exc}") from None
    return selector


def select(selector: Selector) -> list[Cluster]:
    """The selected clusters in a deterministic order (by name): every tag must match; names, when given, too."""
    if len(selector.get("tags") or ()) > fleet_tags.TAGS_MAX:  # each is a subquery: no cluster has more
        raise Refused(f"select: at most {fleet_tags.TAGS_MAX} tags")
    clusters = Cluster.objects.all()
    for key, value in selector.get("tags") or ():
        clusters = fleet_tags.tagged(clusters, key, value)
    names = selector.get("names") or []
    if names:
        clusters = clusters.filter(name__in=names)
        missing = sorted(set(names) - set(clusters.values_list("name", flat=True)))
        if missing:
            raise Refused(f"select: no such cluster (or not matching the tags): {', '.join(missing)}")
    chosen = list(clusters.order_by("name"))
    versions = selector.get("versions") or []
    if versions:
        chosen = [c for c in chosen if _runs(c, versions)]
    if not chosen:
        raise Refused("select: no cluster matches")
    return chosen


def _runs(cluster: Cluster, versions: list[str]) -> bool:
    """Every ProxySQL node of the cluster runs one of these versions (2.7 is 2.7.x; a node's version as the polls
    read it, fleet/node_versions.py; a node not read yet matches none)."""
    found = list(cluster.proxysql_nodes.values_list("version", flat=True))
    return bool(found) and all(any(v == p or v.startswith((p + ".", p + "-")) for p in versions) for v in found)


def _check_change(change: Change) -> None:
    if set(change) == {"edits"} and isinstance(change["edits"], list) and change["edits"]:
        return
    if set(change) == {"file"} and isinstance(change["file"], str) and change["file"].strip():
        return
    raise Refused('change: give {"edits": [...]} (a change set\'s edits) or {"file": "<YAML>"} (a fragment)')


def fragment_file(cluster: Cluster, fragment: str) -> str:
    """The configuration file (files.py) that a YAML fragment makes of the cluster's current version: the tables
    the fragment names replaced by its rows (a named table is desired state, whole), the variables it names set;
    everything else as the cluster has it. So the one file service (start_from_file) makes every change set."""
    try:
        doc = files.load(fragment)
    except files.FileError as exc:
        raise Refused(f"the fragment cannot be used: {exc}") from None
    tables = {t.name for t in TABLES}
    if not isinstance(doc, dict) or not doc or set(doc) - tables - {files.VARIABLES}:
        extra = sorted(set(doc) - tables - {files.VARIABLES}) if isinstance(doc, dict) else []
        raise Refused(
            "the fragment names tables and global_variables only" + (f" (not {', '.join(extra)})" if extra else "")
        )
    current = config.latest(cluster)
    if current is None:
        raise Refused(f"{cluster} has no configuration version yet")
    whole = yaml.safe_load(files.export(current))
    whole.pop("version", None)
    variables = doc.pop(files.VARIABLES, None) or {}
    if not isinstance(variables, dict):
        raise Refused("the fragment's global_variables must be a mapping")
    whole.update(doc)
    whole[files.VARIABLES] = {**(whole.get(files.VARIABLES) or {}), **variables}
    return yaml.safe_dump(whole, sort_keys=False)


def _validate(cluster: Cluster, change: Change, actor: Actor, reason: str) -> ChangeSet:
    """The change set the change makes on `cluster`, checked as creating it would check it, nothing written
    (configuration's validate_change_set). NothingToDo when the cluster already runs it."""
    if "file" in change:
        return config.validate_change_set(
            cluster, actor=actor, reason=reason, file=fragment_file(cluster, change["file"])
        )
    return config.validate_change_set(cluster, actor=actor, reason=reason, edits=change["edits"])


def _check_applies(cluster: Cluster, change: Change, actor: Actor) -> None:
    """Refuse now a change that cannot apply to a selected cluster, or that the planner may not make there."""
    try:
        _validate(cluster, change, actor, "rollout check")
    except config.NothingToDo:
        pass


def _canary_node(cluster: Cluster) -> ProxySQLNode | None:
    """The first cluster's canary: its first ProxySQL node, when it has others (a one-node cluster is its own)."""
    nodes = list(cluster.proxysql_nodes.order_by("pk")[:2])
    return nodes[0] if len(nodes) == 2 else None


def _check_operator(actor: Actor) -> None:
    if actor.user is None or not has_role(actor.user, OPERATOR):
        raise Refused("rollouts are planned, started and aborted by an operator (or an admin)")


def plan(
    change: Change,
    selector: Selector,
    waves_text: str,
    *,
    actor: Actor,
    reason: str,
    bake_canary_s: float = 60,
    bake_s: float = 30,
    max_error_rate: float = 1.0,
    when_busy: str = WhenBusy.WAIT,
    busy_wait_s: float = 300,
    max_latency_ratio: float = 2.0,
    max_mirror_queue_share: float = 0.8,
    roll_back_before: bool = False,
) -> Rollout:
    """A planned rollout: the exact clusters per wave, each checked that the change applies. Audited."""
    _check_operator(actor)
    if not reason.strip():
        raise Refused("reason: say why (kept with the rollout, each change set and the audit log)")
    _check_change(change)
    if bake_canary_s < 0 or bake_s < 0 or max_error_rate < 0 or busy_wait_s < 0:
        raise Refused("bake times, the error threshold and the wait for a busy cluster cannot be negative")
    if max_latency_ratio < 1:
        raise Refused("the latency threshold is a ratio to the latency before: 1 or more (2: twice as slow)")
    if not 0 < max_mirror_queue_share <= 1:
        raise Refused("the mirror threshold is a share of the queue's limit: above 0, at most 1 (0.8: 80 %)")
    if when_busy not in WhenBusy.values:
        raise Refused(f"when busy: {when_busy!r} is neither wait nor skip")
    clusters = select(selector)
    sizes = parse_waves(waves_text, len(clusters))
    for cluster in clusters:
        try:
            _check_applies(cluster, change, actor)
        except (config.Refused, Refused) as exc:
            raise Refused(f"{cluster}: {exc}") from None
    waves: list[dict[str, Any]] = []  # Rollout.waves: one entry a wave
    at = 0
    canary = _canary_node(clusters[0])
    if canary is not None:  # wave 0: one node of the first cluster; the first wave then holds the rest of it
        waves.append({"clusters": [clusters[0].pk], "node": canary.pk, "state": WaveState.PENDING})
    for size in sizes:
        waves.append({"clusters": [c.pk for c in clusters[at : at + size]], "state": WaveState.PENDING})
        at += size
    with transaction.atomic():
        rollout = Rollout.objects.create(
            reason=reason,
            change=change,
            selector=selector,
            waves_text=waves_text,
            waves=waves,
            bake_canary_s=bake_canary_s,
            bake_s=bake_s,
            max_error_rate=max_error_rate,
            when_busy=when_busy,
            busy_wait_s=busy_wait_s,
            max_latency_ratio=max_latency_ratio,
            max_mirror_queue_share=max_mirror_queue_share,
            roll_back_before=roll_back_before,
            planned_by=actor.user,
            planner=actor.who,
        )
        position = 0
        for n, wave in enumerate(waves):
            for pk in wave["clusters"]:
                if not RolloutCluster.objects.filter(rollout=rollout, cluster_id=pk).exists():  # the canary's: once
                    RolloutCluster.objects.create(rollout=rollout, cluster_id=pk, wave=n, position=position)
                    position += 1
        record("rollout planned", actor=actor, target=str(rollout), details={**describe(rollout)})
    return rollout


def first_cluster_plan(rollout: Rollout) -> FirstPlan:
    """The plan the first cluster's change set would get now (guards, then SQL per node), read from its nodes: what
    `rollout plan` prints. Nothing is saved (validate_change_set writes no row; the plan only reads)."""
    first = rollout.clusters.select_related("cluster").order_by("position").first()
    assert first is not None, "plan() selects one cluster at least"
    cluster = first.cluster
    try:
        cs = _validate(cluster, rollout.change, Actor(ActorKind.USER, user=rollout.planned_by), rollout.reason)
    except config.NothingToDo:
        return {"cluster": cluster.name, "lines": ["nothing to do: it already runs the change"]}
    plan_, _ = plan_change_set(cs)
    lines = [f"[{'pass' if g.passed else 'BLOCKS'}] {g.label}: {g.value}" for g in plan_.guards]
    for step in plan_.steps:
        for spec in step.nodes.values():
            lines += [f"-- {step.key} on {spec['name']}"] + [f"{sql};" for sql in spec["sql"]] if spec["sql"] else []
    return {"cluster": cluster.name, "lines": lines}


def describe(rollout: Rollout) -> Described:
    """The rollout as data: its waves with their clusters' names and states (the doors print this)."""
    rows = {rc.cluster_id: rc for rc in rollout.clusters.select_related("cluster")}
    canary = rollout.waves[0].get("node") if rollout.waves else None
    node = ProxySQLNode.objects.filter(pk=canary).values_list("name", flat=True).first() if canary else None
    return {
        "rollout": rollout.pk,
        "state": rollout.state,
        "reason": rollout.reason,
        "waves_text": rollout.waves_text,
        "clusters": len(rows),
        "halt_reason": rollout.halt_reason,
        "bake_canary_s": rollout.bake_canary_s,
        "bake_s": rollout.bake_s,
        "thresholds": {
            "max_error_rate": rollout.max_error_rate,
            "max_latency_ratio": rollout.max_latency_ratio,
            "max_mirror_queue_share": rollout.max_mirror_queue_share,
        },
        "roll_back_before": rollout.roll_back_before,
        "waves": [
            {
                "wave": n,
                "canary": n == 0,
                "node": node if n == 0 else None,
                "rest_of_canary": n == 1 and canary is not None,
                "state": w["state"],
                "gate": w.get("gate"),
                "clusters": [
                    {
                        "name": rows[pk].cluster.name,
                        "state": rows[pk].state,
                        "error": rows[pk].error,
                        "change_set": rows[pk].change_set_id,
                        "revert": rows[pk].revert_id,
                    }
                    for pk in w["clusters"]
                ],
            }
            for n, w in enumerate(rollout.waves)
        ],
    }


# -- start, abort -----------------------------------------------------------------------------------------------
def start(rollout: Rollout, *, actor: Actor, enqueue: bool = True) -> Rollout:
    """planned -> running (audited); the worker's task (workers/rollouts.py) runs it. The two-person rule of any
    selected cluster applies to the whole rollout: its starter must not be its planner."""
    _check_operator(actor)
    strict = [rc.cluster.name for rc in rollout.clusters.select_related("cluster") if rc.cluster.two_person_rule]
    if strict and actor.user is not None and actor.user.pk == rollout.planned_by_id:
        raise Refused(
            f"{', '.join(strict)} require(s) two people: {rollout.planner} planned this rollout, so "
            "someone else must start it."
        )
    with transaction.atomic():
        if not Rollout.objects.filter(pk=rollout.pk, state=RolloutState.PLANNED).update(
            state=RolloutState.RUNNING, started_by=actor.user, heartbeat_at=timezone.now()
        ):
            raise Refused(f"{rollout} is not planned any more (it is {Rollout.objects.get(pk=rollout.pk).state})")
        record("rollout started", actor=actor, target=str(rollout), details={"rollout": rollout.pk})
        if enqueue:
            transaction.on_commit(lambda: tasks.enqueue("rollouts.run", (rollout.pk,)))
    rollout.refresh_from_db()
    return rollout


def abort(rollout: Rollout, *, actor: Actor, enqueue: bool = True) -> Rollout:
    """A planned rollout ends aborted; a running or halted one rolls back every wave it applied, newest first:
    run() does it, at its next check when a worker runs it, else queued now (or run here, without `enqueue`)."""
    _check_operator(actor)
    with transaction.atomic():
        rollout = Rollout.objects.select_for_update().get(pk=rollout.pk)
        if rollout.state in ENDED and rollout.state != RolloutState.HALTED:
            raise Refused(f"{rollout} already ended ({rollout.state})")
        was = rollout.state
        if was == RolloutState.PLANNED:
            rollout.state = RolloutState.ABORTED
        else:
            rollout.abort_requested, rollout.state = True, RolloutState.RUNNING
        rollout.heartbeat_at = timezone.now()  # queued now: not a dead worker's for resume_stale
        rollout.save(update_fields=["state", "abort_requested", "heartbeat_at", "updated_at"])
        record("rollout abort requested", actor=actor, target=str(rollout), details={"rollout": rollout.pk, "was": was})
        idle = was in (RolloutState.HALTED, RolloutState.PAUSED)  # no worker runs it: queue it to roll back
        if idle and enqueue:
            transaction.on_commit(lambda: tasks.enqueue("rollouts.run", (rollout.pk,)))
    if idle and not enqueue:
        run(rollout.pk)
    rollout.refresh_from_db()
    return rollout


# -- the run ----------------------------------------------------------------------------------------------------
def run(rollout_id: int) -> str:
    """Run (or go on with) a rollout from its stored state until it ends; re-entrant."""
    rollout = Rollout.objects.get(pk=rollout_id)
    if rollout.state != RolloutState.RUNNING:
        return rollout.state
    for n in range(len(rollout.waves)):
        if rollout.waves[n]["state"] == WaveState.PASSED:
            continue
        if waves.aborting(rollout):
            break
        if rollout.waves[n]["state"] == WaveState.PENDING and _paused(rollout):
            return RolloutState.PAUSED
        if rollout.waves[n]["state"] == WaveState.PENDING and halt_requested(rollout):  # between waves: stop here
            why = halt_requested(rollout)
            errors = _roll_back_before(rollout, n)
            _end(rollout, RolloutState.HALTED, "rollout halted", why=why, errors=errors)
            _alert_halt(rollout, n - 1 if n else 0, why)
            return rollout.state
        if rollout.waves[n]["state"] == WaveState.PENDING:
            waves.wave(rollout, n, state=WaveState.APPLYING, started_at=timezone.now().isoformat())
        if rollout.waves[n]["state"] == WaveState.APPLYING:
            failed = _apply_wave(rollout, n)
            rollout.refresh_from_db(fields=["waves"])
            if failed and waves.aborting(rollout):  # an abort during the canary's bake: its operation rolled it back
                break
            gate_ = rollout.waves[n].get("gate") or {}
            if failed and gate_ and not gate_.get("ok"):  # the canary's gate failed in its operation
                return _halt(rollout, n, _failed_words(n, gate_))
            if failed:
                return _halt(rollout, n, f"wave {n}: {failed}")
            if waves.aborting(rollout):
                break
            if rollout.waves[n]["state"] == WaveState.PASSED:  # the canary baked in its operation (canary.py)
                continue
            waves.wave(rollout, n, state=WaveState.BAKING, applied_at=timezone.now().isoformat())
        if rollout.waves[n]["state"] == WaveState.BAKING:
            verdict = _bake(rollout, n)
            if verdict is None:  # aborted while baking
                break
            waves.wave(rollout, n, gate=verdict)
            if not verdict["ok"]:
                return _halt(rollout, n, _failed_words(n, verdict))
            waves.wave(rollout, n, state=WaveState.PASSED)
    if waves.aborting(rollout):
        return _roll_back_all(rollout)
    _end(rollout, RolloutState.DONE, "rollout done")
    return rollout.state


def _failed_words(n: int, verdict: Mapping[str, Any]) -> str:  # a Verdict, or one stored in Rollout.waves
    if any(f.get("gate") == "operator" for f in verdict.get("failed") or []):
        return f"wave {n}: {verdict['why']}"
    return f"wave {n} failed its health gate: {verdict['why']}"


def resume_stale(stale_after_s: float = STALE_AFTER_S) -> list[int]:
    """Running rollouts whose worker stopped beating (it died): each claimed once (its heartbeat moved to now, a
    compare-and-set, so two resumers never both take it) and queued again; run() goes on from the stored state.
    A change set its worker left running is ended by the executor's own reaper, and run() waits for it."""
    cutoff = timezone.now() - timedelta(seconds=stale_after_s)
    resumed = []
    for pk, beat in Rollout.objects.filter(state=RolloutState.RUNNING, heartbeat_at__lt=cutoff).values_list(
        "pk", "heartbeat_at"
    ):
        assert beat is not None, "heartbeat_at__lt matched it"
        with transaction.atomic():
            if Rollout.objects.filter(pk=pk, heartbeat_at=beat).update(heartbeat_at=timezone.now()):
                record(
                    "rollout taken up again",
                    actor=Actor.system(),
                    target=f"rollout #{pk}",
                    details={"rollout": pk, "last_heartbeat": beat.isoformat()},
                )
                transaction.on_commit(partial(tasks.enqueue, "rollouts.run", (pk,)))
                resumed.append(pk)
    return resumed


def _paused(rollout: Rollout) -> bool:
    """A pause takes effect between waves: the wave under way ends its apply and its bake first."""
    return Rollout.objects.filter(pk=rollout.pk, state=RolloutState.PAUSED).exists()


def pause(rollout: Rollout, *, actor: Actor) -> Rollout:
    _check_operator(actor)
    with transaction.atomic():
        if not Rollout.objects.filter(pk=rollout.pk, state=RolloutState.RUNNING, abort_requested=False).update(
            state=RolloutState.PAUSED
        ):
            raise Refused(f"{rollout} is not running (it is {Rollout.objects.get(pk=rollout.pk).state})")
        record("rollout paused", actor=actor, target=str(rollout), details={"rollout": rollout.pk})
    rollout.refresh_from_db()
    return rollout


def resume(rollout: Rollout, *, actor: Actor, enqueue: bool = True) -> Rollout:
    """paused -> running, queued again (or run here, without `enqueue`): it goes on with its next wave."""
    _check_operator(actor)
    with transaction.atomic():
        if not Rollout.objects.filter(pk=rollout.pk, state=RolloutState.PAUSED).update(
            state=RolloutState.RUNNING, heartbeat_at=timezone.now()
        ):
            raise Refused(f"{rollout} is not paused (it is {Rollout.objects.get(pk=rollout.pk).state})")
        record("rollout resumed", actor=actor, target=str(rollout), details={"rollout": rollout.pk})
        if enqueue:
            transaction.on_commit(lambda: tasks.enqueue("rollouts.run", (rollout.pk,)))
    if not enqueue:
        run(rollout.pk)
    rollout.refresh_from_db()
    return rollout


def halt(rollout: Rollout, *, actor: Actor, reason: str) -> Rollout:
    """An operator's halt of a running rollout: the wave baking now fails its gate with the operator's words (and is
    rolled back, as a gate's halt is); between waves, it stops before the next. Audited; run() acts on it."""
    _check_operator(actor)
    if not reason.strip():
        raise Refused("reason: say why you halt it (the page and the alert say it)")
    why = f"halted by {actor.who}: {reason.strip()}"
    with transaction.atomic():
        if not Rollout.objects.filter(
            pk=rollout.pk, state=RolloutState.RUNNING, abort_requested=False, halt_reason=""
        ).update(halt_reason=why):
            raise Refused(f"{rollout} is not running (it is {Rollout.objects.get(pk=rollout.pk).state})")
        record("rollout halt requested", actor=actor, target=str(rollout), details={"rollout": rollout.pk, "why": why})
    rollout.refresh_from_db()
    return rollout


def _people(rollout: Rollout) -> tuple[Actor, Actor]:
    """(planner, confirmer): each cluster's change set is planned in the rollout planner's name and confirmed in
    its starter's, so a cluster's two-person rule holds as it does for one change set."""
    return Actor(ActorKind.USER, user=rollout.planned_by), Actor(ActorKind.USER, user=rollout.started_by)


def _apply_wave(rollout: Rollout, n: int) -> str | None:
    """Each cluster of the wave through its own change set, in plan order. The first failure: its text."""
    for rc in _wave_clusters(rollout, n):
        if rc.state in (ClusterState.APPLIED, ClusterState.UNCHANGED, ClusterState.SKIPPED):
            continue
        if rc.state in (ClusterState.FAILED, ClusterState.ROLLED_BACK):
            return f"{rc.cluster}: {rc.error}"
        error = _apply_cluster(rollout, rc, n)
        if error:
            return f"{rc.cluster}: {error}"
    return None


def _wave_clusters(rollout: Rollout, n: int) -> QuerySet[RolloutCluster]:
    """The wave's clusters (the canary's cluster is in waves 0 and 1), in plan order."""
    rollout.refresh_from_db(fields=["waves"])
    return rollout.clusters.filter(cluster_id__in=rollout.waves[n]["clusters"]).select_related("cluster")


def _canary_options(rollout: Rollout, n: int) -> CanaryOptions | None:
    """The canary operation's options (canary.py) when wave n is the canary, else None."""
    node = rollout.waves[n].get("node") if n == 0 else None
    return None if node is None else {"rollout": rollout.pk, "wave": n, "node": node, "bake_s": rollout.bake_canary_s}


def _apply_cluster(rollout: Rollout, rc: RolloutCluster, n: int) -> str | None:
    planner, confirmer = _people(rollout)
    cluster = rc.cluster
    if rc.change_set_id is None:
        busy = _wait_while_busy(rollout, cluster)
        if busy and rollout.when_busy == WhenBusy.SKIP:
            _cluster_state(rc, ClusterState.SKIPPED, f"skipped: {busy}")
            return None
        if busy:
            return _cluster_failed(rc, f"still busy after {rollout.busy_wait_s:g} s: {busy}")
        reason = f"{rollout} wave {rc.wave}: {rollout.reason}"
        try:
            with transaction.atomic():
                if "file" in rollout.change:
                    cs = config.create_change_set(
                        cluster, actor=planner, reason=reason, file=fragment_file(cluster, rollout.change["file"])
                    )
                else:
                    cs = config.create_change_set(cluster, actor=planner, reason=reason, edits=rollout.change["edits"])
                rc.change_set, rc.version_before, rc.state = cs, cs.base, ClusterState.APPLYING
                rc.save(update_fields=["change_set", "version_before", "state"])
        except config.NothingToDo:
            _cluster_state(rc, ClusterState.UNCHANGED)
            return None
        except (config.Refused, Refused) as exc:
            return _cluster_failed(rc, str(exc))
    canary = _canary_options(rollout, n)
    assert rc.change_set is not None, "made above, or by an earlier run (change sets are never deleted)"
    error = _run_change_set(
        rollout.pk,
        rc.change_set,
        planner,
        confirmer,
        plan=(lambda cs: plan_canary(cs, canary)) if canary else plan_change_set,
    )
    if error and canary and _operation_state(rc.change_set) == OperationState.ROLLED_BACK:
        _cluster_state(rc, ClusterState.ROLLED_BACK, error)  # the executor's rollback undid the canary
        return error
    if error:
        return _cluster_failed(rc, error)
    _cluster_state(rc, ClusterState.APPLIED)
    return None


def _wait_while_busy(rollout: Rollout, cluster: Cluster) -> str | None:
    """None once no other operation holds the cluster; else who holds it: at once when busy clusters are skipped,
    after busy_wait_s when they are waited for (the rollout's heartbeat kept meanwhile)."""
    ends = time.monotonic() + (rollout.busy_wait_s if rollout.when_busy == WhenBusy.WAIT else 0)
    while True:
        holder = current_holder(cluster)
        if holder is None or time.monotonic() >= ends or waves.aborting(rollout):
            return holder
        Rollout.objects.filter(pk=rollout.pk).update(heartbeat_at=timezone.now())
        time.sleep(min(1.0, max(0.0, ends - time.monotonic())))


def _operation_state(cs: ChangeSet) -> str | None:
    return ChangeSet.objects.filter(pk=cs.pk).values_list("operation__state", flat=True).first()


def _run_change_set(
    rollout_id: int,
    cs: ChangeSet,
    planner: Actor,
    confirmer: Actor,
    plan: Callable[[ChangeSet], tuple[Any, Any]] | None = None,  # (cs) -> (Plan, Collector): plan_and_save's planner
) -> str | None:
    """Plan, confirm and execute a change set here (the rollout's worker), or wait for the operation a dead worker
    left (the executor's reaper ends it). None when it ended done, else why not."""
    cs.refresh_from_db()
    try:
        if cs.state == ChangeSet.State.DRAFT:
            op = plan_and_save(cs, actor=planner, planner=plan or plan_change_set)
        else:
            op = cs.operation
        if op.state == OperationState.PLANNED:
            operations.confirm(op, actor=confirmer, enqueue=False)
            executor.run(op.pk)
        elif op.state == OperationState.PENDING:
            executor.run(op.pk)
    except (config.Refused, operations.NotAllowed) as exc:
        return str(exc)
    while True:
        state, error = Operation.objects.filter(pk=op.pk).values_list("state", "error").get()
        if state == OperationState.DONE:
            return None
        if state not in (OperationState.PENDING, OperationState.RUNNING, OperationState.ROLLING_BACK):
            return f"operation #{op.pk} ended {state}" + (f": {error}" if error else "")
        Rollout.objects.filter(pk=rollout_id).update(heartbeat_at=timezone.now())
        time.sleep(0.5)


def _cluster_state(rc: RolloutCluster, state: str, error: str = "") -> None:
    rc.state, rc.error = state, error
    rc.save(update_fields=["state", "error"])
    Rollout.objects.filter(pk=rc.rollout_id).update(heartbeat_at=timezone.now())


def _cluster_failed(rc: RolloutCluster, error: str) -> str:
    _cluster_state(rc, ClusterState.FAILED, error)
    return error


# -- the health gate --------------------------------------------------------------------------------------------
def _bake(rollout: Rollout, n: int) -> Verdict | None:
    """Wait out the wave's bake time reading the gate every GATE_STEP_S; fail at the first bad reading. None when
    the rollout is aborted meanwhile."""
    wave = rollout.waves[n]
    bake = rollout.bake_canary_s if n == 0 else rollout.bake_s
    started, applied = datetime.fromisoformat(wave["started_at"]), datetime.fromisoformat(wave["applied_at"])
    ends = applied + timedelta(seconds=bake)
    kept = gates.Kept()
    while True:
        verdict = gate(rollout, n, started, applied, kept=kept)
        if not verdict["ok"]:
            return verdict
        if halt_requested(rollout):
            return operator_halt(verdict, halt_requested(rollout))
        if timezone.now() >= ends:
            return verdict
        if waves.aborting(rollout):
            return None
        Rollout.objects.filter(pk=rollout.pk).update(heartbeat_at=timezone.now())
        time.sleep(min(GATE_STEP_S, max(0.0, (ends - timezone.now()).total_seconds())))


# -- halt and roll back -----------------------------------------------------------------------------------------
def _halt(rollout: Rollout, n: int, why: str) -> str:
    """The failing wave rolled back; the waves before it stay (abort rolls them back too). An alert says why (the
    gate and its figures), delivered as any alert; it resolves when the rollout is aborted."""
    rollout.halt_reason = why
    Rollout.objects.filter(pk=rollout.pk).update(halt_reason=why)
    errors = _roll_back_wave(rollout, n)
    waves.wave(rollout, n, state=WaveState.ROLLED_BACK)
    if n == 1 and rollout.waves[0].get("node"):  # the rest of the canary's cluster: the canary went back with it
        waves.wave(rollout, 0, state=WaveState.ROLLED_BACK)
    errors += _roll_back_before(rollout, n)
    _end(rollout, RolloutState.HALTED, "rollout halted", why=why, errors=errors)
    _alert_halt(rollout, n, why)
    return rollout.state


def _roll_back_before(rollout: Rollout, n: int) -> list[str]:
    """When the rollout says so (roll_back_before), every wave before wave n that changed something, newest first,
    each cluster back to its version before through a revert change set, as abort does. Returns the errors."""
    if not rollout.roll_back_before:
        return []
    errors = []
    for m in reversed(range(n)):
        if rollout.waves[m]["state"] in (WaveState.PENDING, WaveState.ROLLED_BACK):
            continue
        errors += _roll_back_wave(rollout, m)
        waves.wave(rollout, m, state=WaveState.ROLLED_BACK)
    return errors


def _alert_halt(rollout: Rollout, n: int, why: str) -> None:
    gate_ = rollout.waves[n].get("gate") or {}
    events.raise_event(
        HALTED_RULE,
        rollout.waves[n]["clusters"][0],
        _subject(rollout),
        f"{rollout}: {rollout.reason}",
        f"{rollout} halted: {why}",
        details={"rollout": rollout.pk, "wave": n, "why": why, "gates": gate_.get("failed") or [], "gate": gate_},
    )


def _subject(rollout: Rollout) -> str:
    return f"ro{rollout.pk}"


def _roll_back_all(rollout: Rollout) -> str:
    """Abort: every wave that changed something, newest first."""
    errors = []
    for n in reversed(range(len(rollout.waves))):
        if rollout.waves[n]["state"] == WaveState.PENDING:
            continue
        errors += _roll_back_wave(rollout, n)
        waves.wave(rollout, n, state=WaveState.ROLLED_BACK)
    _end(rollout, RolloutState.ROLLED_BACK, "rollout rolled back", errors=errors)
    events.resolve_event(HALTED_RULE, _subject(rollout))
    return rollout.state


def _roll_back_wave(rollout: Rollout, n: int) -> list[str]:
    """Each changed cluster of the wave back to its version before the rollout, newest first, through a revert
    change set (it keeps what operations own: the writer, the servers' statuses). Returns the errors."""
    errors = []
    planner, confirmer = _people(rollout)
    for rc in _wave_clusters(rollout, n).select_related("version_before").order_by("-position"):
        if rc.state not in (ClusterState.APPLIED, ClusterState.APPLYING, ClusterState.ROLLING_BACK):
            continue
        if rc.state == ClusterState.APPLYING:  # a change set that ended rolled back changed nothing
            cs = rc.change_set
            if cs is None or cs.result_id is None:
                _cluster_state(rc, ClusterState.FAILED, rc.error)
                continue
        error = _revert_cluster(rollout, rc, planner, confirmer)
        if error:
            errors.append(f"{rc.cluster}: {error}")
    return errors


def _revert_cluster(rollout: Rollout, rc: RolloutCluster, planner: Actor, confirmer: Actor) -> str | None:
    if rc.revert_id is None:
        current = config.latest(rc.cluster)
        assert current is not None, "the rollout's change set recorded one"
        assert rc.change_set is not None, "an applied cluster's change set (change sets are never deleted)"
        made = rc.change_set.result_id
        if current.pk != made:  # someone recorded a version since: never revert over their change
            error = f"version {current.number} was recorded since the rollout's change: not rolled back"
            _cluster_state(rc, ClusterState.ROLLBACK_FAILED, error)
            return error
        assert rc.version_before is not None, "its change set's base (a base version is never deleted)"
        try:
            with transaction.atomic():
                revert = config.revert_to(
                    rc.cluster,
                    rc.version_before,
                    actor=planner,
                    reason=f"{rollout} rolled back: {rollout.halt_reason or 'aborted'}",
                )
                rc.revert, rc.state = revert, ClusterState.ROLLING_BACK
                rc.save(update_fields=["revert", "state"])
                record(
                    "change set created",
                    actor=planner,
                    cluster=rc.cluster,
                    target=str(revert),
                    details={"change_set": revert.pk, "source": revert.source, "rollout": rollout.pk},
                )
        except config.Refused as exc:
            _cluster_state(rc, ClusterState.ROLLBACK_FAILED, str(exc))
            return str(exc)
    assert rc.revert is not None, "made above, or by an earlier run"
    failed = _run_change_set(rollout.pk, rc.revert, planner, confirmer)
    if failed:
        _cluster_state(rc, ClusterState.ROLLBACK_FAILED, failed)
        return failed
    _cluster_state(rc, ClusterState.ROLLED_BACK)
    return None


def _end(rollout: Rollout, state: str, action: str, **details: Any) -> None:
    with transaction.atomic():
        Rollout.objects.filter(pk=rollout.pk).update(state=state, heartbeat_at=timezone.now())
        rollout.refresh_from_db()
        record(
            action,
            actor=Actor.system(),
            target=str(rollout),
            outcome="success" if state == RolloutState.DONE else "failure",
            details={**describe(rollout), **details},
        )
