"""Maintenance-aware holds: planned work the product runs itself (an operation on the cluster, a backend in
maintenance) is expected to cause some alerts. Those are held -- shown, never notified -- and released
if their condition outlives the work (catalogue.RuleSpec.held_by says which rule each kind of work holds,
and whether for the whole cluster or only for the backends the work is about). The status changes an
operation makes itself are not only held: they are taken out of the documents the rules read
(without_own_changes), so that they do not count toward flapping once the hold is over either."""

from collections.abc import Iterable, Sequence
from typing import Any

from .catalogue import BY_KEY, MAINTENANCE
from .conditions import Observation
from .context import ClusterCtx, OwnChanges, Work


def changes_status() -> dict[str, str]:
    """The operations that change backends' status on the ProxySQL nodes, and whose: {operation kind: "cluster" (any
    backend of the cluster) or "involved" (the backends it is about)} -- the planned work that holds flapping."""
    return {kind: scope for kind, scope in BY_KEY["backend_flapping"].held_by.items() if kind != MAINTENANCE}


def hold_for(observation: Observation, works: Iterable[Work], now: float) -> Work | None:
    """The piece of work that holds this observation now, or None."""
    held_by = BY_KEY[observation.rule].held_by
    for work in works:
        if work.until is not None and now >= work.until:
            continue
        scope = held_by.get(work.kind)
        if scope == "cluster" or (scope == "involved" and observation.server in work.involved):
            return work
    return None


def without_own_changes(
    doc: dict[str, Any] | None, c: ClusterCtx, own: Sequence[OwnChanges] | None
) -> dict[str, Any] | None:
    """A ProxySQL node's document without the status changes the product's own operations made (own:
    context.OwnChanges of the cluster): a row an operation changes, seen changed between the operation's start
    and the first poll after its end. Those never count toward flapping or any rule, during the operation's
    hold or after it; what ProxySQL changes on its own, outside them, still does."""
    if not own or not doc or not doc.get("status_changes"):
        return doc
    kept: dict[str, list[float]] = {}
    changes = changes_status()
    for key, stamps in doc["status_changes"].items():
        _hg, host, port = key.split(":", 2)
        server = c.server_at(host, int(port))
        works = [
            w
            for w in own
            if changes.get(w.kind) == "cluster" or (changes.get(w.kind) == "involved" and server in w.involved)
        ]
        left = [t for t in stamps if not any(w.start <= t and (w.end is None or t <= w.end) for w in works)]
        if left:
            kept[key] = left
    return {**doc, "status_changes": kept}
