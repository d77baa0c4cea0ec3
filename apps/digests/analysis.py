"""Query analysis of one digest (its page): latency per poll window and hostgroup from the stored history, the query
rules that route it on each cluster it ran on, and its example queries (examples.py).

Reads only; bounded: at most WINDOWS_SHOWN windows, ROUTES_SHOWN (cluster, user, schema) walks, examples.KEEP examples.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

import redis
from django.db import connection

from apps.configuration import rule_tester, services as config_services
from apps.fleet.models import Cluster, ProxySQLNode
from apps.monitoring import live

from . import examples as examples_mod
from .examples import Example
from .models import Digest, DigestSource, DigestStat
from .selectors import BreakdownRow, Filters, Window, proxysql_extremes, _where

WINDOWS_SHOWN = 60
ROUTES_SHOWN = 6


@dataclass
class WindowRow:
    ts: int  # the poll's time (raw) or the bucket's start (rollups)
    resolution: int  # 0: one poll window; else the bucket's width in seconds
    hostgroup: int
    count: int
    total_us: int
    min_us: int | None
    max_us: int | None
    max_bound_us: int | None = None  # ProxySQL's max since it first saw the digest, where the window's is not known
    min_bound_us: int | None = None
    mirrored: bool = (
        False  # a mirror rule's copies in its mirror hostgroup (DigestStat.mirrored), not the application's
    )

    @property
    def avg_us(self) -> float | None:
        return self.total_us / self.count if self.count else None


def latency_windows(digest: Digest, window: Window, filters: Filters) -> list[WindowRow]:
    """The digest's count, sum, min and max per stored window and hostgroup, newest first (WINDOWS_SHOWN windows); a
    hostgroup's mirrored copies are a row of their own, labelled."""
    table = DigestStat._meta.db_table
    where, params = _where(window, Filters(**{**filters.__dict__, "search": ""}))
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT DISTINCT ts FROM {table} WHERE {where} AND digest_id = %s ORDER BY ts DESC LIMIT %s",
            params + [digest.pk, WINDOWS_SHOWN],
        )
        stamps = [row[0] for row in cur.fetchall()]
        if not stamps:
            return []
        cur.execute(
            f"SELECT resolution, ts, source_id, count_star, sum_time, min_time, max_time, mirrored FROM {table}"
            f" WHERE {where} AND digest_id = %s AND ts >= %s",
            params + [digest.pk, min(stamps)],
        )
        rows = cur.fetchall()
    sources = {s.pk: s for s in DigestSource.objects.filter(pk__in={r[2] for r in rows})}
    grouped: dict[tuple[int, int, bool], WindowRow] = {}  # (ts, hostgroup, copies)
    for resolution, ts, source_id, count, total, least, most, mirrored in rows:
        s = sources.get(source_id)
        if s is None:
            continue
        copies = bool(mirrored)
        w = grouped.setdefault(
            (ts, s.hostgroup, copies), WindowRow(ts, resolution, s.hostgroup, 0, 0, None, None, mirrored=copies)
        )
        w.count += count
        w.total_us += total
        w.min_us = least if w.min_us is None or (least is not None and least < w.min_us) else w.min_us
        w.max_us = most if w.max_us is None or (most is not None and most > w.max_us) else w.max_us
    # ProxySQL's cumulative max never falls until a reset: a bound of every window since
    bounds = proxysql_extremes(
        {hg: ([s for s in sources.values() if s.hostgroup == hg], digest.digest) for hg in {hg for _, hg, _ in grouped}}
    )
    out = sorted(grouped.values(), key=lambda w: (-w.ts, w.hostgroup, w.mirrored))
    for w in out:
        least, most = bounds.get(w.hostgroup, (None, None))
        w.max_bound_us = most if w.max_us is None else None
        w.min_bound_us = least if w.min_us is None else None
    return out


class ShownExample(Example):
    """An example as the digest page shows it: its place in the list (explain.py's example_index), its node's name."""

    index: int
    node_name: str


def examples(digest: Digest, cluster_id: int | None = None, *, literals: bool) -> list[ShownExample]:
    """The digest's example queries, newest first; `literals` False (a viewer): each text as its digest form."""
    try:
        found = examples_mod.of_digest(live.client(), digest.digest_text, cluster_id)
    except redis.RedisError:
        return []
    names = dict(ProxySQLNode.objects.filter(pk__in={e.get("node") for e in found}).values_list("pk", "name"))
    shown: list[ShownExample] = []
    for i, e in enumerate(found):
        one: ShownExample = {**e, "index": i, "node_name": names.get(e.get("node"), "(node removed)")}
        if not literals:
            one["text"] = rule_tester.normalise(e["text"])
        shown.append(one)
    return shown


@dataclass
class Route:
    cluster: Cluster
    username: str
    schemaname: str
    version: int | None
    outcome: rule_tester.Outcome | None = None  # None without a configuration version
    matched: list[rule_tester.Step] = field(default_factory=list)  # the rules that matched, in walk order


def routes(digest: Digest, breakdown: Iterable[BreakdownRow], example_text: str = "") -> list[Route]:
    """Per (cluster, user, schema) the digest ran as in the window (the breakdown's sources, busiest first): the walk
    of the cluster's current query rules (digest, match_digest and match_pattern, each search bounded by
    monitoring.rule_regex through the rule tester). match_pattern is tried on an example's text when there is one."""
    seen: set[tuple[int, str, str]] = set()
    out: list[Route] = []
    batch = rule_tester.Batch()  # the page's walks share one budget (RULE_WALK_BUDGET_S)
    for b in breakdown:
        s = b["source"]
        if s is None:
            continue
        key = (s.node.cluster_id, s.username, s.schemaname)
        if key in seen:
            continue
        seen.add(key)
        cluster = s.node.cluster
        version = config_services.latest(cluster)
        route = Route(cluster, s.username, s.schemaname, version.number if version else None)
        if version is not None:
            route.outcome = rule_tester.on_content(
                version.content,
                example_text,
                digest_text=digest.digest_text,
                digest=digest.digest,
                username=s.username,
                schemaname=s.schemaname,
                reached=batch,
            )
            route.matched = route.outcome.matched
        out.append(route)
        if len(out) >= ROUTES_SHOWN:
            break
    return out
