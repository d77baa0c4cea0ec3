"""Effective rule settings: the catalogue's defaults, then the fleet-wide override, then the cluster's.

The evaluation reads them after every poll round, so the overrides (a small table) are loaded once and
kept per process for a few seconds; saving an override (services.save_rule_setting) takes effect within
that time everywhere, at once in the process that saved it.
"""

import time
from dataclasses import dataclass

from .catalogue import BY_KEY, RULES
from .models import RuleSetting

CACHE_S = 5.0


@dataclass(frozen=True)
class Effective:
    rule: str
    enabled: bool
    severity: str
    for_s: float
    params: dict
    overridden: tuple = ()  # the fields set by an override: ("fleet", field) / ("cluster", field)


_cache = {"loaded": 0.0, "rows": None}


def forget():
    _cache["loaded"] = 0.0
    _cache["rows"] = None
    _cache["stamp"] = None


def _rows():
    now = time.monotonic()
    if _cache["rows"] is None or now - _cache["loaded"] > CACHE_S:
        rows = {}
        for s in RuleSetting.objects.all():
            rows[(s.cluster_id, s.rule)] = s
        stamp = sorted((k, s.updated_at) for k, s in rows.items() if k[0] is not None) + sorted(
            (k[1], s.updated_at) for k, s in rows.items() if k[0] is None
        )
        if stamp != _cache.get("stamp"):  # the settings changed: what was worked out from them goes
            _cache.update(memo={}, stamp=stamp, changed_at=time.time())
        _cache.update(rows=rows, loaded=now, own={k[0] for k in rows if k[0] is not None})
    return _cache["rows"]


def effective(cluster, rule_key):
    """Effective settings of one rule for one cluster (a Cluster or a lightweight object with its fields)."""
    rows = _rows()
    memo = _cache.setdefault("memo", {})
    key = (_scope(cluster), rule_key, _policy(cluster))
    if key in memo:
        return memo[key]
    spec = BY_KEY[rule_key]
    enabled, severity, for_s = True, spec.severity, spec.for_s
    params = {name: p.value_for(cluster) for name, p in spec.params.items()}
    overridden = []
    for level, row in (("fleet", rows.get((None, rule_key))), ("cluster", rows.get((cluster.pk, rule_key)))):
        if row is None:
            continue
        if row.enabled is not None:
            enabled = row.enabled
            overridden.append((level, "enabled"))
        if row.severity:
            severity = row.severity
            overridden.append((level, "severity"))
        if row.for_s is not None:
            for_s = row.for_s
            overridden.append((level, "for_s"))
        for name, value in (row.params or {}).items():
            if name in spec.params and value is not None:
                params[name] = value
                overridden.append((level, name))
    out = Effective(rule_key, enabled, severity, float(for_s), params, tuple(overridden))
    memo[key] = out
    return out


def _scope(cluster):
    """The memo key's cluster: its pk when it has settings of its own, else None. A cluster without them gets what
    every such cluster of the same policy gets (the defaults, the fleet's overrides, its policy's values): one
    shared record a rule instead of one a cluster (500 clusters: ~7 MiB of copies in every worker process that
    evaluated them, bin/bench-monitoring's fleet; issue 40)."""
    return cluster.pk if cluster.pk in _cache.get("own", ()) else None


def _policy(cluster):
    """The cluster fields that defaults are taken from: part of the memo key, so a policy change shows."""
    return (getattr(cluster, "min_available_readers", None), getattr(cluster, "max_replication_lag", None))


def changed_at():
    """When this process last saw the settings change (or first read them): epoch."""
    _rows()
    return _cache.get("changed_at", 0.0)


def for_cluster(cluster):
    _rows()
    memo = _cache.setdefault("memo", {})
    key = (_scope(cluster), "*", _policy(cluster))
    if key not in memo:
        memo[key] = {spec.key: effective(cluster, spec.key) for spec in RULES}
    return memo[key]
