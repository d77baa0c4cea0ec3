"""Reads for the digest pages: which rows answer a window, top digests, one digest's detail and chart.

A window [start, end) is answered from the coarsest complete buckets that fit inside it and finer
rows at its edges (plan_window): a 24 h window touches ~24 hourly rows per digest and source instead of
2,880 raw ones, and stays exact to the poll at both ends. Where the finer rows have passed their
retention, the window's edges snap outward to the buckets still kept (effective_window), and the page
says so.
"""

import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NotRequired, TypedDict

import redis
from django.conf import settings
from django.db import connection
from django.db.models import Min, Q, QuerySet, Sum

from apps.configuration import rule_tester, services as config_services
from apps.configuration.models import ChangeSet
from apps.fleet.models import Cluster, MirrorRule, ProxySQLNode
from apps.monitoring import models as monitoring_models
from apps.monitoring import live, mirror, status
from apps.monitoring.models import MirrorRuleSample

from . import search as search_index
from .models import (
    DAY,
    FIVE_MINUTES,
    HOUR,
    LEVELS,
    RAW,
    SPAN_S,
    Digest,
    DigestNodeState,
    DigestPoll,
    DigestSource,
    DigestSpan,
    DigestStat,
)
from .services import baseline_key, retention_s, rolled_until

PER_PAGE = 50
# sort key -> (SQL expression over the grouped rows, label). Ties break on the digest id.
SORTS = {
    "total": ("SUM(sum_time)", "total time"),
    "count": ("SUM(count_star)", "count"),
    "avg": ("SUM(sum_time) * 1.0 / SUM(count_star)", "average time"),
    "max": ("MAX(max_time)", "max time"),
}
DEFAULT_SORT = "total"

# One piece of a window: (resolution, from_ts, to_ts), read from that resolution's rows (plan_window).
Piece = tuple[int, int, int]


@dataclass(frozen=True)
class Filters:
    cluster: int | None = None
    node: int | None = None
    hostgroup: int | None = None
    username: str = ""
    schemaname: str = ""
    search: str = ""

    @property
    def by_source(self) -> bool:
        return any(
            v not in (None, "") for v in (self.cluster, self.node, self.hostgroup, self.username, self.schemaname)
        )


@dataclass
class Window:
    start: int
    end: int
    snapped: bool = False  # edges moved outward to buckets still kept
    pieces: list[Piece] = field(default_factory=list)

    @property
    def seconds(self) -> int:
        return self.end - self.start


# -- the window ----------------------------------------------------------------------------------------
def effective_window(start: int, end: int, now: float | None = None) -> Window:
    """Snap [start, end) outward to the finest level whose rows are still kept at each edge."""
    now = int(now or time.time())
    keep = retention_s()
    snapped = False

    def snap(ts: int, up: bool) -> int:
        nonlocal snapped
        for level in (RAW,) + LEVELS:
            if ts >= now - keep[level]:
                if level == RAW:
                    return ts
                aligned = (math.ceil(ts / level) if up else ts // level) * level
                snapped = snapped or aligned != ts
                return aligned
        oldest = int(now - keep[DAY])  # an int: the retention settings are floats, and a chart's buckets a range()
        snapped = True
        return max(ts, oldest // DAY * DAY)

    s, e = snap(start, up=False), snap(end, up=True)
    return Window(start=s, end=max(e, s), snapped=snapped)


def window_for(start: int, end: int, now: float | None = None) -> Window:
    """The window the pages and the API read for [start, end): snapped to what is kept, with its pieces."""
    window = effective_window(start, end, now)
    window.pieces = plan_window(window.start, window.end) if window.end > window.start else []
    return window


def finest_kept(ts: int, now: float | None = None) -> int:
    """The finest resolution whose rows at `ts` are still kept (raw counts as a minute for charts)."""
    now = int(now or time.time())
    keep = retention_s()
    for level in (RAW,) + LEVELS:
        if ts >= now - keep[level]:
            return level
    return DAY


def plan_window(start: int, end: int, marks: Mapping[int, int | None] | None = None) -> list[Piece]:
    """[(resolution, from_ts, to_ts)]: disjoint pieces covering [start, end), coarse in the middle."""
    marks = rolled_until() if marks is None else marks
    levels = tuple(sorted(LEVELS, reverse=True))

    def cover(a: int, b: int, levels: tuple[int, ...]) -> list[Piece]:
        if a >= b:
            return []
        for i, level in enumerate(levels):
            done = marks.get(level)
            if not done:
                continue
            s = -(-a // level) * level
            e = min(b // level * level, done // level * level)
            if s < e:
                finer = levels[i + 1 :]
                return cover(a, s, finer) + [(level, s, e)] + cover(e, b, finer)
        return [(RAW, a, b)]

    return cover(start, end, levels)


def _pieces_sql(pieces: Iterable[Piece], alias: str = "") -> tuple[str, list[Any]]:
    col = f"{alias}." if alias else ""
    parts: list[str] = []
    params: list[Any] = []
    for resolution, a, b in pieces:
        parts.append(f"({col}resolution = %s AND {col}ts >= %s AND {col}ts < %s)")
        params += [resolution, a, b]
    return "(" + (" OR ".join(parts) or "1 = 0") + ")", params


def _pieces_q(pieces: Iterable[Piece]) -> Q:
    q = Q(resolution=-1)  # matches nothing: an empty window
    for resolution, a, b in pieces:
        q |= Q(resolution=resolution, ts__gte=a, ts__lt=b)
    return q


def _source_qs(filters: Filters) -> QuerySet[DigestSource]:
    qs = DigestSource.objects.all()
    if filters.cluster is not None:
        qs = qs.filter(node__cluster_id=filters.cluster)
    if filters.node is not None:
        qs = qs.filter(node_id=filters.node)
    if filters.hostgroup is not None:
        qs = qs.filter(hostgroup=filters.hostgroup)
    if filters.username:
        qs = qs.filter(username=filters.username)
    if filters.schemaname:
        qs = qs.filter(schemaname=filters.schemaname)
    return qs


def _digest_search_qs(search: str) -> QuerySet[Digest]:
    q = Q(digest_text__icontains=search)
    if search.lower().startswith("0x") and len(search) <= 18:
        q |= Q(digest__iexact=search)
    return Digest.objects.filter(q)


def _where(window: Window, filters: Filters) -> tuple[str, list[Any]]:
    sql, params = _pieces_sql(window.pieces)
    where, args = [sql], list(params)
    if filters.by_source:
        sub, sub_params = _source_qs(filters).values("pk").query.sql_with_params()
        where.append(f"source_id IN ({sub})")
        args += list(sub_params)
    if filters.search:
        sub, sub_params = _digest_search_qs(filters.search).values("pk").query.sql_with_params()
        where.append(f"digest_id IN ({sub})")
        args += list(sub_params)
    return " AND ".join(where), args


# -- top digests ---------------------------------------------------------------------------------------
@dataclass
class TopRow:
    digest_id: int
    count: int
    total_us: int
    max_us: int | None
    min_us: int | None
    mirrored_count: int = 0  # executions of mirrored copies (not in count nor total_us)
    mirrored_us: int = 0
    unmeasured_count: int = 0  # of count: executions in a mirror hostgroup whose copies' verdict is not known
    digest: str = ""
    text: str = ""
    short: str = ""
    title: str = ""
    where: dict[str, Any] = field(default_factory=dict)  # _attach_where: hostgroups, users, nodes (the API's as is)
    user_count: int = 0  # _attach_where: the page's "first user +N"
    max_bound_us: int | None = None  # _attach_proxysql_extremes: ProxySQL's own max where the window's is unknown
    min_bound_us: int | None = None

    @property
    def avg_us(self) -> float | None:
        return self.total_us / self.count if self.count else None


@dataclass
class TopPage:
    rows: list[TopRow]
    total: int  # digests in the window (after filters)
    number: int  # 1-based page number actually shown
    pages: int
    per_page: int = PER_PAGE
    more: bool = False  # total is a lower bound: more than `total` digests (a broad search, counted up to a cap)
    mirror_note: str = ""  # the polls could not tell copies apart on some rows (match limit, budget): said above it

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.pages or self.more

    @property
    def first_index(self) -> int:
        return (self.number - 1) * self.per_page + 1 if self.total else 0

    @property
    def last_index(self) -> int:
        return min(self.number * self.per_page, self.total)


class BreakdownRow(TypedDict):
    """digest_breakdown(): one source's figures of a digest over the window (its copies, its unmeasured rows apart)."""

    source: DigestSource | None
    mirrored: bool
    unmeasured: bool
    count: int
    total_us: int
    max_us: int | None
    min_us: int | None
    avg_us: float | None
    rows_sent: int | None
    rows_affected: int | None
    rows_count: int  # the executions whose rows were counted
    max_bound_us: int | None
    min_bound_us: int | None


class Bounds(TypedDict):
    max_bound_us: int | None
    min_bound_us: int | None


class ChartPoint(TypedDict):
    x: int  # epoch ms
    rate: float | None
    avg_ms: float | None
    max_ms: float | None


class ChartSeries(TypedDict):
    bucket_s: int
    start: int  # epoch ms
    end: int
    points: list[ChartPoint]
    partial: int  # buckets where only some of the digest's nodes had a poll
    nodes: int


class _Bucket(TypedDict):
    covered: float  # seconds of polls in it, summed over the nodes
    nodes: set[int]
    count: int
    sum: int
    max: int | None


class FilterChoices(TypedDict):
    clusters: list[tuple[int, str]]
    nodes: list[tuple[int, str, str]]  # (pk, cluster name, name)
    hostgroups: list[int]
    users: list[str]
    schemas: list[str]


class Problem(TypedDict):
    node_id: int
    state: DigestNodeState | None
    age: float | None
    failing_for: float | None
    node: NotRequired[ProxySQLNode | None]  # the ones shown


class PollSummary(TypedDict):
    nodes: int
    fresh: int
    oldest_age: float | None
    newest_age: float | None
    problems: list[Problem]
    more_problems: int
    stale_after: float


@dataclass(frozen=True)
class RuleSample:
    """The rule tester's form (forms.parse_rule_sample): a cluster, a digest picked from the list or a typed query,
    who sends it from where, and optionally a draft change set to compare with."""

    cluster: Cluster | None = None
    digest: Digest | None = None
    query: str = ""
    username: str = ""
    schemaname: str = ""
    client_addr: str = ""
    change_set: ChangeSet | None = None  # a draft of the cluster


class RuleColumn(TypedDict):
    title: str
    url: str
    outcome: Any  # rule_tester.on_content's walk of the rules


class RuleTestChoices(TypedDict):
    digests: list[TopRow]
    change_sets: list[ChangeSet]


class HostgroupRow(TypedDict):
    hostgroup: int
    count: int
    total_us: int
    time_share: NotRequired[float | None]
    avg_us: NotRequired[float | None]


class RowsSummary(TypedDict):
    sent: int
    affected: int
    executions: int
    partial: bool
    sent_each: float | None
    affected_each: float | None


class DigestSummary(TypedDict):
    rows: RowsSummary | None
    first_seen: int | None  # epoch seconds
    last_seen: int | None
    total_us: int
    count: int
    mirrored: list[HostgroupRow]
    mirrored_count: int
    mirrored_us: int
    time_share: float | None
    count_share: float | None
    hostgroups: list[HostgroupRow]


class MirrorRuleRow(TypedDict, total=False):
    """mirror_rules(): a rule, what it matches, its last measured window (when there is one), and a note."""

    rule: MirrorRule
    match: str
    sample: MirrorRuleSample | None
    note: str
    window_end: datetime
    interval_s: float
    age: float
    hits: float | None
    expected: float | None
    mirrored: float | None
    loss: float | None
    prepared_share: float | None
    dropped: float | None


class MirrorPanel(TypedDict):
    mirror_rules: list[MirrorRuleRow]
    mirror_worst: MirrorRuleRow | None
    mirror_rules_age: float | None
    digest_interval: float


INLINE_IDS = 500  # up to this many matching sources / digests go into the query as a list of ids


def _ids_or_subquery(qs: QuerySet[Any]) -> tuple[str, list[Any], bool]:
    """(SQL for an IN (...), params, inline): the ids themselves when few, else the subquery."""
    ids = list(qs.values_list("pk", flat=True)[: INLINE_IDS + 1])
    if len(ids) <= INLINE_IDS:
        return ",".join(["%s"] * len(ids)) or "NULL", ids, True
    sub, sub_params = qs.values("pk").query.sql_with_params()
    return sub, list(sub_params), False


def _search_condition(search: str, alias: str) -> tuple[str, list[str]]:
    """(SQL, params): the digest's text contains `search` in any case (LIKE, its wildcards escaped), or
    `search` is its hash."""
    sql = f"{alias}.digest_text {connection.operators['icontains']}"
    params = [f"%{connection.ops.prep_for_like_query(search)}%"]
    if connection.vendor == "mysql" and search_index.search_text(search) is not None:
        # A plain ASCII term against the lower-case copy, byte for byte (3-5 times cheaper than LIKE through the
        # collation, the same result for plain ASCII on both sides); texts without a copy through the collation.
        sql = f"CASE WHEN {alias}.search_text IS NULL THEN {sql} ELSE {alias}.search_text LIKE %s END"
        params.append(f"%{connection.ops.prep_for_like_query(search.lower())}%")
    digest_hash = _hash_of(search)
    if digest_hash:
        sql += f" OR {alias}.digest = %s"
        params.append(digest_hash)
    return f"({sql})", params


def _hash_of(search: str) -> str | None:
    """The digest hash `search` may be (ProxySQL prints them 0x + upper-case hex), or None."""
    return "0x" + search[2:].upper() if search.lower().startswith("0x") and len(search) <= 18 else None


SORT_EXPR = {"total": "tot", "count": "cnt", "avg": "tot * 1e0 / cnt", "max": "mx"}  # 1e0: a double everywhere


def _order(sort: str, descending: bool) -> str:
    """ORDER BY of a ranking: NULLs (an unknown max) last either way, ties by digest id the same way."""
    expr, direction = SORT_EXPR[sort], "DESC" if descending else "ASC"
    return f"({expr}) IS NULL, {expr} {direction}, digest_id {direction}"


def _arms(
    pieces: Sequence[Piece], conds: str = "", arm_params: Iterable[Any] = (), mirrored: bool = False
) -> tuple[str, list[Any]]:
    """The rows of the window's pieces (a derived table's SELECT). SQLite: one arm per piece glued with
    UNION ALL (its OR over one index deduplicates rows). MariaDB: one SELECT over the pieces' ranges of the
    primary key, which it merges into the GROUP BY (UNION ALL makes it copy every row into a temporary
    table first: 10 % slower over a 2.5-day window). mirrored: each row's `mirrored` column too (1: the row counts
    mirrored copies, NULL: not known; DigestStat.mirrored, set by the poll)."""
    table = DigestStat._meta.db_table
    flag = ", mirrored" if mirrored else ""
    columns = f"SELECT digest_id, count_star, sum_time, max_time, min_time{flag} FROM {table}"
    if connection.vendor != "sqlite":
        where, where_params = _pieces_sql(pieces)
        return f"{columns} WHERE {where}{conds}", where_params + list(arm_params)
    arms: list[str] = []
    params: list[Any] = []
    for resolution, a, b in pieces:
        arms.append(f"{columns} WHERE resolution = %s AND ts >= %s AND ts < %s{conds}")
        params += [resolution, a, b] + list(arm_params)
    return " UNION ALL ".join(arms), params


def _grouped(arms: str, mirrored: bool) -> str:
    """Per digest: count, total, max, min of its own executions, then count and total of its mirrored copies."""
    if not mirrored:
        return (
            f"SELECT digest_id, SUM(count_star) AS cnt, SUM(sum_time) AS tot, MAX(max_time) AS mx,"
            f" MIN(min_time) AS mn, 0 AS mcnt, 0 AS mtot, 0 AS ucnt FROM ({arms}) AS arms GROUP BY digest_id"
        )
    own = "CASE WHEN mirrored = 1 THEN {} ELSE {} END"  # NULL (not known): counted as the application's
    return (
        f"SELECT digest_id, cnt, tot, mx, mn, all_cnt - cnt AS mcnt, all_tot - tot AS mtot, ucnt FROM"
        f" (SELECT digest_id, SUM({own.format(0, 'count_star')}) AS cnt, SUM({own.format(0, 'sum_time')}) AS tot,"
        f" MAX({own.format('NULL', 'max_time')}) AS mx, MIN({own.format('NULL', 'min_time')}) AS mn,"
        f" SUM(count_star) AS all_cnt, SUM(sum_time) AS all_tot,"
        f" SUM(CASE WHEN mirrored IS NULL THEN count_star ELSE 0 END) AS ucnt"
        f" FROM ({arms}) AS arms GROUP BY digest_id) AS own"
    )


def usable_span(window: Window, filters: Filters) -> int | None:
    """The end of a DigestSpan lying inside the window, for the unfiltered list (None: sum the rows)."""
    if filters.by_source or window.seconds < SPAN_S:
        return None
    return (
        DigestSpan.objects.filter(end_ts__gte=window.start + SPAN_S, end_ts__lte=window.end)
        .order_by("-end_ts")
        .values_list("end_ts", flat=True)
        .first()
    )


HIT_IDS_MAX = 10_000  # MariaDB: a search matching up to this many digests goes into the query as their ids


def search_hit_ids(search: str) -> list[int] | None:
    """The ids of the digests matching `search` when they are at most HIT_IDS_MAX, else None. The word
    index (search.py) narrows the texts read: a search of 7 % of 100,000 texts reads those 7 %."""
    condition, params = _search_condition(search, "d")
    return search_index.matching_ids(condition, params, search, HIT_IDS_MAX, digest_hash=_hash_of(search))


def _ranked_sql_spanned(
    window: Window,
    end: int,
    sort: str,
    descending: bool,
    limit: int,
    offset: int,
    search: str = "",
    hit_ids: list[int] | None = None,
    count_cap: int | None = None,
) -> tuple[str, list[Any]]:
    """(SQL, params) like _ranked_sql, from the span ending at `end` and the window's two edges.

    A digest that did not run in the edges keeps its span figures: the best `offset + limit` of those
    come straight from the span's index on the sort column. The digests of the edges (a few thousand)
    are summed with their span figures. Both lists sorted together give the page, exactly as summing
    every row would.

    count_cap: the span's matching digests are counted up to this many (a search matched in the query, i.e.
    in many texts: counting them all joins and matches every digest of the span, while the page itself
    matches texts in the order of the sort index, lazily, until it is full). The row's last column says
    whether the count stopped there.
    """
    span, digests = DigestSpan._meta.db_table, Digest._meta.db_table
    pieces = plan_window(window.start, end - SPAN_S) + plan_window(end, window.end)
    join, cond, hits = "", "", ""
    cond_params: list[Any] = []
    if search and connection.vendor == "sqlite":
        # The matching digests once (SQLite keeps a CTE read three times): a scan of the texts, no join.
        condition, hit_params = _search_condition(search, "d")
        hits = f"hits (id) AS (SELECT d.id FROM {digests} d WHERE {condition}), "
        cond = " AND {alias}.digest_id IN (SELECT id FROM hits)"
    elif search and hit_ids is not None:  # MariaDB, a narrow search: its digests' ids, read beforehand
        cond = " AND {alias}.digest_id IN (" + (",".join(str(int(i)) for i in hit_ids) or "NULL") + ")"
    elif search:  # MariaDB would compute a CTE at each read: match the texts of the span's digests
        condition, cond_params = _search_condition(search, "d")
        join, cond = f" JOIN {digests} d ON d.id = {{alias}}.digest_id", f" AND {condition}"
    arms, params = _arms(pieces)
    edge = (
        (
            f"SELECT digest_id, SUM(count_star) AS cnt, SUM(sum_time) AS tot, MAX(max_time) AS mx,"
            f" MIN(min_time) AS mn FROM ({arms}) AS arms GROUP BY digest_id"
        )
        if pieces
        else f"SELECT digest_id, count_star AS cnt, sum_time AS tot, max_time AS mx, min_time AS mn FROM {span} WHERE 1 = 0"
    )
    direction = "DESC" if descending else "ASC"
    only_span = (
        f"SELECT s.digest_id AS digest_id, s.count_star AS cnt, s.sum_time AS tot, s.max_time AS mx,"
        f" s.min_time AS mn, 0 AS fresh FROM {span} s{join.format(alias='s')} WHERE s.end_ts = %s{cond.format(alias='s')}"
        f" AND NOT EXISTS (SELECT 1 FROM edge e WHERE e.digest_id = s.digest_id)"
    )
    k = offset + limit
    column = {"total": "sum_time", "count": "count_star", "avg": "avg_time", "max": "max_time"}[sort]
    if sort == "max":  # NULLs last: the known ones in order, then the unknown ones by id
        best = [
            f"SELECT * FROM ({only_span} AND s.max_time IS NOT NULL ORDER BY s.max_time {direction},"
            f" s.digest_id {direction} LIMIT {k}) AS known",
            f"SELECT * FROM ({only_span} AND s.max_time IS NULL ORDER BY s.digest_id {direction} LIMIT {k}) AS unknown",
        ]
        best_params = [end] + cond_params + [end] + cond_params
    else:
        best = [
            f"SELECT * FROM ({only_span} ORDER BY s.{column} {direction}, s.digest_id {direction} LIMIT {k}) AS best"
        ]
        best_params = [end] + cond_params
    combined = (
        f"SELECT e.digest_id AS digest_id, e.cnt + COALESCE(s.count_star, 0) AS cnt,"
        f" e.tot + COALESCE(s.sum_time, 0) AS tot,"
        f" CASE WHEN e.mx IS NULL THEN s.max_time WHEN s.max_time IS NULL OR e.mx > s.max_time THEN e.mx"
        f" ELSE s.max_time END AS mx,"
        f" CASE WHEN e.mn IS NULL THEN s.min_time WHEN s.min_time IS NULL OR e.mn < s.min_time THEN e.mn"
        f" ELSE s.min_time END AS mn, CASE WHEN s.digest_id IS NULL THEN 1 ELSE 0 END AS fresh"
        f" FROM edge e LEFT JOIN {span} s ON s.end_ts = %s AND s.digest_id = e.digest_id"
        f"{join.format(alias='e')}{' WHERE ' + cond.format(alias='e')[5:] if cond else ''}"
    )
    matched = f"{span} s{join.format(alias='s')} WHERE s.end_ts = %s{cond.format(alias='s')}"
    counted = (
        f"(SELECT COUNT(*) FROM (SELECT 1 FROM {matched} LIMIT {int(count_cap)}) AS c)"
        if count_cap
        else f"(SELECT COUNT(*) FROM {matched})"
    )
    # The edge's digests not in the span are counted from the rows at hand (`fresh`): MariaDB computes the edge
    # again at each mention of it (a count of its own took a third of the query).
    total = f"{counted}, SUM(fresh) OVER ()"
    sql = (
        f"WITH {hits}edge AS ({edge}) SELECT digest_id, cnt, tot, mx, mn, {total}, 0, 0, 0"
        f" FROM ({' UNION ALL '.join(best + [combined])}) AS u ORDER BY {_order(sort, descending)}"
        f" LIMIT %s OFFSET %s"
    )
    head = hit_params if hits else []
    return sql, (head + params + [end] + cond_params + best_params + [end] + cond_params + [limit, offset])


def _ranked_sql(
    window: Window, filters: Filters, sort: str, descending: bool, mirrored: bool = False
) -> tuple[str, list[Any]]:
    """(SQL, params) ranking the window's digests, each row with the number of digests in the window.

    One arm per piece of the window, glued with UNION ALL (SQLite's OR over one index deduplicates rows
    it cannot have twice, a third of the time), grouped once by digest. Source filters go into every
    arm (they change the sums). A search is matched against the texts of the digests of the window
    only, after grouping (a LIKE over every stored text costs MariaDB a third of a second at 100,000
    digests). The count of digests comes from the same groups: a second read of a CTE on SQLite (which
    materialises it once), FOUND_ROWS() after the query elsewhere (MariaDB would compute a CTE twice, and
    COUNT(*) OVER () copies every group into one more temporary table: a fifth of a 2.5-day window's time).
    mirrored: the window holds rows of mirrored copies (DigestStat.mirrored): ranked without them, summed apart.
    """
    digests = Digest._meta.db_table
    conds = ""
    arm_params: list[Any] = []
    if filters.by_source:
        sql, ids, _ = _ids_or_subquery(_source_qs(filters))
        conds += f" AND source_id IN ({sql})"
        arm_params += ids
    arms, params = _arms(window.pieces, conds, arm_params, mirrored)
    grouped = _grouped(arms, mirrored)
    join = ""
    search_params: list[str] = []
    if filters.search:
        condition, search_params = _search_condition(filters.search, "d")
        join = f" JOIN {digests} d ON d.id = g.digest_id WHERE {condition}"
    order = _order(sort, descending)
    columns = (
        "g.digest_id AS digest_id, g.cnt AS cnt, g.tot AS tot, g.mx AS mx, g.mn AS mn, g.mcnt AS mcnt,"
        " g.mtot AS mtot, g.ucnt AS ucnt"
    )
    if connection.vendor == "sqlite":
        sql = (
            f"WITH grouped AS ({grouped}), shown AS (SELECT {columns} FROM grouped g{join})"
            f" SELECT digest_id, cnt, tot, mx, mn, (SELECT COUNT(*) FROM shown), 0, mcnt, mtot, ucnt FROM shown"
            f" ORDER BY {order} LIMIT %s OFFSET %s"
        )
    else:
        sql = (
            f"SELECT SQL_CALC_FOUND_ROWS g.digest_id, g.cnt, g.tot, g.mx, g.mn, NULL, 0, g.mcnt, g.mtot, g.ucnt"
            f" FROM ({grouped}) AS g{join}"
            f" ORDER BY {order} LIMIT %s OFFSET %s"
        )
    return sql, params + search_params


COUNT_CAP = 1000  # a search matched in the query (not a list of ids) counts the span's matches up to this many


def top_digests(
    window: Window,
    filters: Filters,
    sort: str = DEFAULT_SORT,
    descending: bool = True,
    page: int = 1,
    per_page: int = PER_PAGE,
    use_span: bool = True,
    exact_total: bool = True,
) -> TopPage:
    """One page of the digests of the window, ranked; the page number is clamped to what exists.

    exact_total=False (the page): a search in too many texts for a list of ids (MariaDB) counts its
    matches up to the page's end or COUNT_CAP, whichever is further, and says "more" past that."""
    if not window.pieces:
        return TopPage(rows=[], total=0, number=1, pages=1, per_page=per_page)
    mirrored = copies_in(window, filters)
    # The span sums every source of a digest: with mirrored copies in the window, the rows are summed instead.
    end = usable_span(window, filters) if use_span and not mirrored else None
    hit_ids = None
    if end is None:
        sql, params = _ranked_sql(window, filters, sort, descending, mirrored)
    elif filters.search and connection.vendor != "sqlite":
        hit_ids = search_hit_ids(filters.search)
        if hit_ids == []:
            return TopPage(rows=[], total=0, number=1, pages=1, per_page=per_page)
    page = max(1, page)

    def cap(number: int) -> int | None:
        if exact_total or end is None or hit_ids is not None or not filters.search or connection.vendor == "sqlite":
            return None
        return max(COUNT_CAP, number * per_page) + 1  # one past: the count says whether there are more

    def run(number: int) -> tuple[list[tuple[Any, ...]], tuple[int, int] | None]:
        offset = (number - 1) * per_page
        if end is None:
            query, args = sql, params + [per_page, offset]
        else:
            query, args = _ranked_sql_spanned(
                window, end, sort, descending, per_page, offset, filters.search, hit_ids, cap(number)
            )
        with connection.cursor() as cur:
            cur.execute(query, args)
            rows = cur.fetchall()
            if "SQL_CALC_FOUND_ROWS" in query:  # the count, even past the last page
                cur.execute("SELECT FOUND_ROWS()")
                return rows, (cur.fetchone()[0], 0)
        return rows, (rows[0][5], rows[0][6]) if rows else None

    rows, counts = run(page)
    more = False
    if counts is None and page > 1:  # past the last page (a huge page number): count, then show the last page
        table = DigestStat._meta.db_table
        where, where_params = _where(window, filters)
        with connection.cursor() as cur:
            cur.execute(f"SELECT COUNT(DISTINCT digest_id) FROM {table} WHERE {where}", where_params)
            counts = (cur.fetchone()[0], 0)
    total = int(counts[0]) + int(counts[1]) if counts else 0
    capped = cap(page)
    if rows and counts and capped and counts[0] >= capped:  # stopped counting: more than that
        total, more = total - 1, True
    if not rows and page > 1:  # past the last page: show the last one
        page = max(1, math.ceil(total / per_page))
        rows = run(page)[0] if total else []
    out = [
        TopRow(
            digest_id=r[0],
            count=int(r[1]),
            total_us=int(r[2]),
            max_us=_int(r[3]),
            min_us=_int(r[4]),
            mirrored_count=int(r[7] or 0),
            mirrored_us=int(r[8] or 0),
            unmeasured_count=int(r[9] or 0),
        )
        for r in rows
    ]
    _attach_texts(out)
    sources = _attach_where(out, window, filters)
    _attach_proxysql_extremes(out, {d: [s for s, copies in found if not copies] for d, found in sources.items()})
    return TopPage(
        rows=out,
        total=total,
        number=page,
        pages=max(1, math.ceil(total / per_page)),
        per_page=per_page,
        more=more,
        mirror_note=_mirror_note(out),
    )


def _int(v: Any) -> int | None:
    return None if v is None else int(v)


def _attach_texts(rows: list[TopRow]) -> None:
    by_id = {
        d["id"]: d
        for d in Digest.objects.filter(pk__in=[r.digest_id for r in rows]).values("id", "digest", "digest_text")
    }
    for r in rows:
        d = by_id.get(r.digest_id)
        if d:
            r.digest, r.text = d["digest"], d["digest_text"]
            # cut here, not with |truncatechars (which weighs every character of 50 rows on each page)
            r.short = r.text if len(r.text) <= 160 else r.text[:159] + "…"
            r.title = r.text if len(r.text) <= 1000 else r.text[:999] + "…"


def _attach_where(rows: list[TopRow], window: Window, filters: Filters) -> dict[int, list[tuple[DigestSource, bool]]]:
    """Where each listed digest ran in the window: hostgroups, user@schema, number of nodes. Returns
    {digest id: [(DigestSource, whether its rows there are all mirrored copies)]}."""
    if not rows:
        return {}
    table = DigestStat._meta.db_table
    where, params = _where(window, Filters(**{**filters.__dict__, "search": ""}))
    ids = [r.digest_id for r in rows]
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT digest_id, source_id, MIN(CASE WHEN mirrored = 1 THEN 1 ELSE 0 END) FROM {table}"
            f" WHERE {where} AND digest_id IN ({','.join(['%s'] * len(ids))}) GROUP BY digest_id, source_id",
            params + ids,
        )
        pairs = cur.fetchall()
    sources = {s.pk: s for s in DigestSource.objects.filter(pk__in={p[1] for p in pairs})}
    by_digest: dict[int, list[tuple[DigestSource, bool]]] = {}
    for digest_id, source_id, copies in pairs:
        s = sources.get(source_id)
        if s:
            by_digest.setdefault(digest_id, []).append((s, bool(copies)))
    for r in rows:
        found = [s for s, _ in by_digest.get(r.digest_id, [])]
        users = sorted({f"{s.username}@{s.schemaname}" for s in found})
        r.where = {
            "hostgroups": sorted({s.hostgroup for s in found}),
            "users": users if len(users) <= 3 else users[:3] + [f"+{len(users) - 3} more"],
            "nodes": len({s.node_id for s in found}),
        }
        r.user_count = len(users)  # the page's "first user +N" (not part of `where`, which the API returns as is)
    return by_digest


def copies_in(window: Window, filters: Filters) -> bool:
    """Whether the window holds rows that are, or may be, mirrored copies (the polls' DigestPoll.copy_rows) on the
    nodes in scope: one read of the small poll table. Without any, the ranking needs no per-row flag."""
    if not window.pieces:
        return False
    polls = DigestPoll.objects.filter(_pieces_q(window.pieces), copy_rows__gt=0)
    if filters.node is not None:
        polls = polls.filter(node_id=filters.node)
    elif filters.cluster is not None:
        polls = polls.filter(node__cluster_id=filters.cluster)
    return polls.exists()


def _mirror_note(rows: list[TopRow]) -> str:
    """The page's note when the polls could not tell copies apart on some of its rows ("" when not)."""
    unmeasured = sum(1 for r in rows if r.unmeasured_count)
    if not unmeasured:
        return ""
    return (
        f"Mirrored copies are not told apart in full on this page: on {unmeasured} digest"
        f"{'s' if unmeasured != 1 else ''} the polls could not run a mirror rule's pattern (PCRE's match limit, or "
        f"the poll's search budget of {mirror.poll_budget_s():g} s of CPU), so whether their executions in a mirror "
        'hostgroup are copies is not measured: they are counted, marked "not measured".'
    )


def proxysql_extremes(
    wanted: Mapping[int, tuple[Sequence[DigestSource], str]],
) -> dict[int, tuple[int | None, int | None]]:
    """ProxySQL's own min_time / max_time of digests since it first saw them (or its last reset), as the latest digest
    poll read them (the baseline it keeps in Redis). wanted: {key: (DigestSource list, digest hash)} -> {key: (min,
    max)}, (None, None) where none is kept. One Redis round trip for the whole page."""
    asks: list[tuple[int, int, bytes]] = []
    for key, (sources, digest_hash) in wanted.items():
        for s in sources:
            field = f"{s.hostgroup}\t{s.schemaname}\t{s.username}\t{s.client_address}\t{digest_hash}".encode()
            asks.append((key, s.node_id, field))
    out: dict[int, tuple[int | None, int | None]] = {key: (None, None) for key in wanted}
    if not asks:
        return out
    try:
        pipe = live.client().pipeline(transaction=False)
        for _, node_id, field in asks:
            pipe.hget(baseline_key(node_id), field)
        values = pipe.execute()
    except redis.RedisError:
        return out
    for (key, _, _), value in zip(asks, values):
        try:
            _, _, low, high, *_ = (int(x) for x in (value or b"").split())
        except ValueError:
            continue
        least, most = out[key]
        out[key] = (low if least is None else min(least, low), high if most is None else max(most, high))
    return out


def _attach_proxysql_extremes(rows: list[TopRow], sources: Mapping[int, list[DigestSource]]) -> None:
    """Where the window's max (min) is not derivable from cumulative counters (ProxySQL's max did not rise in any
    interval of the window: the usual case once a digest has run a while), ProxySQL's own max since it first saw
    the digest bounds it: r.max_bound_us (r.min_bound_us), shown as "≤ max" (">= min"), equal to what the admin
    port's stats_mysql_query_digest says."""
    found = proxysql_extremes(
        {r.digest_id: (sources.get(r.digest_id, []), r.digest) for r in rows if r.max_us is None or r.min_us is None}
    )
    for r in rows:
        least, most = found.get(r.digest_id, (None, None))
        r.max_bound_us = most if r.max_us is None else None
        r.min_bound_us = least if r.min_us is None else None


# -- one digest ----------------------------------------------------------------------------------------
def digest_breakdown(digest: Digest, window: Window, filters: Filters) -> list[BreakdownRow]:
    """Per source, the digest's figures over the window (biggest total first); a source's mirrored copies
    (DigestStat.mirrored) and its rows whose copies were not measured each make a row of their own."""
    table = DigestStat._meta.db_table
    where, params = _where(window, Filters(**{**filters.__dict__, "search": ""}))
    kind = f"CASE WHEN mirrored = 1 THEN {COPIES} WHEN mirrored IS NULL THEN {UNMEASURED} ELSE 0 END"
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT source_id, SUM(count_star), SUM(sum_time), MAX(max_time), MIN(min_time), SUM(rows_sent),"
            f" SUM(rows_affected), SUM(CASE WHEN rows_sent IS NULL THEN 0 ELSE count_star END), {kind} AS kind"
            f" FROM {table} WHERE {where} AND digest_id = %s GROUP BY source_id, {kind}"
            f" ORDER BY SUM(sum_time) DESC",
            params + [digest.pk],
        )
        rows = cur.fetchall()
    sources = {
        s.pk: s for s in DigestSource.objects.filter(pk__in=[r[0] for r in rows]).select_related("node__cluster")
    }
    bounds = proxysql_extremes(
        {r[0]: ([sources[r[0]]], digest.digest) for r in rows if r[0] in sources and (r[3] is None or r[4] is None)}
    )
    out: list[BreakdownRow] = []
    for r in rows:
        shown = _bounds(bounds.get(r[0]), _int(r[3]), _int(r[4]))
        out.append(
            {
                "source": sources.get(r[0]),
                "mirrored": r[8] == COPIES,
                "unmeasured": r[8] == UNMEASURED,
                "count": int(r[1]),
                "total_us": int(r[2]),
                "max_us": _int(r[3]),
                "min_us": _int(r[4]),
                "avg_us": int(r[2]) / int(r[1]) if r[1] else None,
                "rows_sent": _int(r[5]),
                "rows_affected": _int(r[6]),
                "rows_count": int(r[7] or 0),
                "max_bound_us": shown["max_bound_us"],
                "min_bound_us": shown["min_bound_us"],
            }
        )
    return out


COPIES, UNMEASURED = 1, 2  # digest_breakdown's kinds of rows besides the application's own


def _bounds(found: tuple[int | None, int | None] | None, most: int | None, least: int | None) -> Bounds:
    """A breakdown row's ProxySQL bounds where its window's extremes are not known (_attach_proxysql_extremes)."""
    low, high = found or (None, None)
    return {"max_bound_us": high if most is None else None, "min_bound_us": low if least is None else None}


def chart_bucket(seconds: float) -> int:
    """Bucket width of a chart over `seconds`: at most a few hundred points, never finer than a minute
    (polls come every ~30 s, so a minute always holds one)."""
    for width in (60, FIVE_MINUTES, HOUR, DAY):
        if seconds / width <= 400:
            return width
    return DAY


def chart_series(digest: Digest, window: Window, filters: Filters) -> ChartSeries:
    """{"bucket_s", "points": [{x: epoch ms, rate, avg_ms, max_ms}], "partial"}; None values are gaps.

    A bucket is a gap when none of the nodes this digest ran on (in the window, within the filters)
    had a poll with figures in it: unreachable, poller stopped, a first poll. A bucket where only some
    of them had one shows what those saw (executions/s over the time they covered) and is counted in
    "partial". Times are None where nothing ran; max_ms where ProxySQL's counters let us know it.
    """
    width = max(chart_bucket(window.seconds), finest_kept(window.start))
    start = window.start // width * width
    marks = {lv: (m if lv <= width else None) for lv, m in rolled_until().items()}
    pieces = plan_window(start, window.end, marks)
    table = DigestStat._meta.db_table
    sql, params = _pieces_sql(pieces)
    src_filter = ""
    src_params: list[Any] = []
    if filters.by_source:
        sub, sub_params = _source_qs(Filters(**{**filters.__dict__, "search": ""})).values("pk").query.sql_with_params()
        src_filter, src_params = f" AND source_id IN ({sub})", list(sub_params)
    with connection.cursor() as cur:
        cur.execute(
            f"SELECT ts, source_id, count_star, sum_time, max_time, mirrored FROM {table}"
            f" WHERE {sql} AND digest_id = %s{src_filter}",
            params + [digest.pk] + src_params,
        )
        stats = cur.fetchall()
    ran_from = list(DigestSource.objects.filter(pk__in={r[1] for r in stats}))
    node_of = {s.pk: s.node_id for s in ran_from}
    # a mirror rule's copies: not the application's executions
    stats = [r[:5] for r in stats if r[5] is None or not r[5]]
    polls = DigestPoll.objects.filter(_pieces_q(pieces), polls_ok__gt=0)  # the same pieces over the polls
    if node_of:
        polls = polls.filter(node_id__in=set(node_of.values()))
    else:  # it did not run here: whether a bucket is a zero or a gap depends on the nodes in scope
        if filters.cluster is not None:
            polls = polls.filter(node__cluster_id=filters.cluster)
        if filters.node is not None:
            polls = polls.filter(node_id=filters.node)
    expected = len(set(node_of.values())) or None

    def bucket(ts: int) -> _Bucket:
        return buckets.setdefault(
            ts // width * width, {"covered": 0.0, "nodes": set(), "count": 0, "sum": 0, "max": None}
        )

    buckets: dict[int, _Bucket] = {}
    for ts, node_id, interval in polls.values_list("ts", "node_id", "interval_s"):
        b = bucket(ts)
        b["covered"] += interval
        b["nodes"].add(node_id)
    for ts, _, count, total, most in stats:
        b = bucket(ts)
        b["count"] += count
        b["sum"] += total
        if most is not None:
            b["max"] = most if b["max"] is None else max(b["max"], most)
    points: list[ChartPoint] = []
    partial = 0
    for x in range(start, window.end, width):
        got = buckets.get(x)
        if got is None or got["covered"] <= 0:
            points.append({"x": x * 1000, "rate": None, "avg_ms": None, "max_ms": None})
            continue
        b = got
        if expected and len(b["nodes"]) < expected:
            partial += 1
        per_node = b["covered"] / len(b["nodes"])
        points.append(
            {
                "x": x * 1000,
                "rate": round(b["count"] / per_node, 4),
                "avg_ms": round(b["sum"] / b["count"] / 1000, 3) if b["count"] else None,
                "max_ms": round(b["max"] / 1000, 3) if b["max"] is not None else None,
            }
        )
    return {
        "bucket_s": width,
        "start": start * 1000,
        "end": window.end * 1000,
        "points": points,
        "partial": partial,
        "nodes": expected or 0,
    }


# -- what the filters offer, and how fresh the data is ------------------------------------------------
def filter_choices() -> FilterChoices:
    sources = DigestSource.objects
    return {
        "clusters": list(Cluster.objects.order_by("name").values_list("pk", "name")),
        "nodes": list(
            ProxySQLNode.objects.select_related("cluster")
            .order_by("cluster__name", "name")
            .values_list("pk", "cluster__name", "name")
        ),
        "hostgroups": sorted(set(sources.values_list("hostgroup", flat=True).distinct())),
        "users": sorted(set(sources.values_list("username", flat=True).distinct())),
        "schemas": sorted(set(sources.values_list("schemaname", flat=True).distinct())),
    }


PROBLEMS_SHOWN = 10


def poll_summary(filters: Filters, now: float | None = None) -> PollSummary:
    """How fresh the digest history of the nodes in scope is: how many nodes were polled lately, the
    oldest good poll, and the nodes failing or stale (the first few, worst first), with their errors."""
    now = now or time.time()
    stale_after = stale_after_s()
    nodes = ProxySQLNode.objects.all()
    if filters.cluster is not None:
        nodes = nodes.filter(cluster_id=filters.cluster)
    if filters.node is not None:
        nodes = nodes.filter(pk=filters.node)
    pks = list(nodes.values_list("pk", flat=True))
    states = {s.node_id: s for s in DigestNodeState.objects.filter(node_id__in=pks)}
    fresh = 0
    problems: list[Problem] = []
    ages: list[float] = []
    for pk in pks:
        s = states.get(pk)
        age = None if not s or not s.last_ok_ts else max(0.0, now - s.last_ok_ts)
        if age is not None:
            ages.append(age)
        if s and not s.error and age is not None and age <= stale_after:
            fresh += 1
            continue
        problems.append(
            {
                "node_id": pk,
                "state": s,
                "age": age,
                "failing_for": None if not s or not s.error_since else max(0.0, now - s.error_since),
            }
        )
    problems.sort(key=lambda p: (p["state"] is not None, -(p["failing_for"] or 0), -(p["age"] or 0)))
    shown = problems[:PROBLEMS_SHOWN]
    names = {
        n.pk: n for n in ProxySQLNode.objects.select_related("cluster").filter(pk__in=[p["node_id"] for p in shown])
    }
    for p in shown:
        p["node"] = names.get(p["node_id"])
    return {
        "nodes": len(pks),
        "fresh": fresh,
        "oldest_age": max(ages) if ages else None,
        "newest_age": min(ages) if ages else None,
        "problems": shown,
        "more_problems": len(problems) - len(shown),
        "stale_after": stale_after,
    }


def stale_after_s() -> float:
    """A node's digest poll older than this is stale (the same rule as every other poll: status.stale_after)."""
    return status.stale_after(settings.MONITOR_DIGEST_INTERVAL_S)


# -- the rule tester -----------------------------------------------------------------------------------
def rule_chains(sample: RuleSample) -> list[RuleColumn]:
    """The rule tester's columns for a RuleSample: the cluster's current configuration version, and the chosen
    draft change set's rules beside it. [] when there is nothing to test (no cluster, no query, no version)."""
    if sample.cluster is None or not (sample.query or sample.digest):
        return []
    version = config_services.latest(sample.cluster)
    if version is None:
        return []
    kwargs: dict[str, Any] = {
        "username": sample.username,
        "schemaname": sample.schemaname,
        "client_addr": sample.client_addr,
        "reached": rule_tester.Batch(),
    }  # both columns share one budget (RULE_WALK_BUDGET_S)
    if sample.digest is not None:
        kwargs.update(digest_text=sample.digest.digest_text, digest=sample.digest.digest)
    columns: list[RuleColumn] = [
        {
            "title": f"Current rules (version {version.number})",
            "url": version.get_absolute_url(),
            "outcome": rule_tester.on_content(version.content, sample.query, **kwargs),
        }
    ]
    if sample.change_set is not None:
        cs = sample.change_set
        columns.append(
            {
                "title": f"With change set #{cs.pk} (draft on version {cs.base.number})",
                "url": cs.get_absolute_url(),
                "outcome": rule_tester.on_content(config_services.target_of(cs), sample.query, **kwargs),
            }
        )
    return columns


def rule_test_choices(cluster: Cluster | None, now: float | None = None) -> RuleTestChoices:
    """The tester's pick lists for a cluster: its top digests of the last hour, its draft change sets."""
    if cluster is None:
        return {"digests": [], "change_sets": []}
    now = int(now or time.time())
    page = top_digests(window_for(now - 3600, now), Filters(cluster=cluster.pk), per_page=50, exact_total=False)
    drafts = ChangeSet.objects.filter(cluster=cluster, state=ChangeSet.State.DRAFT).select_related("base")
    return {"digests": page.rows, "change_sets": list(drafts[:50])}


def digest_summary(digest: Digest, window: Window, filters: Filters, breakdown: list[BreakdownRow]) -> DigestSummary:
    """The detail page's figures beyond the per-source rows: when the polls first and last saw the digest (all
    history kept), its share of the window's total time and executions (same filters), and its split by
    hostgroup. `breakdown`: digest_breakdown()'s rows for this window."""
    table = DigestStat._meta.db_table
    with connection.cursor() as cur:  # (digest, resolution, ts) is indexed: one short range per resolution
        cur.execute(
            f"SELECT resolution, MIN(ts), MAX(ts) FROM {table} WHERE digest_id = %s GROUP BY resolution", [digest.pk]
        )
        seen = cur.fetchall()
        where, params = _where(window, Filters(**{**filters.__dict__, "search": ""}))
        cur.execute(f"SELECT SUM(sum_time), SUM(count_star) FROM {table} WHERE {where}", params)
        all_time, all_count = (int(v or 0) for v in cur.fetchone())
        if copies_in(window, filters):  # the shares are of the application's executions, as the list counts them
            cur.execute(f"SELECT SUM(sum_time), SUM(count_star) FROM {table} WHERE {where} AND mirrored = 1", params)
            copies_time, copies_count = (int(v or 0) for v in cur.fetchone())
            all_time, all_count = all_time - copies_time, all_count - copies_count
    raw = [r for r in seen if r[0] == RAW]
    own = [b for b in breakdown if not b.get("mirrored")]
    copies = [b for b in breakdown if b.get("mirrored")]
    total_us = sum(b["total_us"] for b in own)
    count = sum(b["count"] for b in own)
    split = _by_hostgroup(own)
    mirrored = _by_hostgroup(copies)
    for h in split:
        h["time_share"] = h["total_us"] / total_us if total_us else None
        h["avg_us"] = h["total_us"] / h["count"] if h["count"] else None
    for h in mirrored:
        h["avg_us"] = h["total_us"] / h["count"] if h["count"] else None
    with_rows = [b for b in own if b["rows_sent"] is not None]
    rows_count = sum(b["rows_count"] for b in with_rows)
    rows: RowsSummary | None = None
    if with_rows:
        sent, affected = sum(b["rows_sent"] or 0 for b in with_rows), sum(b["rows_affected"] or 0 for b in with_rows)
        rows = {
            "sent": sent,
            "affected": affected,
            "executions": rows_count,
            "partial": rows_count < count,
            "sent_each": sent / rows_count if rows_count else None,
            "affected_each": affected / rows_count if rows_count else None,
        }
    return {
        "rows": rows,
        "first_seen": digest.first_polled_at or min((r[1] for r in seen), default=None),
        "last_seen": raw[0][2] if raw else max((r[2] for r in seen), default=None),
        "total_us": total_us,
        "count": count,
        "mirrored": mirrored,
        "mirrored_count": sum(h["count"] for h in mirrored),
        "mirrored_us": sum(h["total_us"] for h in mirrored),
        "time_share": total_us / all_time if all_time else None,
        "count_share": count / all_count if all_count else None,
        "hostgroups": split,
    }


def _by_hostgroup(breakdown: Iterable[BreakdownRow]) -> list[HostgroupRow]:
    """Breakdown rows summed per hostgroup, the most total time first."""
    hostgroups: dict[int, HostgroupRow] = {}
    for b in breakdown:
        if b["source"] is None:
            continue
        number = b["source"].hostgroup
        hg = hostgroups.setdefault(number, {"hostgroup": number, "count": 0, "total_us": 0})
        hg["count"] += b["count"]
        hg["total_us"] += b["total_us"]
    return sorted(hostgroups.values(), key=lambda h: -h["total_us"])


# -- the effect check's traffic ------------------------------------------------------------------------
TRAFFIC_WINDOW_S = 3600
TRAFFIC_MAX_ROWS = 5000  # the busiest (digest, user, schema, client) rows; a rule walk each (~20 us a rule)


@dataclass
class TrafficRow:
    digest: str
    digest_text: str
    username: str
    schemaname: str
    client_address: str
    count: int
    sum_time_us: int


@dataclass
class Traffic:
    """A cluster's stored digest traffic over its last `seconds` (the effect check's input, apps/configuration)."""

    rows: list[TrafficRow]
    seconds: float
    truncated: bool = False

    @property
    def count(self) -> int:
        return sum(r.count for r in self.rows)

    @property
    def sum_time_us(self) -> int:
        return sum(r.sum_time_us for r in self.rows)


def cluster_traffic(cluster_id: int, seconds: int = TRAFFIC_WINDOW_S, now: float | None = None) -> Traffic:
    """The last `seconds` of the cluster's digests, summed per digest and source (user, schema, client) over its
    nodes; `seconds` is what the stored rows cover (less when the digest polls started later)."""
    now = int(now or time.time())
    window = window_for(now - seconds, now, now)
    sources = {s.pk: s for s in DigestSource.objects.filter(node__cluster_id=cluster_id)}
    if not sources:
        return Traffic(rows=[], seconds=0)
    stats = DigestStat.objects.filter(_pieces_q(window.pieces), source_id__in=list(sources))
    first = stats.aggregate(first=Min("ts"))["first"]
    grouped = (
        stats.values("digest_id", "source_id")
        .annotate(n=Sum("count_star"), t=Sum("sum_time"))
        .order_by("-n", "digest_id", "source_id")
    )
    picked = list(grouped[: TRAFFIC_MAX_ROWS + 1])
    texts = {
        pk: (digest, text)
        for pk, digest, text in Digest.objects.filter(pk__in={r["digest_id"] for r in picked}).values_list(
            "pk", "digest", "digest_text"
        )
    }
    rows = []
    for r in picked[:TRAFFIC_MAX_ROWS]:
        s = sources[r["source_id"]]
        rows.append(
            TrafficRow(
                *texts[r["digest_id"]], s.username, s.schemaname, s.client_address, int(r["n"] or 0), int(r["t"] or 0)
            )
        )
    covered = max(1, now - max(first, window.start)) if first is not None else 0
    return Traffic(rows=rows, seconds=min(seconds, covered), truncated=len(picked) > TRAFFIC_MAX_ROWS)


def search_digests(search: str, limit: int) -> tuple[list[Digest], bool]:
    """Up to `limit` digests whose text contains `search` (any case) or whose hash it is, by id, and whether there
    are more. The word index narrows the texts read; a term in many texts stops at the LIMIT."""
    condition, params = _search_condition(search, "d")
    ids = search_index.matching_ids(condition, params, search, limit, digest_hash=_hash_of(search))
    more = ids is None
    if more:  # more than `limit` match: the first ones found are enough for a search box
        with connection.cursor() as cur:
            cur.execute(f"SELECT d.id FROM {Digest._meta.db_table} d WHERE {condition} LIMIT {int(limit)}", params)
            ids = [r[0] for r in cur.fetchall()]
    return list(Digest.objects.filter(pk__in=ids).order_by("pk")), more


# -- mirror rules: the node page's panel (apps/pages/node.py) and the API's node state -------------------
def mirror_rules(node: ProxySQLNode, now: float) -> MirrorPanel:
    """The node's mirror rules as the digest poll last read them, each with its last measured window
    (apps/digests/mirroring.py). Three small indexed queries."""
    rules = list(MirrorRule.objects.filter(proxysql_node=node).order_by("rule_id"))
    state = DigestNodeState.objects.filter(node=node).only("last_ok_ts").first()
    latest: dict[int, MirrorRuleSample] = {}
    for sample in monitoring_models.MirrorRuleSample.objects.filter(
        node=node, resolution=monitoring_models.RAW
    ).order_by("-ts")[:50]:
        latest.setdefault(sample.rule_id, sample)
    rows: list[MirrorRuleRow] = []
    for rule in rules:
        row: MirrorRuleRow = {
            "rule": rule,
            "match": rule.match_digest or rule.match_pattern,
            "sample": None,
            "note": "",
        }
        measured = latest.get(rule.rule_id)
        if rule.mirror_hostgroup is None:
            row["note"] = "not measured: only mirror_flagOUT is set, the copies go where the flagIN chain sends them"
        elif measured is None:
            row["note"] = "no window measured yet: the first figures come two digest polls after the rule appeared"
        else:
            span = measured.interval_s or 0
            row.update(
                {
                    "sample": measured,
                    "window_end": measured.ts,
                    "interval_s": span,
                    "age": now - measured.ts.timestamp(),
                    "hits": _times(measured.hits_ps, span),
                    "expected": _times(measured.expected_ps, span),
                    "mirrored": _times(measured.mirrored_ps, span),
                    "loss": measured.loss,
                    "prepared_share": measured.prepared_share,
                }
            )
            row["dropped"] = (
                max(0.0, row["expected"] - row["mirrored"])
                if row["expected"] is not None and row["mirrored"] is not None
                else None
            )
            if measured.loss is None:
                row["note"] = "nothing to mirror in this window"
        rows.append(row)
    losses = [r for r in rows if r.get("loss")]
    return {
        "mirror_rules": rows,
        "mirror_worst": max(losses, key=lambda r: r["loss"] or 0.0, default=None),  # each has a loss
        "mirror_rules_age": (now - state.last_ok_ts) if state and state.last_ok_ts else None,
        "digest_interval": settings.MONITOR_DIGEST_INTERVAL_S,
    }


def _times(rate: float | None, seconds: float) -> float | None:
    return None if rate is None else rate * seconds
