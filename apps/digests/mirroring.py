"""Mirror loss, measured by the digest poll: it already reads every digest of a node every
MONITOR_DIGEST_INTERVAL_S, so the mirror hostgroups' executions come at no extra read. Per poll it adds
two light reads (the mirroring rules, and their hit counters when there are any) and keeps, with the
digest baseline in Redis, the counters of the previous poll; the window between two polls is measured by
apps/monitoring/mirror.py and stored as MirrorRuleSample rows. The rules read at each poll also become
the node's fleet.MirrorRule rows (the latest read), so a rule added after adoption is shown and measured.
"""

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, TypedDict

from django.db import transaction

from apps.clients.proxysql import ProxySQLAdmin
from apps.fleet.models import MirrorRule
from apps.monitoring import mirror
from apps.monitoring.models import MirrorRuleSample

from .deltas import Delta
from .models import Digest

COUNTERS = {"questions": "Questions", "stmt_execute": "Com_frontend_stmt_execute"}


class MirrorBaseline(TypedDict):
    """What the next poll needs of this one (kept with the digest baseline in Redis: encode, decode)."""

    hits: dict[int, int]  # {rule_id: hits} of the mirror rules
    counters: dict[str, int | None]  # COUNTERS' keys -> stats_mysql_global's value, None when not told


class MirrorRead(MirrorBaseline):
    """One poll's mirror read (read())."""

    rules: list[dict[str, Any]]  # the mirroring rules, as dicts of QueryRule's columns (mirror.Rule)


# Per worker process: the rules last written per node, so an unchanged set costs no database read.
_written_rules: dict[int, dict[int, dict[str, object]]] = {}


def forget_caches() -> None:
    _written_rules.clear()


def read(admin: ProxySQLAdmin, stats: Mapping[str, str]) -> MirrorRead:
    """What this poll knows about mirroring on one node (network: one or two light statements).
    `stats`: stats_mysql_global as the poll read it."""
    rules = [asdict(r) for r in admin.mirroring_rules()]
    ids = [r["rule_id"] for r in rules if mirror.is_mirror(r)]
    counters: dict[str, int | None] = {}
    for key, name in COUNTERS.items():
        value = stats.get(name)
        try:
            counters[key] = int(value) if value is not None else None
        except ValueError:
            counters[key] = None
    return {"rules": rules, "hits": admin.query_rule_hits(ids) if ids else {}, "counters": counters}


def encode(state: MirrorBaseline) -> bytes:
    """The part of a poll's mirror read the next poll needs, for the baseline hash in Redis."""
    return json.dumps({"hits": {str(k): v for k, v in state["hits"].items()}, "counters": state["counters"]}).encode()


def decode(raw: bytes) -> MirrorBaseline | None:
    try:
        doc = json.loads(raw)
        return {"hits": {int(k): int(v) for k, v in doc["hits"].items()}, "counters": doc["counters"]}
    except (TypeError, ValueError, KeyError, AttributeError):
        return None  # unreadable: this window gets no figure, the next one will


def _texts(hashes: Sequence[str], fresh: Mapping[str, str]) -> dict[str, str]:
    texts = {h: fresh[h] for h in hashes if h in fresh}
    missing = [h for h in hashes if h not in texts]
    for i in range(0, len(missing), 900):
        texts.update(Digest.objects.filter(digest__in=missing[i : i + 900]).values_list("digest", "digest_text"))
    return texts


def mark_copies(
    rules: Iterable[mirror.Rule],
    deltas: Sequence[Delta],
    fresh_texts: Mapping[str, str],
    spent: mirror.Spent | None = None,
) -> list[bool | None]:
    """Per delta of this poll, in order: True when its executions are a mirror rule's copies (ProxySQL counts a copy
    under the original's digest in the rule's mirror hostgroup: an active rule of the node sends copies to the
    delta's hostgroup and matches its text, user and schema), False when not, None when not known (a pattern that
    reaches PCRE's match limit on the text, or the poll's searches past MIRROR_POLL_BUDGET_S). Stored with the rows
    (DigestStat.mirrored), so the pages rank from a column instead of matching the rules at each request. `spent`: the
    poll's one budget, shared with sample_rows."""
    spent = spent if spent is not None else mirror.Spent()
    by_hostgroup: dict[int, list[mirror.Matcher]] = {}
    for r in sorted(rules, key=lambda r: r["rule_id"]):
        if r.get("active") and r.get("mirror_hostgroup") is not None:
            matcher = mirror.Matcher.of(r, spent)
            if not matcher.error:  # a pattern PCRE does not compile: ProxySQL's rule never matches either
                by_hostgroup.setdefault(r["mirror_hostgroup"], []).append(matcher)
    if not by_hostgroup:
        return [False] * len(deltas)
    spent.rules = sum(map(len, by_hostgroup.values()))
    texts = _texts(sorted({d.digest for d in deltas if d.hostgroup in by_hostgroup}), fresh_texts)
    spent.texts = len(texts)
    return [_copies(by_hostgroup.get(d.hostgroup, ()), d, texts.get(d.digest, "")) for d in deltas]


def _copies(matchers: Iterable[mirror.Matcher], delta: Delta, text: str) -> bool | None:
    unknown = False
    for m in matchers:
        if any(
            m.rule.get(k) and m.rule[k] != v
            for k, v in (("username", delta.username), ("schemaname", delta.schemaname))
        ):
            continue
        if not m.error and m.matches(delta.schemaname, delta.username, text):
            return True
        unknown = unknown or bool(m.error)  # match limit or budget: this rule's verdict is not known
    return None if unknown else False


def sample_rows(
    node_pk: int,
    ts: int,
    interval_s: float,
    now_state: MirrorRead,
    before_state: MirrorBaseline,
    deltas: Sequence[Delta],
    fresh_texts: Mapping[str, str],
    spent: mirror.Spent | None = None,
) -> tuple[mirror.Window | None, list[MirrorRuleSample]]:
    """Measure the window and return (mirror.Window, [MirrorRuleSample]) (database reads only). `spent`: the poll's one
    budget, shared with mark_copies (what the marks spent is not spent again here)."""
    hostgroups = {r["mirror_hostgroup"] for r in now_state["rules"] if r.get("mirror_hostgroup") is not None}
    if not hostgroups:
        return None, []
    mine = [d for d in deltas if d.hostgroup in hostgroups]
    texts = _texts(sorted({d.digest for d in mine}), fresh_texts)
    window = mirror.measure(
        now_state["rules"],
        now_state["hits"],
        before_state["hits"],
        now_state["counters"],
        before_state["counters"],
        [(d.hostgroup, d.schemaname, d.username, texts.get(d.digest, ""), d.count_star) for d in mine],
        interval_s,
        poll=spent,
    )
    when = datetime.fromtimestamp(ts, tz=timezone.utc)
    rows = [
        MirrorRuleSample(
            node_id=node_pk,
            rule_id=w.rule_id,
            ts=when,
            mirror_hostgroup=w.mirror_hostgroup,
            interval_s=interval_s,
            hits_ps=w.per_second(w.hits),
            prepared_share=w.prepared_share,
            expected_ps=w.per_second(w.expected),
            mirrored_ps=w.per_second(w.mirrored),
            loss=w.loss,
            ambiguous=w.ambiguous,
        )
        for w in window.rules
        if w.hits is not None
    ]
    return window, rows


def sync_rules(node_pk: int, rules: Iterable[mirror.Rule]) -> None:
    """Make the node's MirrorRule rows the mirror rules read at this poll (inside the caller's transaction)."""
    wanted: dict[int, dict[str, object]] = {
        r["rule_id"]: {
            "active": bool(r["active"]),
            "match_digest": r["match_digest"] or "",
            "match_pattern": r["match_pattern"] or "",
            "destination_hostgroup": r["destination_hostgroup"],
            "mirror_hostgroup": r["mirror_hostgroup"],
            "mirror_flag_out": r["mirror_flagOUT"],
        }
        for r in rules
        if mirror.is_mirror(r)
    }
    if _written_rules.get(node_pk) == wanted:
        return
    have = {m.rule_id: m for m in MirrorRule.objects.filter(proxysql_node_id=node_pk)}
    MirrorRule.objects.filter(proxysql_node_id=node_pk).exclude(rule_id__in=list(wanted)).delete()
    for rule_id, values in wanted.items():
        row = have.get(rule_id)
        if row is None:
            MirrorRule.objects.create(proxysql_node_id=node_pk, rule_id=rule_id, **values)
        elif any(getattr(row, k) != v for k, v in values.items()):
            MirrorRule.objects.filter(pk=row.pk).update(**values)
    transaction.on_commit(lambda: _written_rules.__setitem__(node_pk, wanted))


def store_samples(rows: Iterable[MirrorRuleSample]) -> None:
    MirrorRuleSample.objects.bulk_create(rows)
