"""Which query rules a query hits, as ProxySQL 2.7's query processor decides it. Pure: rows in, a chain out.

ProxySQL (Query_Processor::process_mysql_query) walks the active rules in rule_id order with a flag that
starts at 0. A rule is skipped unless its flagIN equals the flag and every condition it has holds:
username, schemaname, client_addr (exact, or a prefix before a trailing '%'), digest (the hash),
match_digest (on the digest text) and match_pattern (on the query as sent, or as rewritten by an earlier
rule's replace_pattern); negate_match_pattern inverts both regex conditions. A rule that matches sets
what it has (the last one to set a destination, cache_ttl, mirror or error wins), sets the flag to its
flagOUT, and stops the walk when apply=1. After a flagOUT the walk goes on with the next rule, or starts
again from the first rule when mysql-query_processor_iterations allows (0 by default). No destination:
the user's default_hostgroup.

The regexes run in ProxySQL's engine (mysql-query_processor_regex: 1 PCRE, 2 RE2) through the same
libraries the rule forms compile them with (pcre2, google-re2); a pattern that does not compile never
matches, as in ProxySQL. Every search is bounded (monitoring.rule_regex): a pattern that reaches PCRE's match
limit on a text does not match it (so does ProxySQL's PCRE at its own, higher limit) and the step says so.
For a typed query the digest text is an approximation of ProxySQL's
normaliser (normalise()); a digest picked from the poll has ProxySQL's own text and hash.
Not modelled: proxy_addr/proxy_port (the address the client connected to), mysql_query_rules_fast_routing,
mirror sessions' own walk, next_query_flagIN (it applies to the session's next query).
"""

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from django.conf import settings

from apps.monitoring import rule_regex
from apps.monitoring.rule_regex import MatchLimit

from .tables import MYSQL_QUERY_RULES, MYSQL_USERS, VARIABLES, Row

PCRE, RE2 = 1, 2
PatternKey = tuple[str, bool, int]  # (pattern, caseless, engine): how a Batch knows a pattern


@dataclass
class Step:
    """One rule as the walk met it: did it match, why (or why not), what it set."""

    rule_id: int
    flag: int
    matched: bool
    reason: str
    sets: list[str] = field(default_factory=list)
    comment: str = ""
    limit: str = ""  # "<column> <pattern>: this pattern reaches the match limit on ..." when it did


@dataclass
class Outcome:
    steps: list[Step]
    hostgroup: int | None
    hostgroup_from: str  # "rule 10" or "the default hostgroup of user app" or why it is unknown
    cache_ttl: int | None = None
    mirror_hostgroup: int | None = None
    mirror_flag_out: int | None = None
    error_msg: str | None = None
    ok_msg: str | None = None
    rewritten: str | None = None
    flag: int = 0
    stopped_by: int | None = None  # the rule with apply=1 that ended the walk
    notes: list[str] = field(default_factory=list)

    @property
    def matched(self) -> list[Step]:
        return [s for s in self.steps if s.matched]

    @property
    def summary(self) -> str:
        """The outcome in one line, as an operator reads it."""
        if self.error_msg is not None:
            return f"blocked: ProxySQL answers with the error {self.error_msg!r}"
        if self.ok_msg is not None:
            return "answered OK by ProxySQL itself, no backend"
        where = f"hostgroup {self.hostgroup}" if self.hostgroup is not None else "no known hostgroup"
        parts = [f"sent to {where} ({self.hostgroup_from})"]
        if self.cache_ttl:
            parts.append(f"cached for {self.cache_ttl} ms")
        if self.mirror_hostgroup is not None:
            parts.append(f"mirrored to hostgroup {self.mirror_hostgroup}")
        elif self.mirror_flag_out is not None:
            parts.append(f"mirrored (mirror_flagOUT {self.mirror_flag_out})")
        return ", ".join(parts)


@lru_cache(maxsize=512)
def compiled(pattern: str, caseless: bool, engine: int) -> rule_regex.Pattern | None:
    """The pattern compiled in ProxySQL's engine, or None when that engine refuses it."""
    try:
        return rule_regex.compile(pattern, caseless, engine)
    except Exception:  # each library has its own error class
        return None


def _modifiers(rule: Row) -> set[str]:
    return {m.strip().upper() for m in (rule.get("re_modifiers") or "").split(",")}


_COMMENT = re.compile(r"/\*.*?\*/|(?:--\s|#)[^\n]*", re.S)
_LITERAL = re.compile(
    r"'(?:[^'\\]|\\.|'')*'|\"(?:[^\"\\]|\\.|\"\")*\"|\b0x[0-9a-fA-F]+\b"
    r"|(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w])"
)
_LIST = re.compile(r"\?(?:\s*,\s*\?){3,}")


def normalise(query: str) -> str:
    """ProxySQL's digest text of a query, approximated (its defaults: literals and numbers as ?, comments
    dropped, spaces collapsed, a list of more than 3 values as ?,?,?,...): good for rules written against
    the digests ProxySQL shows; a digest picked from the poll is exact."""
    text = _COMMENT.sub(" ", query)
    text = _LITERAL.sub("?", text)
    text = re.sub(r"\s+", " ", text).strip().rstrip(";").strip()
    return _LIST.sub("?,?,?,...", text)


def _client_matches(pattern: str, address: str) -> bool:
    if pattern.endswith("%"):
        return address.startswith(pattern[:-1])
    return address == pattern


def _digest_value(text: object) -> int | None:
    try:
        return int(str(text), 16)
    except ValueError:
        return None


# A pattern's searches over one batch of walks (the effect check over the stored traffic, one page's walks): each
# search is bounded by the match limit, but a pattern just under it (about 2.5 ms a search) over 500 digest texts
# took 1.25 s of a request. Ordinary patterns take about 1-3 us a search: a pattern is too costly once its searches
# took BATCH_BUDGET_S and more than SEARCH_BUDGET_S each on average (so an ordinary pattern that many rules share,
# searched 100,000 times in a batch, is not cut short).
BATCH_BUDGET_S = 0.2
SEARCH_BUDGET_S = 40e-6
OVER_BUDGET = "this pattern took more than"
# The CPU clock (time.thread_time) costs about 1.6 us a read here, more than an ordinary search: a pattern whose first
# CHEAP_AFTER searches took less than CHEAP_S each on average is timed by the wall clock (about 0.1 us a read; a
# search's CPU is never more than its wall time). A search of it that takes longer than CHEAP_S of wall time (a costly
# subject, a garbage collection, the thread preempted) is run again on the CPU clock, its CPU is what counts, and the
# pattern is timed on the CPU clock again until its average says cheap at its next CHEAP_AFTER searches: no search is
# counted above its CPU by more than CHEAP_S, so the cut above fires on the same patterns (one search run twice).
CHEAP_AFTER = 100
CHEAP_S = 10e-6
NOT_MEASURED = "not run: this request's rule walks passed their budget of"


class OverBudget(Exception):
    """A pattern's searches took more than BATCH_BUDGET_S of CPU over a batch: the rest are not run."""

    def __init__(self, spent_s: float, searches: int) -> None:
        super().__init__(
            f"{OVER_BUDGET} {BATCH_BUDGET_S * 1000:.0f} ms of searches over this batch "
            f"({searches} searches, {spent_s / searches * 1e6:.0f} us each): not run on the rest"
        )


class NotMeasured(Exception):
    """The batch's walks together took more than their budget (settings.RULE_WALK_BUDGET_S) of CPU: the patterns
    met after that are not run, whatever their own cost (a draft of a thousand costly rules is bounded as a whole)."""

    def __init__(self, budget_s: float) -> None:
        super().__init__(f"{NOT_MEASURED} {budget_s:g} s of CPU (RULE_WALK_BUDGET_S) before this pattern's turn")


GaveUp = MatchLimit | OverBudget | NotMeasured  # why a pattern is not run again in a batch


class Batch(dict[PatternKey, GaveUp]):
    """The walks of one batch (one request or task) share it: {(pattern, caseless, engine): MatchLimit, OverBudget or
    NotMeasured} of the patterns that gave up (not run again), the CPU each pattern's searches took so far (`spent`),
    and the CPU of all its walks (`total_s`), held to `budget_s` (settings.RULE_WALK_BUDGET_S)."""

    def __init__(self, budget_s: float | None = None) -> None:
        super().__init__()
        self.spent: dict[PatternKey, float] = {}  # CPU seconds of its searches
        self.searches: dict[PatternKey, int] = {}  # how many searches
        self.budget_s: float = settings.RULE_WALK_BUDGET_S if budget_s is None else budget_s
        self.total_s = 0.0  # CPU of the batch's walks so far (searches, compiles and the walks themselves)
        self.prepared: dict[int, tuple[Sequence[Row], list[_Rule]]] = {}  # engine -> (the rules, as _Rule): _prepared
        self.cheap: set[PatternKey] = set()  # timed by the wall clock: see CHEAP_S
        self.regexes: dict[PatternKey, rule_regex.Pattern | None] = {}  # compiled(), None when it does not compile

    @property
    def spent_out(self) -> bool:
        return self.total_s > self.budget_s


def timed_search(regex: rule_regex.Pattern, subject: str, key: PatternKey, reached: Batch) -> bool:
    """One bounded search; its CPU counted against the pattern's budget and the batch's (`reached`, a Batch)."""
    if key in reached.cheap:
        started = time.perf_counter()
        try:
            found = regex.search(subject)
        except MatchLimit as exc:
            reached[key] = exc
            _count(key, reached, time.perf_counter() - started)  # at most its wall time: it is not run again
            raise
        took = time.perf_counter() - started
        if took <= CHEAP_S:
            _count(key, reached, took)
            return found
        reached.cheap.discard(key)  # its CPU, as before: the search again on the CPU clock
    started = time.thread_time()
    try:
        return regex.search(subject)
    except MatchLimit as exc:
        reached[key] = exc
        raise
    finally:
        _count(key, reached, time.thread_time() - started)


def _count(key: PatternKey, reached: Batch, took: float) -> None:
    reached.total_s += took
    spent = reached.spent[key] = reached.spent.get(key, 0.0) + took
    searches = reached.searches[key] = reached.searches.get(key, 0) + 1
    if spent > BATCH_BUDGET_S and spent > searches * SEARCH_BUDGET_S and key not in reached:
        reached[key] = OverBudget(spent, searches)
    elif searches % CHEAP_AFTER == 0 and spent < searches * CHEAP_S:
        reached.cheap.add(key)


@dataclass(frozen=True, slots=True)
class _Rule:
    """One rule's conditions read once per batch (not once per walk and row): its modifiers parsed, its digest as a
    number, its patterns with their Batch keys."""

    row: Row
    rule_id: int
    active: bool
    flag_in: int | None  # None (a row without flagIN) is never the flag: the rule never matches
    username: str
    schemaname: str
    client_addr: str
    digest: object  # as written, for the reason
    digest_value: int | None
    negate: bool
    globally: bool  # re_modifiers GLOBAL: replace_pattern rewrites every match
    patterns: tuple[tuple[str, str, PatternKey, str], ...]  # ((column, pattern, its key, what it is tried on), ...)
    comment: str


def _prepared(rules: Sequence[Row], engine: int, reached: Batch) -> list[_Rule]:
    """The rules in rule_id order as _Rule, kept by the batch for as long as the same list is walked again (the effect
    check walks one rule list over thousands of rows)."""
    kept = reached.prepared.get(engine)
    if kept is not None and kept[0] is rules:
        return kept[1]
    out: list[_Rule] = []
    for rule in sorted(rules, key=lambda r: r["rule_id"]):
        modifiers = _modifiers(rule)
        caseless = "CASELESS" in modifiers
        patterns = tuple(
            (column, rule[column], (rule[column], caseless, engine), what)
            for column, what in (("match_digest", "digest text"), ("match_pattern", "query"))
            if rule.get(column)
        )
        out.append(
            _Rule(
                rule,
                rule["rule_id"],
                bool(rule.get("active")),
                rule.get("flagIN"),
                rule.get("username") or "",
                rule.get("schemaname") or "",
                rule.get("client_addr") or "",
                rule.get("digest"),
                _digest_value(rule["digest"]) if rule.get("digest") else None,
                bool(rule.get("negate_match_pattern")),
                "GLOBAL" in modifiers,
                patterns,
                rule.get("comment") or "",
            )
        )
    reached.prepared[engine] = (rules, out)
    return out


def _check_rule(
    rule: _Rule,
    flag: int,
    query: str,
    digest_text: str,
    digest: str | None,
    digest_value: int | None,
    user: str,
    schema: str,
    client: str,
    reached: Batch,
    searched: dict[tuple[PatternKey, str], bool],
    explain: bool,
) -> tuple[bool, str]:
    """(matched, reason) for one rule (a _Rule), or _Limit; `reached` (a Batch): the patterns that reached the match
    limit or their CPU budget earlier in this batch (they are not run again: one limit's cost a pattern); `searched`:
    this walk's answers by (pattern key, subject), so rules that share a pattern search it once; `explain`: False
    when only whether it matched is wanted (the reason is then "")."""
    if rule.flag_in != flag:
        return False, f"flagIN {rule.flag_in} is not the current flag {flag}" if explain else ""
    if rule.username and rule.username != user:
        return False, (
            f"for user {rule.username!r}" + (f", not {user!r}" if user else " (no user given)")
        ) if explain else ""
    if rule.schemaname and rule.schemaname != schema:
        return False, (
            f"for schema {rule.schemaname!r}" + (f", not {schema!r}" if schema else " (no schema given)")
        ) if explain else ""
    if rule.client_addr:
        if not client:
            return False, f"for client address {rule.client_addr!r} (no address given)" if explain else ""
        if not _client_matches(rule.client_addr, client):
            return False, f"for client address {rule.client_addr!r}, not {client!r}" if explain else ""
    if rule.digest:
        if digest is None:
            return False, (
                f"for digest {rule.digest}: a typed query's hash is not known (pick the digest)" if explain else ""
            )
        if rule.digest_value != digest_value:
            return False, f"for digest {rule.digest}, not {digest}" if explain else ""
    negate = rule.negate
    said: list[str] = []
    for column, pattern, key, what in rule.patterns:
        subject = digest_text if column == "match_digest" else query
        limit: GaveUp | None = reached.get(key)
        if limit is None and reached.spent_out:  # not even compiled: a thousand patterns compile in about 15 ms
            limit = reached[key] = NotMeasured(reached.budget_s)
        if limit is None:
            found = searched.get((key, subject))
            if found is None:
                if key in reached.regexes:  # kept by the batch: compiled()'s cache holds 512, a big draft has more
                    regex = reached.regexes[key]
                else:
                    regex = reached.regexes[key] = compiled(*key)
                if regex is None:
                    name = "RE2" if key[2] == RE2 else "PCRE"
                    return False, f"{column} {pattern!r} does not compile in {name}: never matches"
                try:
                    found = searched[key, subject] = timed_search(regex, subject, key, reached)
                except MatchLimit as exc:
                    limit = exc
        if limit is not None:
            raise _Limit(f"{column} {pattern!r}: {limit}", limit)
        if found == negate:
            return False, (
                f"{column} {pattern!r} "
                + ("matches" if negate else "does not match")
                + f" the {what}"
                + (" (negated)" if negate else "")
            ) if explain else ""
        if explain:
            said.append(
                f"{column} {pattern!r} "
                + ("does not match" if negate else "matches")
                + f" the {what}"
                + (" (negated)" if negate else "")
            )
    return True, "; ".join(said) or ("no condition on the query" if explain else "")


class _Limit(Exception):
    """A rule's pattern reached the match limit or its budget: the rule does not match, and the step says why."""

    def __init__(self, said: str, cause: GaveUp) -> None:
        super().__init__(said)
        self.cause = cause


_WHY: dict[type[GaveUp], str] = {
    MatchLimit: "the search gave up: counted as no match, as ProxySQL does at its own limit",
    OverBudget: "not run: counted as no match here; ProxySQL runs it, at this cost on every query it tries",
    NotMeasured: "counted as no match here, so the rules after it may not be walked as ProxySQL would",
}


_SETS = (
    ("destination_hostgroup", "destination hostgroup {}"),
    ("cache_ttl", "cache_ttl {} ms"),
    ("mirror_hostgroup", "mirror hostgroup {}"),
    ("mirror_flagOUT", "mirror_flagOUT {}"),
    ("error_msg", "error {!r}"),
    ("OK_msg", "OK message {!r}"),
    ("replace_pattern", "rewrite to {!r}"),
)


def evaluate(
    rules: Sequence[Row],
    query: str = "",
    *,
    digest_text: str | None = None,
    digest: str | None = None,
    username: str = "",
    schemaname: str = "",
    client_addr: str = "",
    engine: int = PCRE,
    iterations: int = 0,
    users: Iterable[Row] = (),
    reached: Batch | None = None,
    explain: bool = True,
) -> Outcome:
    """The walk of `rules` (mysql_query_rules rows) for one query. `digest_text` defaults to normalise(query);
    `digest` is the hash when it is known; `users`: mysql_users rows, for the default hostgroup;
    `iterations`: mysql-query_processor_iterations; `reached`: the Batch shared by the walks of one request, which
    holds the patterns that gave up and the CPU the walks took against its budget (see _check_rule);
    `explain=False` (the effect check's walk of every stored row): only the steps that matched or reached a limit,
    without reasons nor what they set; the outcome is the same."""
    reached = Batch() if reached is None else reached
    started, counted = time.thread_time(), reached.total_s
    try:
        out = _walk(
            rules,
            query,
            digest_text,
            digest,
            username,
            schemaname,
            client_addr,
            engine,
            iterations,
            users,
            reached,
            explain,
        )
    finally:  # the whole walk (compiles, the steps' own work), not only its searches
        reached.total_s = counted + time.thread_time() - started
    skipped = [s.rule_id for s in out.steps if NOT_MEASURED in s.limit]
    if skipped:
        out.notes.append(
            f"{len(skipped)} rule(s) were not tested ({', '.join(map(str, skipped[:10]))}"
            f"{', ...' if len(skipped) > 10 else ''}): this request's rule walks passed their budget of "
            f"{reached.budget_s:g} s of CPU (RULE_WALK_BUDGET_S), so their patterns were not run; they "
            "are shown as not matching, and the walk after them may differ from ProxySQL's."
        )
    return out


def _walk(
    rules: Sequence[Row],
    query: str,
    digest_text: str | None,
    digest: str | None,
    username: str,
    schemaname: str,
    client_addr: str,
    engine: int,
    iterations: int,
    users: Iterable[Row],
    reached: Batch,
    explain: bool,
) -> Outcome:
    notes: list[str] = []
    if digest_text is None:
        digest_text = normalise(query)
        notes.append(
            f"The digest text was derived from the query here (ProxySQL's normaliser, approximated): {digest_text!r}."
        )
    if not query:
        query = digest_text
        notes.append("No query text: match_pattern was tested on the digest text, where literals are '?'.")
    out = Outcome(steps=[], hostgroup=None, hostgroup_from="", notes=notes)
    ordered = _prepared(rules, engine, reached)
    digest_value = _digest_value(digest) if digest is not None else None
    searched: dict[
        tuple[PatternKey, str], bool
    ] = {}  # (pattern key, subject) -> found: each distinct pattern searched once a subject in this walk
    flag, passes, current = 0, 0, query
    i = 0
    while i < len(ordered):
        prepared = ordered[i]
        i += 1
        if not prepared.active:
            if explain:
                out.steps.append(
                    Step(prepared.rule_id, flag, False, "inactive (not loaded to runtime)", comment=prepared.comment)
                )
            continue
        try:
            matched, reason = _check_rule(
                prepared,
                flag,
                current,
                digest_text,
                digest,
                digest_value,
                username,
                schemaname,
                client_addr,
                reached,
                searched,
                explain,
            )
            limit = ""
        except _Limit as exc:
            matched, reason, limit = False, f"{exc} ({_WHY[type(exc.cause)]})", str(exc)
        if not matched:
            if explain or limit:
                out.steps.append(Step(prepared.rule_id, flag, False, reason, comment=prepared.comment, limit=limit))
            continue
        rule = prepared.row
        step = Step(prepared.rule_id, flag, True, reason, comment=prepared.comment)
        out.steps.append(step)
        if explain:
            for column, words in _SETS:
                if rule.get(column) is not None:
                    step.sets.append(words.format(rule[column]))
        if rule.get("destination_hostgroup") is not None:
            out.hostgroup, out.hostgroup_from = rule["destination_hostgroup"], f"rule {prepared.rule_id}"
        if rule.get("cache_ttl") is not None:
            out.cache_ttl = rule["cache_ttl"]
        if rule.get("mirror_hostgroup") is not None:
            out.mirror_hostgroup = rule["mirror_hostgroup"]
        if rule.get("mirror_flagOUT") is not None:
            out.mirror_flag_out = rule["mirror_flagOUT"]
        if rule.get("error_msg") is not None:
            out.error_msg = rule["error_msg"]
        if rule.get("OK_msg") is not None:
            out.ok_msg = rule["OK_msg"]
        if rule.get("replace_pattern") is not None and rule.get("match_pattern"):
            regex = compiled(rule["match_pattern"], "CASELESS" in _modifiers(rule), engine)
            try:
                if regex is not None:
                    current = regex.sub(rule["replace_pattern"], current, count=0 if prepared.globally else 1)
                    out.rewritten = current
            except MatchLimit as exc:
                step.limit = f"match_pattern {rule['match_pattern']!r}: {exc}"
                step.sets.append(f"no rewrite: {exc}")
        if rule.get("flagOUT") is not None:
            if explain:
                step.sets.append(f"flag {flag} → {rule['flagOUT']}")
            flag = rule["flagOUT"]
        if rule.get("apply"):
            out.stopped_by = prepared.rule_id
            if explain:
                step.sets.append("apply: the walk stops here")
                out.steps += [
                    Step(
                        r.rule_id,
                        flag,
                        False,
                        f"not reached: rule {prepared.rule_id} stopped the walk",
                        comment=r.comment,
                    )
                    for r in ordered[i:]
                ]
            break
        if rule.get("flagOUT") is not None and passes < iterations:
            passes += 1
            i = 0  # mysql-query_processor_iterations: the walk starts again from the first rule
    out.flag = flag
    if out.hostgroup is None:
        user = next((u for u in users if u["username"] == username and u.get("active", 1)), None)
        if user is not None:
            out.hostgroup = user["default_hostgroup"]
            out.hostgroup_from = f"the default hostgroup of user {username!r}, no rule set one"
        else:
            out.hostgroup_from = "no rule set one and user " + (
                f"{username!r} is not in mysql_users" if username else "is not given: the user's default hostgroup"
            )
    return out


def on_content(content: Mapping[str, Any], query: str = "", **sample: Any) -> Outcome:
    """evaluate() on a configuration's content (content.py): its rules and users, in its engine and iterations."""
    try:
        iterations = int((content.get(VARIABLES) or {}).get("mysql-query_processor_iterations") or 0)
    except (TypeError, ValueError):
        iterations = 0
    return evaluate(
        content.get(MYSQL_QUERY_RULES.name) or [],
        query,
        engine=regex_engine(content),
        iterations=iterations,
        users=content.get(MYSQL_USERS.name) or [],
        **sample,
    )


def regex_engine(target: Mapping[str, Any], layers: Sequence[Mapping[str, Any]] = ()) -> int:
    """ProxySQL's regex engine for these rules: mysql-query_processor_regex (1 PCRE, the default; 2 RE2)."""
    value = (target.get(VARIABLES) or {}).get("mysql-query_processor_regex")
    if value is None and layers:
        value = layers[0][VARIABLES].get("mysql-query_processor_regex")
    return 2 if str(value) == "2" else 1
