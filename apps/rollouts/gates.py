"""The health gates a wave's bake reads besides the errors and the alerts (waves.gate composes them), each from
what the polls stored, each naming its figures when it fails:

- backends: a backend SHUNNED or OFFLINE on one of the wave's ProxySQL nodes since the change that was not so on
  that node just before the wave (ProxySQL shuns a backend itself, per node: each node's pool history is read);
- mirror: a node's mirror queue since the change against its limit (mysql-mirror_max_queue_length x mysql-threads,
  as monitoring/status.mirror reads it): at or above the rollout's share of it, and above the share before;
- latency: a cluster's query latency (the time per query of the digests the change touches, from the stored digest
  deltas) since the change against the same window before the wave, above the rollout's ratio. The digests a change
  touches (touched()): those its query rules (each edited rule as it was and as it becomes) would match (digest,
  match_digest, match_pattern on the digest text, username, schemaname) and those served by the hostgroups the
  rules route to; a change that edits no query rule (a variable, a user, a server) reads every digest of the nodes;
- refused: the queries the change's own error_msg rules answer with an error (read from the nodes' rule hits: no
  counter the polls read sees them), as errors per second against the rollout's error threshold.

"Since the change" is since the wave started (the window before ends there): a poll round's rows all carry the
round's start time while each node is read later, so a poll that started before the change was applied can hold
the change's first errors; and a wave of several clusters applies them one by one, the first running the change
while the others are written. Nothing falls between the two windows.

Each check takes the gate's reading (Reading) and adds its figures per node (or per cluster) and, when it fails,
a sentence and a dict naming the gate."""

import time
from dataclasses import dataclass, field

import msgspec

from django.db.models import Max, Sum
from django.utils import timezone

from apps.clients.proxysql import ProxySQLAdmin
from apps.clients.wire import ClientError
from apps.digests.models import RAW as DIGEST_RAW
from apps.configuration import rule_tester
from apps.configuration.rule_tester import regex_engine
from apps.configuration.tables import MYSQL_QUERY_RULES
from apps.digests.models import Digest, DigestStat
from apps.fleet.models import ProxySQLNode
from apps.monitoring import chunks, live, status
from apps.monitoring.rule_regex import MatchLimit
from apps.monitoring.models import RAW, ProxySQLSample

from .models import RolloutCluster

DOWN = ("SHUNNED", "OFFLINE_SOFT", "OFFLINE_HARD", "SHUNNED_REPLICATION_LAG")
LATEST_STEP_S = 0.1  # how often a canary's bake looks for its node's next poll (one small Redis read)
MIN_QUERIES = 20  # fewer queries since the change than this: no latency verdict yet (noise, not a trend)


@dataclass
class Kept:
    """What a bake keeps from one gate reading to the next (every GATE_STEP_S): the digests each cluster's change
    touches are judged once a bake, and its rules' searches share one budget over the bake (RULE_WALK_BUDGET_S),
    not one a reading (costly patterns cost their budget at every reading, twice a second, for the whole bake)."""

    batch: rule_tester.Batch = field(default_factory=rule_tester.Batch)
    scopes: dict = field(default_factory=dict)  # cluster name -> Scope


@dataclass
class Reading:
    """One gate reading of a wave: its nodes [(pk, name, cluster name)], the windows, and what the checks found."""

    rollout: object
    nodes: list
    started: object  # the wave started: the window before ends here, the window since the change starts here
    applied: object  # the wave's change was applied on every node (the refused check's rule hits count from then)
    window: object  # timedelta: the length of the window before
    figures: dict = field(default_factory=dict)  # node name -> {figure: value}
    clusters: dict = field(default_factory=dict)  # cluster name -> {figure: value}
    bad: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    kept: Kept = field(default_factory=Kept)

    def fail(self, sentence, **named):
        self.bad.append(sentence)
        self.failed.append(named)


def backends(reading):
    """Per node: backends SHUNNED or OFFLINE in any poll since the change, that were not in the last poll before
    the wave (a backend already down before is not this wave's doing)."""
    ids = {pk: name for pk, name, _ in reading.nodes}
    before, since = {}, {}
    rows = chunks.read_pool(
        {"node_id__in": list(ids), "resolution": RAW, "ts__gte": reading.started - reading.window}, ["status"]
    )
    for node_id, ts, _, key, (state,) in rows:
        if ts < reading.started:
            before[(node_id, key)] = state  # time order: the last poll before the wave wins
        elif state in DOWN:
            since.setdefault((node_id, key), state)
    for pk, name in ids.items():
        down = sorted(
            (key, state) for (node, key), state in since.items() if node == pk and before.get((node, key)) not in DOWN
        )
        reading.figures.setdefault(name, {})["backends_down"] = [
            {
                "hostgroup": hg,
                "backend": f"{host}:{port}",
                "status": state,
                "before": before.get((pk, (hg, host, port))),
            }
            for (hg, host, port), state in down
        ]
        if down:
            said = ", ".join(
                f"{host}:{port} (hostgroup {hg}) {state} since the change, "
                f"{before.get((pk, (hg, host, port))) or 'not polled'} before"
                for (hg, host, port), state in down
            )
            reading.fail(
                f"the backends gate on {name}: {said}",
                gate="backends",
                node=name,
                backends=reading.figures[name]["backends_down"],
            )


def mirror(reading):
    """Per node: the mirror queue's highest share of its limit since the change, against the window before."""
    threshold = reading.rollout.max_mirror_queue_share
    samples = ProxySQLSample.objects.filter(resolution=RAW)
    for pk, name, _ in reading.nodes:
        mine = samples.filter(node_id=pk)
        before = _queue_share(mine.filter(ts__gte=reading.started - reading.window, ts__lt=reading.started))
        after = _queue_share(mine.filter(ts__gte=reading.started))
        reading.figures.setdefault(name, {}).update(
            mirror_queue_before=before and before[1],
            mirror_queue_after=after and after[1],
            mirror_queue_limit=(after or before or (None, None, None))[2],
        )
        if after is None or after[0] < threshold or (before is not None and after[0] <= before[0]):
            continue
        share, queue, limit = after
        was = f"{before[1]:g} ({before[0]:.0%})" if before else "not polled"
        reading.fail(
            f"the mirror gate on {name}: mirror queue {queue:g} of its limit {limit:g} ({share:.0%}) since "
            f"the change, {was} before (threshold {threshold:.0%} of the limit)",
            gate="mirror",
            node=name,
            queue=queue,
            limit=limit,
            share=share,
            before=before and before[1],
            threshold=threshold,
        )


def _queue_share(samples):
    """(share, queue, limit) of the polls' highest mirror queue against its limit, or None without figures."""
    row = samples.aggregate(
        queue=Max("mirror_queue_length"), per_thread=Max("mirror_max_queue_length"), threads=Max("mysql_threads")
    )
    verdict = status.mirror(
        {
            "mirror_queue_length": row["queue"],
            "mirror_max_queue_length": row["per_thread"],
            "mysql_threads": row["threads"],
        }
    )
    if verdict.queue_ratio is None:
        return None
    return verdict.queue_ratio, verdict.queue, verdict.queue_limit


def latency(reading):
    """Per cluster of the wave (its gated nodes only: the canary's node alone): the time per query of the digests
    the change touches (touched()) since the change against the window before."""
    ratio = reading.rollout.max_latency_ratio
    by_cluster = {}
    for pk, _, cluster in reading.nodes:
        by_cluster.setdefault(cluster, []).append(pk)
    start, since = _epoch(reading.started - reading.window), _epoch(reading.started)
    kept = reading.kept
    for cluster, ids in by_cluster.items():
        if cluster not in kept.scopes:
            kept.scopes[cluster] = touched(reading.rollout, cluster, kept.batch)
        scope = kept.scopes[cluster]
        stats = DigestStat.objects.filter(resolution=DIGEST_RAW, source__node_id__in=ids)
        # a digest poll's rows cover the interval that ends at their ts (whole seconds): a row at `since` ended
        # before the wave started
        before = _per_query_ms(stats.filter(ts__gte=start, ts__lte=since), scope)
        after = _per_query_ms(stats.filter(ts__gt=since), scope)
        reading.clusters[cluster] = {
            "latency_ms_before": before and before[0],
            "latency_ms_after": after and after[0],
            "queries_after": after[1] if after else 0,
            "latency_digests": scope.said,
        }
        if before is None or after is None or after[1] < MIN_QUERIES or after[0] <= before[0] * ratio:
            continue
        where = cluster if len(ids) > 1 else f"{cluster} ({next(n for p, n, _ in reading.nodes if p == ids[0])})"
        reading.fail(
            f"the latency gate on {where}: {after[0]:.2f} ms per query since the change ({after[1]} "
            f"queries of {scope.said}), {before[0]:.2f} ms before (threshold x{ratio:g})",
            gate="latency",
            cluster=cluster,
            before=before[0],
            after=after[0],
            queries=after[1],
            threshold=ratio,
            digests=scope.said,
        )


@dataclass
class Scope:
    """The digests a cluster's change touches: `rules` (each edited query rule, as it was and as it becomes) and
    the `hostgroups` they route to; everything when the change edits no query rule (`rules` is None). The rules'
    searches are bounded as the rule tester's (`batch`: the match limit, each pattern's budget and the batch's): a
    digest a pattern cannot tell about counts as touched."""

    rules: list | None
    hostgroups: set
    engine: int
    words: str
    batch: rule_tester.Batch = field(default_factory=rule_tester.Batch)
    _hits: dict = field(default_factory=dict)

    @property
    def not_measured(self):
        """How many of the rules have a pattern that gave up (match limit or budget) in this scope's batch."""
        return sum(
            any((pattern, _caseless(rule), self.engine) in self.batch for pattern in _patterns(rule))
            for rule in self.rules or ()
        )

    @property
    def said(self):
        """The words, and the rules whose patterns could not be tested (their digests counted as touched)."""
        left = self.not_measured
        whose = "rules'" if left > 1 else "rule's"
        return self.words + (
            f" ({left} {whose} patterns too costly to test: every digest they might match counted)" if left else ""
        )

    def covers(self, digest, text, hostgroup, username, schemaname):
        if self.rules is None or hostgroup in self.hostgroups:
            return True
        key = (digest, username, schemaname)
        if key not in self._hits:
            self._hits[key] = any(self._matches(rule, digest, text, username, schemaname) for rule in self.rules)
        return self._hits[key]

    def _matches(self, rule, digest, text, username, schemaname):
        """The rule's own match on a digest (its flagIN chain aside): each criterion it sets must hold."""
        if rule.get("username") and rule["username"] != username:
            return False
        if rule.get("schemaname") and rule["schemaname"] != schemaname:
            return False
        if rule.get("digest") and str(rule["digest"]).lower() != digest.lower():
            return False
        for pattern in _patterns(rule):
            key = (pattern, _caseless(rule), self.engine)
            if key not in self.batch and self.batch.spent_out:
                self.batch[key] = rule_tester.NotMeasured(self.batch.budget_s)
            if key in self.batch:
                continue  # gave up (match limit, its budget, the batch's): cannot tell, counted as touched
            compiled = self.batch.regexes.get(key, False)
            if compiled is False:
                compiled = self.batch.regexes[key] = rule_tester.compiled(*key)
            try:
                if compiled is not None and not rule_tester.timed_search(compiled, text, key, self.batch):
                    return False
            except MatchLimit:
                pass  # cannot tell: counted as touched
        return True


def _caseless(rule):
    return "CASELESS" in {m.strip().upper() for m in (rule.get("re_modifiers") or "").split(",")}


def _patterns(rule):
    patterns = [rule.get("match_digest")] + ([] if rule.get("negate_match_pattern") else [rule.get("match_pattern")])
    return [p for p in patterns if p]


def touched(rollout, cluster_name, batch=None):
    """The Scope of the rollout's change on one cluster, from its change set's edits of mysql_query_rules and the
    rows they replace or delete in the version before; `batch`: the rule_tester.Batch its searches count against."""
    rc = (
        RolloutCluster.objects.filter(rollout=rollout, cluster__name=cluster_name)
        .select_related("change_set__base")
        .first()
    )
    cs = rc and rc.change_set
    if cs is None:
        return Scope(None, set(), 1, "every digest (no change set yet)")
    content = cs.base.content
    current = {str(r["rule_id"]): r for r in content.get(MYSQL_QUERY_RULES.name) or []}  # its key: rule_id
    rules = []
    for edit in cs.edits:
        if edit.get("table") != MYSQL_QUERY_RULES.name:
            continue
        if edit.get("row"):
            rules.append(edit["row"])
        key = str(edit["key"][0]) if edit.get("key") else str((edit.get("row") or {}).get("rule_id"))
        if key in current:
            rules.append(current[key])
    if not rules:
        return Scope(None, set(), 1, "every digest (the change edits no query rule)")
    hostgroups = {int(r["destination_hostgroup"]) for r in rules if r.get("destination_hostgroup") is not None}
    ids = sorted({str(r.get("rule_id")) for r in rules})
    words = f"the digests of query rule{'s' if len(ids) > 1 else ''} {', '.join(ids)}" + (
        f" and of hostgroup{'s' if len(hostgroups) > 1 else ''} {', '.join(map(str, sorted(hostgroups)))}"
        if hostgroups
        else ""
    )
    return Scope(rules, hostgroups, regex_engine(content), words, batch if batch is not None else rule_tester.Batch())


def _per_query_ms(stats, scope):
    """(ms per query, queries) of the scope's digests among `stats`, or None without queries."""
    rows = list(
        stats.values("digest_id", "source__hostgroup", "source__username", "source__schemaname").annotate(
            count=Sum("count_star"), time=Sum("sum_time")
        )
    )
    texts = {}
    if scope.rules is not None:
        texts = {
            pk: (digest, text)
            for pk, digest, text in Digest.objects.filter(pk__in={r["digest_id"] for r in rows}).values_list(
                "pk", "digest", "digest_text"
            )
        }
    count = time = 0
    for r in rows:
        digest, text = texts.get(r["digest_id"], ("", ""))
        if scope.covers(digest, text, r["source__hostgroup"], r["source__username"], r["source__schemaname"]):
            count += r["count"] or 0
            time += r["time"] or 0
    if not count:
        return None
    return time / count / 1000.0, count


def _epoch(dt):
    return int(dt.timestamp())


def refused(reading):
    """Per node: the queries the change's own rules refuse (query rules it adds or edits with an error_msg: ProxySQL
    answers each matching query with that error itself, and counts it in no error counter the polls read -- not
    Client_Connections_aborted, not ConnERR, not stats_mysql_errors, measured on real 2.7.1 -- only in the rule's
    stats_mysql_query_rules.hits, which its LOAD at the change set started at 0). Read from the nodes, as they
    are not polled; counted as errors per second since the change against the rollout's error threshold."""
    rules = {cluster: ids for cluster, ids in _refusing_rules(reading.rollout).items() if ids}
    if not rules:
        return
    seconds = max(1.0, (timezone.now() - reading.applied).total_seconds())
    nodes = ProxySQLNode.objects.select_related("cluster").in_bulk(
        [pk for pk, _, cluster in reading.nodes if cluster in rules]
    )
    for pk, name, cluster in reading.nodes:
        if pk not in nodes:
            continue
        try:
            with ProxySQLAdmin.for_node(nodes[pk]) as admin:
                hits = admin.query_rule_hits(rules[cluster])
        except ClientError:
            continue  # unreachable: the polls and the other gates say so
        rate = sum(hits.values()) / seconds
        reading.figures.setdefault(name, {})["refused_per_s"] = rate
        if rate > reading.rollout.max_error_rate:
            named = ", ".join(str(r) for r in sorted(hits) if hits[r])
            reading.fail(
                f"the errors gate on {name}: {rate:.1f} queries/s refused by the change's query rule "
                f"{named} (error_msg) since the change, {sum(hits.values())} in all "
                f"(threshold {reading.rollout.max_error_rate:g})",
                gate="errors",
                node=name,
                refused_per_s=rate,
                rules=sorted(hits),
                threshold=reading.rollout.max_error_rate,
            )


def _refusing_rules(rollout):
    """{cluster name: [rule_id]} of the query rules each cluster's change set adds or edits with an error_msg."""
    out = {}
    for name, edits in RolloutCluster.objects.filter(rollout=rollout, change_set__isnull=False).values_list(
        "cluster__name", "change_set__edits"
    ):
        out[name] = sorted(
            {
                int(e["row"]["rule_id"])
                for e in edits or []
                if e.get("table") == MYSQL_QUERY_RULES.name and (e.get("row") or {}).get("error_msg")
            }
        )
    return out


CHECKS = (backends, mirror, latency, refused)


class LatestPoll(msgspec.Struct):
    """What a gate reads of a node's latest-state document (live_doc.ProxySQLNodeDoc): when it was polled, and
    its rates. A round publishes each node's document as soon as that node is polled; its history rows are stored
    only when the whole round is over (100 nodes: 1.6 s, up to 6 s under load), so a gate reading the history
    alone saw a bad canary's errors that much later."""

    ts: float = 0.0
    ok: bool = False
    figures: dict[str, float | int | None] = {}


def latest_polls(node_ids):
    """{node id: LatestPoll or None}; {} when Redis cannot be read (the gate then reads the history only)."""
    try:
        return live.read_typed(live.PROXYSQL, list(node_ids), LatestPoll)
    except live.LiveUnavailable:
        return {}


def wait_for_poll(node_ids, seconds, seen_ts):
    """Sleep up to `seconds`, returning as soon as one of these nodes has a poll newer than `seen_ts`: the bake
    then judges that poll at once instead of at its next timed read. Returns the newest poll time seen."""
    ends = time.monotonic() + seconds
    while True:
        newest = max((p.ts for p in latest_polls(node_ids).values() if p), default=seen_ts)
        left = ends - time.monotonic()
        if newest > seen_ts or left <= 0:
            return max(newest, seen_ts)
        time.sleep(min(LATEST_STEP_S, left))
