"""The effect check of a change: what the new configuration would do, found before it reaches a node.

Each finding names what it saw, with its values. Blocking ones stop the plan (an admin may override the
overridable ones with a typed reason); warnings are shown. Several of these are things ProxySQL itself
accepts without a word: a regex it cannot compile reaches runtime, a rule after a catch-all never runs,
a hostgroup with no server holds every query sent to it until mysql-connect_timeout_server_max.
"""

import itertools
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from apps.clients import proxysql_versions as versions
from apps.fleet import native
from apps.fleet.validators import whole_number
from apps.fleet.choices import ClusterKind
from apps.fleet.models import Cluster  # its fields only (kind, readers' minimum, native managers): no query
from apps.monitoring import rule_regex

from . import rule_tester
from .content import (
    Diff,
    claimed_hostgroups,
    diff,
    endpoint,
    endpoints,
    index,
    loaded_user,
    OperationalChange,
    operational_changes,
    password_hash,
    runtime_users,
    writers,
)
from .nodes import NodeConfig
from .tables import MYSQL_QUERY_RULES, MYSQL_SERVERS, MYSQL_USERS, SCHEDULER, TABLES, VARIABLES, Row

Content = Mapping[str, Any]  # a configuration (content.py) or a node's layer as nodes.read_layers reads it
Figures = Mapping[str, Any]  # a node's polled figures (its latest-state document's "figures")
Entry = tuple[Any, ...]  # what shadowed_rules files an earlier rule under: (flagIN, required fields, conditions)


class TrafficRow(Protocol):
    """One stored digest row of the last hour (digests.selectors.TrafficRow: an app above this one)."""

    @property
    def digest(self) -> str: ...
    @property
    def digest_text(self) -> str: ...
    @property
    def username(self) -> str: ...
    @property
    def schemaname(self) -> str: ...
    @property
    def client_address(self) -> str: ...
    @property
    def count(self) -> int: ...
    @property
    def sum_time_us(self) -> int: ...


class Traffic(Protocol):
    """A cluster's stored digest traffic (digests.selectors.Traffic)."""

    @property
    def rows(self) -> Sequence[TrafficRow]: ...
    @property
    def seconds(self) -> float: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def count(self) -> int: ...
    @property
    def sum_time_us(self) -> int: ...


@dataclass
class Finding:
    key: str
    label: str
    value: str
    blocking: bool
    overridable: bool = True
    info: bool = False  # a figure to read, no risk (a rule's traffic share, a mirror load within its limit)


def _online(content: Content, hostgroup: int | None) -> list[Row]:
    return [
        r for r in content.get(MYSQL_SERVERS.name) or [] if r["hostgroup_id"] == hostgroup and r["status"] == "ONLINE"
    ]


def _servers_anywhere(target: Content, node_layers: Iterable[Content]) -> set[int]:
    """Hostgroups with at least one server: the cluster's from the target, others from what the nodes run."""
    mine = claimed_hostgroups(target)
    hostgroups = {r["hostgroup_id"] for r in target.get(MYSQL_SERVERS.name) or []}
    for layer in node_layers:
        hostgroups |= {r["hostgroup_id"] for r in layer[MYSQL_SERVERS.name] if r["hostgroup_id"] not in mine}
    return hostgroups | native.placed_hostgroups(
        target.get(native.MANAGER_TABLES["galera"]) or (),
        target.get(MYSQL_SERVERS.name) or (),
        target.get(native.MANAGER_TABLES["replication"]) or (),
    )


def used_hostgroups(content: Content) -> set[int]:
    """Hostgroups queries go to: the writer and reader roles, active rules' destinations and mirrors, active
    users' default hostgroups."""
    roles = content.get("roles") or {}
    used: set[int | None] = {roles.get("writer"), roles.get("reader")}
    for r in content.get(MYSQL_QUERY_RULES.name) or []:
        if r["active"]:
            used |= {r["destination_hostgroup"], r["mirror_hostgroup"]}
    used |= {u["default_hostgroup"] for u in content.get(MYSQL_USERS.name) or [] if u["active"]}
    return {hg for hg in used if hg is not None}


def servers_findings(cluster: Cluster, base: Content, target: Content) -> list[Finding]:
    out: list[Finding] = []
    roles = target.get("roles") or {}
    for hg in sorted((claimed_hostgroups(base) | claimed_hostgroups(target)) & used_hostgroups(target)):
        before, after = len(_online(base, hg)), len(_online(target, hg))
        if before and not after:
            out.append(
                Finding(
                    "hostgroup_empty",
                    f"Hostgroup {hg} is left with no ONLINE server",
                    f"{before} ONLINE → 0: ProxySQL holds every query routed there until "
                    "mysql-connect_timeout_server_max, then fails it",
                    True,
                )
            )
    writer = roles.get("writer")
    writers = _online(target, writer) if writer is not None else []
    if cluster.kind != ClusterKind.GROUP_REPLICATION and len(writers) > 1:
        listed = ", ".join(f"{r['hostname']}:{r['port']}" for r in writers)
        manager = next((n for n in cluster.active_native_hostgroups() if n.get("writer_hostgroup") == writer), None)
        if manager is None:
            out.append(
                Finding(
                    "two_writers",
                    f"Writer hostgroup {writer} has {len(writers)} ONLINE writers",
                    listed + ": writes would go to several nodes at once",
                    True,
                )
            )
        else:
            # ProxySQL's own manager decides at runtime which of these rows write: the usual native setup lists
            # every node in the writer hostgroup, so this is told, not refused.
            how = (
                f"ProxySQL keeps max_writers={manager.get('max_writers', 1)} of them writing and moves the others "
                f"to backup writer hostgroup {manager.get('backup_writer_hostgroup')}"
                if manager.get("kind") == "galera"
                else "ProxySQL keeps writing only those whose read_only is OFF and moves the others to reader "
                f"hostgroup {manager.get('reader_hostgroup')}"
            )
            out.append(
                Finding(
                    "native_writers",
                    f"Writer hostgroup {writer} lists {len(writers)} ONLINE servers, "
                    f"under ProxySQL's native {manager.get('kind')} manager",
                    f"{listed}: {how}",
                    False,
                )
            )
    reader = roles.get("reader")
    if reader is not None:
        before, after = len(_online(base, reader)), len(_online(target, reader))
        if after < cluster.min_available_readers and after < before:
            out.append(
                Finding(
                    "readers_below_minimum",
                    f"Reader hostgroup {reader} drops below the cluster's minimum of {cluster.min_available_readers}",
                    f"{before} ONLINE → {after}",
                    True,
                )
            )
    return out


def operational_findings(
    cluster: Cluster,
    base: Content,
    target: Content,
    nodes: Mapping[int, NodeConfig],
    *,
    write_back: bool = False,
    every_node: bool = False,
) -> list[Finding]:
    """The writer and drains belong to operations (switchover, failover, drain, restore: guarded, with a drain
    and a catch-up). A change that moves them is refused, not overridable, with the operation to use: against
    the latest version, and against each node's runtime where this change loads mysql_servers (a LOAD on a node
    that runs another writer moves it). A write-back (a repair to the current version) is only told. Changes to
    the live writer's own row are named. A write-back that would move the writer (no node runs the version's writer)
    or restore/drain a server every node agrees on is refused as a repair is, when it writes every node (`every_node`;
    issue 39): the version is behind them. A write-back of chosen nodes puts right nodes that lag: told."""
    out: list[Finding] = []
    said: set[str] = set()
    for change in operational_changes(base, target):
        said.add(change.text)
        out.append(
            Finding(
                f"operational_{change.kind}",
                f"{change.text[0].upper()}{change.text[1:]}: {change.way}",
                "who writes and which servers are drained is changed only by operations, never by a configuration",
                not write_back,
                overridable=False,
            )
        )
    # ProxySQL's native manager picks the writer at runtime itself: there a runtime that differs is told, not refused.
    native = bool(cluster.active_native_hostgroups())
    lives = {
        nc.name: {"roles": base.get("roles"), MYSQL_SERVERS.name: nc.layers["runtime"][MYSQL_SERVERS.name]}
        for nc in nodes.values()
        if not nc.error
    }
    runs_target = writers(target) in [writers(live) for live in lives.values()]
    on_every_node = (
        set.intersection(*[{c.text for c in operational_changes(live, target)} for live in lives.values()])
        if lives
        else set()
    )

    def lags(
        change: OperationalChange, live: Content
    ) -> bool:  # a write-back puts right a node that lags behind the others, never the whole cluster
        if not every_node:
            return True
        if change.kind == "writer":
            return runs_target or not writers(live)
        return change.text not in on_every_node

    for nc in nodes.values():
        if nc.error or (nc.plan is not None and "MYSQL SERVERS" not in nc.plan.modules):
            continue
        live = lives[nc.name]
        for change in operational_changes(live, target):
            if change.text in said:
                continue
            out.append(
                Finding(
                    f"operational_{change.kind}",
                    f"On {nc.name}, this change {change.text}: {change.way}",
                    f"{nc.name}'s runtime has the writer {endpoints(writers(live))} and this "
                    "change loads its mysql_servers",
                    not (native or (write_back and lags(change, live))),
                    overridable=False,
                )
            )
    roles = base.get("roles") or {}
    kept = set(writers(base)) & set(writers(target))
    after = index(target, MYSQL_SERVERS)
    for key, row in index(base, MYSQL_SERVERS).items():
        new = after.get(key)
        if row["hostgroup_id"] != roles.get("writer") or (row["hostname"], row["port"]) not in kept or new is None:
            continue
        fields = [f"{c} {row[c]} → {new[c]}" for c in MYSQL_SERVERS.column_names if c != "status" and row[c] != new[c]]
        if fields:
            out.append(
                Finding(
                    "writer_row_changed",
                    f"Changes the live writer {endpoint(row)}'s row in hostgroup {row['hostgroup_id']}",
                    ", ".join(fields),
                    False,
                )
            )
    return out


def compile_regex(pattern: str, caseless: bool, engine: int) -> rule_regex.Pattern:
    """The pattern compiled as ProxySQL's engine would (1: PCRE, 2: RE2), every search bounded
    (monitoring.rule_regex); raises that library's error."""
    return rule_regex.compile(pattern, caseless, engine)


def regex_error(pattern: str, modifiers: str | None, engine: int) -> str | None:
    """None if ProxySQL's regex engine compiles it, else its error (engine 1: PCRE, 2: RE2)."""
    try:
        compile_regex(pattern, "CASELESS" in (modifiers or "").upper(), engine)
    except Exception as exc:  # each library has its own error class
        return str(exc).strip("b'\"")
    return None


_META = re.compile(r"(?<!\\)[.*+?()\[\]{}|$^]")
_LITERAL_START = re.compile(r"\^((?:[^\\.*+?()\[\]{}|$^]|\\.)*)")
UNIVERSAL = (None, "", ".*", "^", "^.*", ".")


def _pure_prefix(pattern: str | None) -> str | None:
    """'^SELECT' -> 'SELECT' when the pattern is an anchor and literal text only, else None."""
    if not pattern or not pattern.startswith("^") or _META.search(pattern[1:]):
        return None
    return re.sub(r"\\(.)", r"\1", pattern[1:])


def _literal_start(pattern: str | None) -> str | None:
    """The literal text every match of an anchored pattern starts with ('^SELECT.*FOR UPDATE' -> 'SELECT');
    None when the pattern is not anchored or has an alternation that could match something else."""
    if not pattern or re.search(r"(?<!\\)\|", pattern):
        return None
    m = _LITERAL_START.match(pattern)
    return re.sub(r"\\(.)", r"\1", m.group(1)) if m else None


SAME_FIELDS = ("flagIN", "username", "schemaname", "client_addr", "proxy_addr", "proxy_port", "digest")


def shadowed_rules(rules: Iterable[Row]) -> list[tuple[Row, Row]]:
    """[(later, earlier)] for active rules that can never match: an earlier active rule with apply=1 and the
    same flagIN catches everything they would (the same or broader conditions, a pattern that is a literal
    prefix of theirs). Only what can be shown for sure is reported.

    Linear in the rules: an earlier rule is filed under what it catches (flagIN, the fields it requires, one
    condition per pattern: any, this exact pattern, this literal prefix), the first such rule per entry; a
    rule looks up the entries that would catch it (its fields' subsets, its pattern, its literal start's
    prefixes of the lengths filed) and the earliest rule found is the one that shadows it."""
    active = sorted((r for r in rules if r["active"]), key=lambda r: r["rule_id"])
    first: dict[Entry, Row] = {}
    lengths: dict[tuple[str, bool], set[int]] = {}
    out: list[tuple[Row, Row]] = []
    for rule in active:
        found = [first[key] for key in _entries_catching(rule, lengths) if key in first]
        if found:
            out.append((rule, min(found, key=lambda r: r["rule_id"])))
        if rule["apply"]:
            for key in _entries(rule):
                first.setdefault(key, rule)
                for field, (kind, text, caseless) in zip(PATTERN_FIELDS, key[2:]):
                    if kind == "prefix":
                        lengths.setdefault((field, caseless), set()).add(len(text))
    return out


PATTERN_FIELDS = ("match_digest", "match_pattern")


def _entries(earlier: Row) -> list[Entry]:
    """The entries an earlier rule (apply=1) is filed under: its flagIN and required fields, and per pattern
    field what it catches: any (no pattern, or one matching everything), this exact pattern with the same
    re_modifiers, or every pattern whose literal start begins with its own pattern when that is an anchor and
    literal text only (upper-cased when CASELESS). A negated match_pattern catches nothing for sure."""
    required = tuple((f, earlier[f]) for f in SAME_FIELDS[1:] if earlier[f] is not None)
    per_field: list[list[tuple[str, Any, Any]]] = []
    for field in PATTERN_FIELDS:
        a = earlier[field]
        if field == "match_pattern" and earlier["negate_match_pattern"]:
            return []  # a negated pattern catches nothing for sure
        if a in UNIVERSAL:
            per_field.append([("any", None, None)])
            continue
        conditions: list[tuple[str, Any, Any]] = [("exact", a, earlier["re_modifiers"] or "")]
        prefix = _pure_prefix(a)
        if prefix is not None:
            caseless = "CASELESS" in (earlier["re_modifiers"] or "").upper()
            conditions.append(("prefix", prefix.upper() if caseless else prefix, caseless))
        per_field.append(conditions)
    return [(earlier["flagIN"], required, d, p) for d in per_field[0] for p in per_field[1]]


def _entries_catching(later: Row, lengths: Mapping[tuple[str, bool], Collection[int]]) -> list[Entry]:
    """The entries whose rules would catch `later`: its fields' subsets, and per pattern field any, its exact
    pattern, and its literal start's prefixes of the lengths filed (only any for no pattern or a negated one)."""
    present = [f for f in SAME_FIELDS[1:] if later[f] is not None]
    subsets = [
        tuple((f, later[f]) for f in chosen)
        for n in range(len(present) + 1)
        for chosen in itertools.combinations(present, n)
    ]
    per_field: list[list[tuple[str, Any, Any]]] = []
    for field in PATTERN_FIELDS:
        b = later[field]
        conditions: list[tuple[str, Any, Any]] = [("any", None, None)]
        if not (b in UNIVERSAL or (field == "match_pattern" and later["negate_match_pattern"])):
            conditions.append(("exact", b, later["re_modifiers"] or ""))
            start = _literal_start(b)
            if start is not None:
                for caseless, text in ((False, start), (True, start.upper())):
                    conditions += [
                        ("prefix", text[:n], caseless) for n in lengths.get((field, caseless), ()) if n <= len(text)
                    ]
        per_field.append(conditions)
    return [(later["flagIN"], required, d, p) for required in subsets for d in per_field[0] for p in per_field[1]]


def rules_findings(
    d: Diff, target: Content, engine: int, servers_in: Collection[int]
) -> tuple[list[Finding], set[tuple[Any, ...]]]:
    """Findings on the query rules of `target`; `d` the diff from the base to it."""
    out: list[Finding] = []
    changed = {c.key for c in d.rows if c.table == MYSQL_QUERY_RULES.name and c.after}
    rules = target.get(MYSQL_QUERY_RULES.name) or []
    for r in rules:
        for field in ("match_digest", "match_pattern"):
            if r[field] not in (None, ""):
                error = regex_error(r[field], r["re_modifiers"], engine)
                if error:
                    out.append(
                        Finding(
                            "regex_invalid",
                            f"Rule {r['rule_id']}'s {field} does not compile in ProxySQL's "
                            f"{'RE2' if engine == 2 else 'PCRE'} engine",
                            f"{r[field]!r}: {error} (ProxySQL would load it silently and never match it)",
                            True,
                            overridable=False,
                        )
                    )
        if not r["active"]:
            continue
        for field in ("destination_hostgroup", "mirror_hostgroup"):
            hg = r[field]
            if hg is not None and hg not in servers_in:
                out.append(
                    Finding(
                        "rule_hostgroup_empty",
                        f"Rule {r['rule_id']} sends queries to hostgroup {hg}, which has no server",
                        f"{field}={hg}: those queries wait for mysql-connect_timeout_server_max, then fail",
                        True,
                    )
                )
    for later, earlier in shadowed_rules(rules):
        if (later["rule_id"],) in changed or (earlier["rule_id"],) in changed:
            out.append(
                Finding(
                    "rule_never_matches",
                    f"Rule {later['rule_id']} can never match",
                    f"rule {earlier['rule_id']} (apply=1, flagIN {earlier['flagIN']}, "
                    f"{earlier['match_digest'] or earlier['match_pattern'] or 'no pattern'}) comes first and "
                    f"catches everything rule {later['rule_id']} "
                    f"({later['match_digest'] or later['match_pattern']}) would",
                    False,
                )
            )
    return out, changed


def mirror_findings(
    target: Content, changed_rules: Collection[tuple[Any, ...]], node_figures: Mapping[str, Figures]
) -> list[Finding]:
    out: list[Finding] = []
    mirrors = [
        r
        for r in target.get(MYSQL_QUERY_RULES.name) or []
        if r["active"]
        and (r["mirror_hostgroup"] is not None or r["mirror_flagOUT"] is not None)
        and (r["rule_id"],) in changed_rules
    ]
    variables = target.get(VARIABLES) or {}
    for name, figures in node_figures.items():
        questions, prepared = figures.get("questions_ps"), figures.get("prepared_ps")
        if mirrors and questions and prepared is not None and prepared / questions >= 0.9:
            out.append(
                Finding(
                    "mirror_prepared",
                    f"The new mirror rule(s) would mirror almost nothing on {name}",
                    f"{prepared / questions:.0%} of its queries are prepared statements "
                    f"({prepared:.0f} of {questions:.0f} per s), and ProxySQL does not mirror those",
                    False,
                )
            )
        concurrency = figures.get("mirror_concurrency")
        limit = whole_number(variables.get("mysql-mirror_max_concurrency"))
        if concurrency and limit is not None and limit < concurrency:
            out.append(
                Finding(
                    "mirror_limit_below_use",
                    f"mysql-mirror_max_concurrency {limit} is below the mirror concurrency {name} runs now",
                    f"Mirror_concurrency {concurrency} now: queries above the new limit queue, and once "
                    "mysql-mirror_max_queue_length is reached they are dropped",
                    False,
                )
            )
    return out


MIRROR_DEFAULT_CONCURRENCY = 16  # mysql-mirror_max_concurrency's default in ProxySQL 2.7
# A mirrored copy runs in a mirror session of its own: taken as at least this long even when the digest's own
# queries are faster (an assumption, shown in the finding: a ~10k q/s digest went to 97 % loss at the default).
MIRROR_COPY_FLOOR_S = 0.005


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole else "0%"


def traffic_findings(
    target: Content,
    changed_rules: Collection[tuple[Any, ...]],
    traffic: Traffic | None,
    node_figures: Mapping[str, Figures],
) -> list[Finding]:
    """What each new or changed active rule would capture of the cluster's stored traffic (the digests of the last
    hour, `traffic`: digests.selectors.Traffic), by the rule tester's walk on the target's rules; for a mirror
    rule, the mirror load it predicts against mysql-mirror_max_concurrency."""
    rules = {
        r["rule_id"]: r
        for r in target.get(MYSQL_QUERY_RULES.name) or []
        if r["active"] and (r["rule_id"],) in changed_rules
    }
    if not rules or traffic is None or not traffic.rows:
        return []
    captured: dict[int, list[TrafficRow]] = {rule_id: [] for rule_id in rules}
    limits: dict[int, str] = {}
    reached = rule_tester.Batch()  # a pattern that reaches the match limit or its budget gives up
    walked, cut = 0, False  # cut: the batch's budget ran out, the rest of the rows is not walked
    for row in traffic.rows:
        if reached.spent_out:
            cut = True
            break
        walk = rule_tester.on_content(
            target,
            digest_text=row.digest_text,
            digest=row.digest,
            username=row.username,
            schemaname=row.schemaname,
            client_addr=row.client_address,
            reached=reached,
            explain=False,
        )  # only which rules matched or gave up
        walked += 1
        for step in walk.steps:
            if step.matched and step.rule_id in captured:
                captured[step.rule_id].append(row)
            if rule_tester.NOT_MEASURED in step.limit:
                cut = True
            elif step.limit:
                limits.setdefault(step.rule_id, step.limit)
    total_n, total_t = traffic.count, traffic.sum_time_us
    minutes = max(1, round(traffic.seconds / 60))
    out = [
        Finding(
            "regex_match_limit",
            f"Rule {rule_id}'s pattern reaches PCRE's match limit on the stored traffic",
            f"{said}: a backtracking pattern; ProxySQL spends up to its own limit on it for every query it "
            "tries it on, then counts no match",
            True,
        )
        if rule_tester.OVER_BUDGET not in said
        else Finding(
            "regex_match_limit",
            f"Rule {rule_id}'s pattern is too costly to measure on the stored traffic",
            f"{said}: a backtracking pattern just under the match limit; ProxySQL runs it on every query it "
            "tries it on, at this cost each time",
            True,
        )
        for rule_id, said in sorted(limits.items())
    ]
    if cut:  # a share of the rows walked would read as the rule's share: each is said as not measured instead
        out.append(_not_measured(sorted(rules), rules, reached, walked, len(traffic.rows)))
    for rule_id, rows in ({} if cut else captured).items():
        n, t = sum(r.count for r in rows), sum(r.sum_time_us for r in rows)
        busiest = max(rows, key=lambda r: r.count, default=None)
        out.append(
            Finding(
                "rule_traffic_share",
                f"Rule {rule_id} would capture {_share(n, total_n)} of the last "
                f"{minutes} min's queries ({_share(t, total_t)} of their time)",
                f"{n:,} of {total_n:,} queries, {t / 1e6:.1f} s of {total_t / 1e6:.1f} s, over "
                f"{len({r.digest for r in rows})} digest(s)"
                + (f"; the busiest: {busiest.digest_text[:120]!r}" if busiest else "")
                + (" (the busiest digests only: more were stored)" if traffic.truncated else ""),
                False,
                info=True,
            )
        )
        rule = rules[rule_id]
        if rows and (rule["mirror_hostgroup"] is not None or rule["mirror_flagOUT"] is not None):
            out += _mirror_load(rule_id, rows, traffic.seconds, target, node_figures)
    return out


def _not_measured(
    rule_ids: Sequence[int], rules: Mapping[int, Row], reached: rule_tester.Batch, walked: int, total: int
) -> Finding:
    """One blocking finding for the rules whose share the batch's budget left unmeasured, with the costliest
    patterns so far: the operator sees which rules made the check give up."""
    costliest = sorted(reached.spent.items(), key=lambda kv: -kv[1])[:3]
    named: list[str] = []
    for key, spent_s in costliest:
        pattern = key[0]
        owners = [
            r for r, row in sorted(rules.items()) if pattern in (row.get("match_digest"), row.get("match_pattern"))
        ]
        shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."
        named.append(
            f"{shown!r}"
            + (f" (rule {owners[0]})" if owners else "")
            + f" {spent_s * 1000:.0f} ms over {reached.searches[key]:,} searches"
        )
    ids = ", ".join(map(str, rule_ids[:20])) + (", ..." if len(rule_ids) > 20 else "")
    return Finding(
        "rules_not_measured",
        f"{len(rule_ids)} new or changed rule(s) not measured on the stored traffic",
        f"the rule walks over the stored traffic passed their budget of {reached.budget_s:g} s of CPU "
        f"(RULE_WALK_BUDGET_S) after {walked:,} of {total:,} stored digest rows, so what rules {ids} would "
        "capture is not known (they are not reported as capturing nothing); the costliest patterns: "
        + "; ".join(named)
        + ". Fewer or cheaper patterns can be measured.",
        True,
    )


def _mirror_load(
    rule_id: int, rows: Sequence[TrafficRow], seconds: float, target: Content, node_figures: Mapping[str, Figures]
) -> list[Finding]:
    """Little's law: copies per second x how long each runs = mirror sessions busy at once."""
    if not seconds:
        return []
    rate = sum(r.count for r in rows) / seconds
    busy = sum(max(r.sum_time_us / 1e6, r.count * MIRROR_COPY_FLOOR_S) for r in rows) / seconds
    limit = whole_number((target.get(VARIABLES) or {}).get("mysql-mirror_max_concurrency"))
    if limit is None:
        known = [int(f["mirror_max_concurrency"]) for f in node_figures.values() if f.get("mirror_max_concurrency")]
        limit = min(known) if known else MIRROR_DEFAULT_CONCURRENCY
    words = (
        f"{rate:,.0f} copies/s over the cluster's nodes, each running at least {MIRROR_COPY_FLOOR_S * 1000:g} ms "
        f"(or its digest's average): about {busy:,.1f} mirror sessions busy at once, against "
        f"mysql-mirror_max_concurrency {limit}"
    )
    if busy <= limit:
        return [
            Finding(
                "mirror_load", f"Mirror rule {rule_id}: predicted mirror load within its limit", words, False, info=True
            )
        ]
    return [
        Finding(
            "mirror_overload",
            f"Mirror rule {rule_id} would exceed mysql-mirror_max_concurrency",
            words + f": the rest queue until mysql-mirror_max_queue_length, then about "
            f"{1 - limit / busy:.0%} of the copies would be dropped silently. Raise the limit or mirror less.",
            False,
        )
    ]


def users_findings(target: Content, servers_in: Collection[int]) -> list[Finding]:
    out: list[Finding] = []
    for u in target.get(MYSQL_USERS.name) or []:
        if u["active"] and u["default_hostgroup"] not in servers_in:
            out.append(
                Finding(
                    "user_default_hostgroup",
                    f"User {u['username']}'s default hostgroup {u['default_hostgroup']} has no server",
                    "every query of this user that no rule routes elsewhere would wait, then fail",
                    True,
                )
            )
    return out


def host_findings(d: Diff) -> list[Finding]:
    """Scheduler rows (ProxySQL runs their executable on its host) and admin-* variables (the admin interface
    and its exposure) this change writes, named: only admins may make them, and the reviewer should see them."""
    out: list[Finding] = []
    for c in d.rows:
        if c.table == SCHEDULER.name:
            row = c.after or c.before
            if row is None:  # never: an added, changed or removed row has a side
                continue
            out.append(
                Finding(
                    "scheduler_runs_commands",
                    f"Scheduler row {row['id']} {c.change}: ProxySQL runs it on its host",
                    " ".join(
                        str(row[f]) for f in ("filename", "arg1", "arg2", "arg3", "arg4", "arg5") if row[f] is not None
                    )
                    + f" every {row['interval_ms']} ms"
                    + ("" if row["active"] else " (inactive)"),
                    False,
                )
            )
    admin = [(name, after) for name, _, after in d.variables if name.startswith("admin-")]
    if admin:
        out.append(
            Finding(
                "admin_variables",
                "Changes the admin interface of the ProxySQL nodes (admin-* variables)",
                ", ".join(f"{name} = {'(secret)' if isinstance(v, dict) else v}" for name, v in admin),
                False,
            )
        )
    return out


def node_findings(
    target: Content,
    nodes: Mapping[int, NodeConfig],
    tables_touched: Collection[str],
    changed_variables: Collection[str] = (),
) -> list[Finding]:
    """Per node: unreachable, unloaded edits in what this change loads, variables the node does not know (those
    its version lacks only when this change sets them: `changed_variables`)."""
    out: list[Finding] = []
    for nc in nodes.values():
        if nc.error:
            out.append(
                Finding(
                    "node_unreachable", f"ProxySQL node {nc.name} does not answer", nc.error, True, overridable=False
                )
            )
            continue
        memory, runtime = nc.layers["memory"], nc.layers["runtime"]
        pending: list[str] = []
        for table in TABLES:
            if table.name not in tables_touched:
                continue
            mem_rows = runtime_users(memory[table.name]) if table is MYSQL_USERS else memory[table.name]
            mem = {
                table.key_of(r): r
                for r in mem_rows  # inactive users and rules are not loaded
                if not (table in (MYSQL_USERS, MYSQL_QUERY_RULES) and not r["active"])
            }
            run_rows = runtime[table.name]
            if (
                table is MYSQL_SERVERS
            ):  # where ProxySQL's own manager placed the servers is not an edit (fleet/native.py)
                managed = native.managed_hostgroups(
                    [r for t in native.MANAGER_TABLES.values() for r in runtime.get(t) or ()]
                )
                run_rows = native.fold(run_rows, memory[table.name], managed)
            run = index({table.name: run_rows}, table)
            if table is MYSQL_USERS:  # (a NULL password in memory is '' in runtime, and 2.5's runtime holds the
                # hash of a cleartext one (admin-hash_passwords): neither is an edit)
                mem = {
                    k: {**loaded_user(v), "backend": 0, "frontend": 0, "password": password_hash(v["password"])}
                    for k, v in mem.items()
                }
                run = {
                    k: {**v, "backend": 0, "frontend": 0, "password": password_hash(v["password"])}
                    for k, v in run.items()
                }
            elif table.name == "mysql_query_rules":  # a 3.0 build's exchanged mirror columns are its LOAD, not an edit
                mem = {k: run[k] if versions.mirror_swapped(v, run.get(k)) else v for k, v in mem.items()}
            mem = {k: table.canonical(v) for k, v in mem.items()}  # NULL and '' where ProxySQL holds them as one
            run = {k: table.canonical(v) for k, v in run.items()}
            if mem != run:
                keys = sorted(
                    str(list(k))
                    for k in mem.keys() ^ run.keys() | {k for k in mem.keys() & run.keys() if mem[k] != run[k]}
                )
                pending.append(f"{table.name} {', '.join(keys[:5])}{' …' if len(keys) > 5 else ''}")
        if pending:
            out.append(
                Finding(
                    "unloaded_edits",
                    f"{nc.name} has edits in memory that were never loaded",
                    "; ".join(pending) + ": the LOAD of this change would load them too",
                    True,
                )
            )
        version = memory[VARIABLES].get("admin-version", "")
        unknown = sorted(n for n in (target.get(VARIABLES) or {}) if n not in memory[VARIABLES])
        # a variable that this node's version lacks: carried in the configuration for the nodes that have it,
        # refused only when this change writes it (it would mean something there and nothing here)
        lacking = [n for n in unknown if n in changed_variables and versions.lacks(version, n)]
        if lacking:
            out.append(
                Finding(
                    "variable_not_in_version",
                    f"{nc.name} runs ProxySQL {version}, which lacks {len(lacking)} variable(s) this change sets",
                    "; ".join(f"{n} (ProxySQL {versions.versions_with(n)} only)" for n in lacking)
                    + ": ProxySQL answers SET with 'Unknown global variable' and applies nothing, so the "
                    "change would differ between the nodes",
                    True,
                    overridable=False,
                )
            )
        unknown = [n for n in unknown if not versions.lacks(version, n)]
        if unknown:
            out.append(
                Finding(
                    "variable_unknown",
                    f"{nc.name} does not know {len(unknown)} variable(s)",
                    ", ".join(unknown[:10]) + ": they would not be applied",
                    True,
                    overridable=False,
                )
            )
    return out


def effect_findings(
    cluster: Cluster,
    base: Content,
    target: Content,
    nodes: Mapping[int, NodeConfig],
    node_figures: Mapping[str, Figures],
    *,
    write_back: bool = False,
    traffic: Traffic | None = None,
    every_node: bool = False,
) -> list[Finding]:
    """Every finding for changing `base` into `target` on these nodes ({pk: NodeConfig}); `node_figures`
    the nodes' polled figures by node name (their latest-state documents' "figures": the mirror's); `write_back`: a repair to `base`;
    `traffic`: the cluster's stored digests of the last hour (what new or changed rules would capture)."""
    layers = [nc.layers["runtime"] for nc in nodes.values() if not nc.error]
    servers_in = _servers_anywhere(target, layers)
    engine = rule_tester.regex_engine(target, layers)
    d = diff(base, target)
    out = operational_findings(cluster, base, target, nodes, write_back=write_back, every_node=every_node)
    out += servers_findings(cluster, base, target)
    rule_findings, changed_rules = rules_findings(d, target, engine, servers_in)
    out += rule_findings
    out += mirror_findings(target, changed_rules, node_figures)
    out += traffic_findings(target, changed_rules, traffic, node_figures)
    out += users_findings(target, servers_in)
    out += host_findings(d)
    touched = {c.table for c in d.rows}
    if d.roles:
        touched.add(MYSQL_SERVERS.name)
    out += node_findings(target, nodes, touched, {name for name, _, _ in d.variables})
    native = cluster.active_native_hostgroups()
    if native and MYSQL_SERVERS.name in touched:
        out.append(
            Finding(
                "native_manager",
                "ProxySQL's native hostgroup manager is active on these hostgroups",
                ", ".join(f"{n['kind']} writer {n['writer_hostgroup']}" for n in native)
                + ": it moves servers by read_only itself and may undo this change",
                False,
            )
        )
    return out
