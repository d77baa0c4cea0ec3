"""Maintenance-aware holds: planned work the product runs itself (an operation on the cluster, a backend in
maintenance) is expected to cause some alerts. Those are held -- shown, never notified -- and released
if their condition outlives the work (catalogue.RuleSpec.held_by says which rule each kind of work holds,
and whether for the whole cluster or only for the backends the work is about)."""
from .catalogue import BY_KEY


def hold_for(observation, works, now):
    """The piece of work that holds this observation now, or None."""
    held_by = BY_KEY[observation.rule].held_by
    for work in works:
        if work.until is not None and now >= work.until:
            continue
        scope = held_by.get(work.kind)
        if scope == "cluster" or (scope == "involved" and observation.server in work.involved):
            return work
    return None
