"""Measured mirror loss: for each mirror rule of a ProxySQL node and each window between two digest polls,
how many of the queries the rule matched should have been mirrored, and how many ran in the mirror
hostgroup. Pure functions over what the digest poll read (apps/digests/services.py); no I/O.

What is counted, per rule and window:
- hits: the rule's stats_mysql_query_rules.hits moved by this much. ProxySQL counts a hit for every
  query the rule matches, prepared statement executions included (the query processor runs for
  COM_STMT_EXECUTE too); a mirror session with only mirror_hostgroup set runs no rule again, so its
  copy is not a second hit. A LOAD MYSQL QUERY RULES TO RUNTIME starts every counter at 0: a counter
  that went down gives no figure for that window.
- prepared share (an estimate): ProxySQL 2.7 mirrors only COM_QUERY, never a prepared statement. The
  node's Com_frontend_stmt_execute over its client queries in the window: Questions counts every
  client command and also every mirrored copy that ran (a mirror session takes the same COM_QUERY
  path), so client queries = delta Questions - the mirrored executions measured below. One share per
  node: it assumes the rule's queries are prepared as often as the node's queries overall (the digest
  table cannot tell a prepared execution from a text one of the same digest).
- expected = hits x (1 - prepared share): the copies the rule should have queued.
- mirrored: executions in the rule's mirror hostgroup of the digests it matched: the delta of
  count_star of the stats_mysql_query_digest rows of that hostgroup whose digest_text matches the
  rule (match_digest, else match_pattern, with its re_modifiers and negate_match_pattern) and whose
  user and schema match the rule's, each digest given to the first such rule by rule_id (the order
  ProxySQL evaluates them in).
- loss = 1 - mirrored / expected, within [0, 1]; dropped = expected - mirrored.

Limits (said on the page): a rule with only mirror_flagOUT is not measured (its copies go where the
flagIN chain sends them); queries that reach the mirror hostgroup by other means (a routing rule or a
user's default_hostgroup) and match the rule's pattern count as mirrored, so the loss is then a lower
bound (flagged when a routing rule read with the mirror rules matches the same digests); match_pattern
is tried against the digest text, not the query as sent; copies still in the mirror queue at the end of
a window run in the next (in a steady state the two edges cancel out); patterns run in PCRE, ProxySQL's
default engine, through rule_regex (a pattern PCRE does not compile is not measured; one that reaches the
match limit on a digest text is not measured in that window, and is not tried on the window's other texts:
a backtracking pattern costs one limit per poll, never a stalled worker).
"""

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from . import rule_regex

MIN_EXPECTED = 1.0  # fewer copies than this to make in a window: no loss figure, nothing to measure

# A mysql_query_rules row as read from a node (QueryRule as a dict): its columns' values are each column's type.
Rule = Mapping[str, Any]
# A window's digest delta: (hostgroup, schemaname, username, digest_text, count).
DigestDelta = tuple[int, str, str, str | None, int]


@dataclass
class RuleWindow:
    rule_id: int
    mirror_hostgroup: int | None
    interval_s: float
    hits: int | None = None
    prepared_share: float | None = None
    expected: float | None = None
    mirrored: int = 0
    digests: int = 0
    ambiguous: bool = False  # a routing rule into the mirror hostgroup matches the same digests
    note: str = ""  # why there is no figure

    @property
    def dropped(self) -> float | None:
        return None if self.expected is None else max(0.0, self.expected - self.mirrored)

    @property
    def loss(self) -> float | None:
        if self.expected is None or self.expected < MIN_EXPECTED:
            return None
        return min(1.0, max(0.0, 1.0 - self.mirrored / self.expected))

    def per_second(self, value: float | None) -> float | None:
        return None if value is None or not self.interval_s else value / self.interval_s


RULE_BUDGET_S = 0.2  # a mirror rule's searches over one poll's digest texts; ordinary patterns take about 1 ms


def poll_budget_s() -> float:
    """Every rule's searches together over one poll of a node (settings.MIRROR_POLL_BUDGET_S): a node's rules are
    whatever was typed into its admin, and 300 rules each under RULE_BUDGET_S took a minute of every 30 s poll."""
    return settings.MIRROR_POLL_BUDGET_S


@dataclass
class Spent:
    """The CPU of one poll's searches, every rule together, against its budget (MIRROR_POLL_BUDGET_S)."""

    total_s: float = 0.0
    rules: int = 0
    texts: int = 0
    budget_s: float = field(default_factory=poll_budget_s)

    @property
    def out(self) -> bool:
        return self.total_s > self.budget_s

    @property
    def said(self) -> str:
        return (
            f"this poll's mirror rule searches passed their budget of {self.budget_s:g} s of CPU ({self.rules} "
            f"rules over {self.texts} digest texts): not counted in full"
        )


@dataclass
class Matcher:
    rule: Rule
    regex: rule_regex.Pattern | None = None
    error: str = ""
    negate: bool = False
    spent_s: float = 0.0  # CPU time its searches took this poll, against RULE_BUDGET_S
    poll: Spent = field(default_factory=Spent)  # shared by the poll's matchers

    @classmethod
    def of(cls, rule: Rule, poll: Spent | None = None) -> "Matcher":
        poll = Spent() if poll is None else poll
        pattern = rule.get("match_digest") or rule.get("match_pattern")
        caseless = "CASELESS" in (rule.get("re_modifiers") or "").upper()
        negate = str(rule.get("negate_match_pattern") or 0) == "1"
        if not pattern:
            return cls(rule, None, "", negate, poll=poll)
        try:
            return cls(rule, rule_regex.compile(pattern, caseless), "", negate, poll=poll)
        except Exception as exc:  # the library's own error class
            return cls(rule, None, f"pattern not readable here: PCRE does not compile it ({exc})", negate, poll=poll)

    def matches(self, schemaname: str, username: str, text: str | None) -> bool:
        r = self.rule
        if self.error:
            return False
        if r.get("username") and r["username"] != username:
            return False
        if r.get("schemaname") and r["schemaname"] != schemaname:
            return False
        if self.regex is None:
            return True
        if self.poll.out:  # not run: the poll's windows say so (measure())
            self.error = self.poll.said
            return False
        started = time.thread_time()
        try:
            return self.regex.search(text or "") != self.negate
        except rule_regex.MatchLimit as exc:
            self.error = str(exc)  # told on the rule's window; the pattern is not run again this poll
            return False
        finally:
            # Each search stays under PCRE's match limit, yet one just below it on each of a poll's few hundred
            # digest texts costs seconds: a rule gets a time budget per poll, then is not run again this poll.
            took = time.thread_time() - started
            self.spent_s += took
            self.poll.total_s += took
            if self.spent_s > RULE_BUDGET_S and not self.error:
                self.error = (
                    f"this pattern took more than {RULE_BUDGET_S * 1000:.0f} ms over this poll's digest "
                    f"texts (near PCRE's match limit on each)"
                )


def is_mirror(rule: Rule) -> bool:
    return rule.get("mirror_hostgroup") is not None or rule.get("mirror_flagOUT") is not None


def _delta(now: int | None, before: int | None) -> int | None:
    if now is None or before is None or now < before:
        return None
    return now - before


@dataclass
class Window:
    """One node's mirror figures over one window: per rule, and what the prepared share came from."""

    rules: list[RuleWindow] = field(default_factory=list)
    questions: int | None = None
    stmt_execute: int | None = None
    mirrored_total: int = 0


def measure(
    rules: Iterable[Rule],
    hits_now: Mapping[int, int] | None,
    hits_before: Mapping[int, int] | None,
    counters_now: Mapping[str, int | None] | None,
    counters_before: Mapping[str, int | None] | None,
    deltas: Sequence[DigestDelta],
    interval_s: float,
    poll: Spent | None = None,
) -> Window:
    """rules: dicts of QueryRule read at this poll; hits_*: {rule_id: hits}; counters_*: {"questions",
    "stmt_execute"} (stats_mysql_global); deltas: [(hostgroup, schemaname, username, digest_text, count)]
    of this window; `poll`: the poll's Spent when other searches of the same poll share its budget. Returns a Window
    with one RuleWindow per mirror rule, in rule_id order."""
    ordered = sorted(rules, key=lambda r: r["rule_id"])
    mirrors = [r for r in ordered if is_mirror(r)]
    routing = [r for r in ordered if not is_mirror(r)]
    poll = Spent() if poll is None else poll
    poll.rules, poll.texts = len(ordered), len(deltas)
    matchers = {r["rule_id"]: Matcher.of(r, poll) for r in ordered}
    by_hostgroup: dict[int, list[Rule]] = {}
    for r in mirrors:
        if r.get("mirror_hostgroup") is not None:
            by_hostgroup.setdefault(r["mirror_hostgroup"], []).append(r)

    out = {r["rule_id"]: RuleWindow(r["rule_id"], r.get("mirror_hostgroup"), interval_s) for r in mirrors}
    for hostgroup, schemaname, username, text, count in deltas:
        if poll.out:  # the rest of the texts not read: every rule's count is partial, each window says so
            for m in matchers.values():
                m.error = m.error or poll.said
            break
        candidates = by_hostgroup.get(hostgroup)
        if not candidates or count <= 0:
            continue
        owner = next((r for r in candidates if matchers[r["rule_id"]].matches(schemaname, username, text)), None)
        if owner is None:
            continue
        w = out[owner["rule_id"]]
        w.mirrored += count
        w.digests += 1
        if any(
            r.get("destination_hostgroup") == hostgroup and matchers[r["rule_id"]].matches(schemaname, username, text)
            for r in routing
        ):
            w.ambiguous = True
    window = Window(mirrored_total=sum(w.mirrored for w in out.values()))

    # The prepared share of the node's client queries, mirrored copies taken out of Questions.
    window.questions = _delta((counters_now or {}).get("questions"), (counters_before or {}).get("questions"))
    window.stmt_execute = _delta((counters_now or {}).get("stmt_execute"), (counters_before or {}).get("stmt_execute"))
    share: float | None = None
    if window.questions is not None and window.stmt_execute is not None:
        client = window.questions - window.mirrored_total
        if client > 0:
            share = min(1.0, window.stmt_execute / client)
        elif window.stmt_execute == 0:
            share = 0.0

    for r in mirrors:
        w = out[r["rule_id"]]
        if r.get("mirror_hostgroup") is None:
            w.note = "not measured: only mirror_flagOUT is set, the copies go where the flagIN chain sends them"
            continue
        if matchers[r["rule_id"]].error:
            w.note = f"not measured: {matchers[r['rule_id']].error}"
            continue
        rid = r["rule_id"]
        before = (hits_before or {}).get(rid, 0)  # a rule absent before was loaded since: it started at 0
        w.hits = _delta((hits_now or {}).get(rid), before)
        if w.hits is None:
            w.note = "no figure this window: the rule's hit counter went down (rules loaded to runtime again)"
            continue
        w.prepared_share = share
        w.expected = w.hits * (1.0 - (share or 0.0))
        if w.expected < MIN_EXPECTED:
            w.note = "nothing to mirror in this window"
    window.rules = [out[r["rule_id"]] for r in mirrors]
    return window
