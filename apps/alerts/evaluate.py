"""Rule evaluation after every poll round, from the latest state (never a connection to a node).

A round hands over the documents it just wrote with the ones they replaced ({pk: (previous, new)}):
- each polled node or backend is judged on its own document, in memory (conditions.node_observations /
  backend_observations);
- a cluster is judged as a whole (its writer and reader hostgroups against its backends' health, its nodes
  against each other, its size, its operations) when something in it changed that such a rule reads (a
  node's runtime rows, a backend's answer or state), at a sweep by the shard that owns it (cluster pk modulo
  shards) every ALERTS_SWEEP_S when one of its documents went stale or an operation alert is to open or
  close, and every FULL_SWEEP_EVERY sweeps anyway. That reads the cluster's documents with one MGET per
  kind for all the clusters judged.
- an alert that is due is judged at its own time by a task (judge_at): a pending one when its `for` ends (its
  target only: the node, backend, cluster pass or channel, every rule of it; the clusters due in the same half
  second judged together by one task, judge_slot), held ones when the work that held them is over (the cluster
  whole); a sweep catches any whose task was lost.

Transitions (apply()): a new condition opens a pending alert (held when planned work is expected to cause
it); pending becomes firing once its `for` has passed (counted from when the condition began; a held alert
is released when its work ends, firing at once if the condition has lasted long enough); an alert whose
condition is gone is resolved. A pending alert that clears without ever firing or being held leaves no
row. Writes are batched (Writes); changes that channels must hear of go to notify.changed().
"""

import logging
import math
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from django.conf import settings
from django.db import connection, transaction

from apps.configuration import drift as layers_drift
from apps.monitoring import live, status
from controlplane import tasks

from . import conditions, context, holds, lean, native_failover, notify, rulesettings
from .models import Alert, AlertState

log = logging.getLogger(__name__)
CHANNEL_KIND = "channel"  # apps/dr/polling.py's latest-state kind
SUMMARY_REFRESH_S = 30.0
FULL_SWEEP_EVERY = 6  # one sweep in six judges every owned cluster whole (a minute at the default ALERTS_SWEEP_S)  # an open alert's figures are rewritten at most this often (not at every poll)
# What the transitions read of every open alert, and of a pending one only (NULL on the others: see _open_alerts).
ACTIVE_FIELDS = ("id", "rule", "subject", "target", "cluster_id", "state", "summary", "severity")
PENDING_FIELDS = ("held", "was_held", "fires_at")


@dataclass(slots=True)
class OpenAlert:
    """An open alert as the transitions read it. held, was_held and fires_at are read only while it is pending
    (None on a firing one: no transition of a firing alert reads them)."""

    id: int
    rule: str
    subject: str
    target: str
    cluster_id: int
    state: str
    summary: str
    severity: str
    held: bool | None = None
    was_held: bool | None = None
    fires_at: datetime | None = None


@dataclass
class Pass:
    """What one judgement covered: these targets, these rules, and what it saw."""

    cluster_id: int
    targets: set
    rules: tuple
    observations: list


def _dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def _still_failing(prev, doc, since):
    """Both polls failed, the same way, and the previous one was judged with today's inventory and rule
    settings (read before it): judging it again would see what the last judgement saw. A fleet-wide outage
    (thousands of backends refused) costs the rounds little more than a healthy fleet."""
    return (
        prev is not None
        and doc is not None
        and not prev.get("ok", True)
        and not doc.get("ok", True)
        and prev.get("error_kind") == doc.get("error_kind")
        and prev.get("error") == doc.get("error")
        and prev.get("ts", 0) > since
    )


def _routing_signature(doc):
    if not doc:
        return None
    part = doc.get("proxysql_cluster") or {}
    return (doc.get("ok"), doc.get("runtime_servers"), part.get("checksums"))


def _health_signature(doc):
    if not doc:
        return None
    st = doc.get("state") or {}
    return (
        doc.get("ok"),
        st.get("cluster_status"),
        st.get("ready"),
        st.get("local_state"),
        st.get("read_only"),
        st.get("reject_queries"),
        st.get("cluster_size"),
    )


def after_poll_round(kind, docs, shard=0, shards=1, now=None):
    """Called by the poll task after run_shard(): docs {pk: (previous, new document)} of the polled targets."""
    now = now or time.time()
    if docs and kind in (live.PROXYSQL, live.BACKEND):
        try:
            native_failover.after_round(kind, docs, now)
        except Exception:  # watching ProxySQL's manager must never stop the alert rules
            log.exception("watching the native managers' failover after the %s round failed", kind)
    if not settings.ALERTS_ENABLED:
        return {}
    cpu = time.process_time()
    swept = _sweep_due(shard, shards, now) if kind == live.PROXYSQL else 0
    if not docs and not swept:
        return {}  # a tick with nothing due: the pending alerts have their own timers (judge_pending_at)
    inv = context.inventory()
    situation = context.situation(inv, now)
    if situation.last_ended:  # an operation may have changed the inventory (a switchover's new writer...)
        inv = context.inventory(changed_after=situation.last_ended)
    passes, covered, triggered = [], set(), set()
    judged_since = max(inv.loaded_at, rulesettings.changed_at())
    engine = layers_drift.stored(docs) if kind == live.PROXYSQL else {}
    for pk, (prev, doc) in docs.items():
        cluster_id = (inv.node_cluster if kind == live.PROXYSQL else inv.server_cluster).get(pk)
        if cluster_id is None:
            continue  # added since the inventory was read: judged at the next read
        c = inv.clusters[cluster_id]
        rules = rulesettings.for_cluster(c)
        if _still_failing(prev, doc, judged_since):
            covered.add(f"{'n' if kind == live.PROXYSQL else 's'}{pk}")
            continue  # judged on the same failure at its last poll: what that opened stands
        if kind == live.PROXYSQL:
            passes.append(
                Pass(
                    c.pk,
                    {f"n{pk}"},
                    conditions.node_rules(c, doc, now),
                    conditions.node_observations(
                        c,
                        c.nodes[pk],
                        holds.without_own_changes(
                            with_layers(doc, engine.get(pk), situation.own_changes.get(c.pk)),
                            c,
                            situation.own_changes.get(c.pk),
                        ),
                        now,
                        rules,
                    ),
                )
            )
            covered.add(f"n{pk}")
            if _routing_signature(prev) != _routing_signature(doc):
                triggered.add(c.pk)
        else:
            passes.append(
                Pass(
                    c.pk,
                    {f"s{pk}"},
                    conditions.SERVER_RULES,
                    conditions.backend_observations(c, c.servers[pk], doc, now, rules),
                )
            )
            covered.add(f"s{pk}")
            if _health_signature(prev) != _health_signature(doc):
                triggered.add(c.pk)
    # A cluster with an alert due is judged whole, every rule: what a hold kept back is released together.
    # Due alerts have their own timers (judge_at); a sweep catches any whose timer was lost.
    due = _due_clusters(situation, now) if swept else set()
    _judge_when_holds_end(situation)
    if swept:
        triggered |= _sweep(inv, shard, shards, situation, now, swept)
    passes += judge_clusters(
        [inv.clusters[pk] for pk in sorted(due) if pk in inv.clusters], situation, now, skip=covered, full=True
    )
    passes += judge_clusters(
        [inv.clusters[pk] for pk in sorted(triggered - due) if pk in inv.clusters], situation, now, skip=covered
    )
    counts = apply(passes, situation, now)
    counts.update(clusters=len(triggered | due), cpu_ms=round((time.process_time() - cpu) * 1000, 2))
    return counts


def after_channel_poll(docs, now=None):
    """Called after the DR channels' polls (apps/dr/polling.py): docs {channel pk: (previous, new document)}
    (previous: what the poll carried over, a polling.LastPoll, not read here).
    Each channel is judged on its own document, on its replica cluster."""
    if not settings.ALERTS_ENABLED or not docs:
        return {}
    now = now or time.time()
    inv = context.inventory()
    situation = context.situation(inv, now)
    if any(pk not in inv.channel_cluster for pk in docs):  # a channel added since the inventory was read
        inv = context.inventory(changed_after=time.time())
    elif situation.last_ended:  # an operation (a channel move) may have changed a channel's ends
        inv = context.inventory(changed_after=situation.last_ended)
    passes = []
    for pk, (_prev, doc) in docs.items():
        c = inv.clusters.get(inv.channel_cluster.get(pk))
        if c is None:
            continue
        passes.append(
            Pass(
                c.pk,
                {f"ch{pk}"},
                conditions.CHANNEL_RULES,
                conditions.channel_observations(c, c.channels[pk], doc, now, rulesettings.for_cluster(c)),
            )
        )
    return apply(passes, situation, now)


def _channel_passes(clusters, now, full, only=None):
    """The DR channels into these clusters whose document went stale (or every one when `full`); of `only`'s targets
    when given."""
    pks = [pk for c in clusters for pk in c.channels if only is None or f"ch{pk}" in only]
    if not pks:
        return []
    try:
        docs = lean.read_many(CHANNEL_KIND, pks)
    except live.LiveUnavailable:
        return []
    out = []
    for c in clusters:
        for pk, ch in c.channels.items():
            doc = docs.get(pk)
            if only is not None and f"ch{pk}" not in only:
                continue
            if full or doc is None or conditions.is_stale(doc, c, now, backend=True):
                out.append(
                    Pass(
                        c.pk,
                        {f"ch{pk}"},
                        conditions.CHANNEL_RULES,
                        conditions.channel_observations(c, ch, doc, now, rulesettings.for_cluster(c)),
                    )
                )
    return out


def judge_clusters(clusters, situation, now, skip=(), full=False, only=None):
    """Clusters from their documents (one MGET per kind for all of them): the rules on each whole cluster,
    and the rules on each node and backend whose document went stale (their own rounds judge the others),
    or on every one when `full`. only: these targets alone ("n<pk>", "s<pk>", "c<pk>", "ch<pk>"; a pending
    alert's end of `for`), reading only the documents they need (the cluster's pass reads all of its cluster)."""
    clusters = list(clusters)

    def judged(target):
        return only is None or target in only

    def read_for(c, target):
        return judged(target) or judged(f"c{c.pk}")

    try:
        read = live.read_many if full else lean.read_many  # the whole documents only when every rule reads them
        node_docs = read(live.PROXYSQL, [pk for c in clusters for pk in c.nodes if read_for(c, f"n{pk}")])
        server_docs = read(live.BACKEND, [pk for c in clusters for pk in c.servers if read_for(c, f"s{pk}")])
    except live.LiveUnavailable:
        return []  # judged again once Redis answers; nothing is resolved on missing data
    engine = layers_drift.stored(pk for c in clusters for pk in c.nodes if judged(f"n{pk}"))
    out = []
    for c in clusters:
        rules = rulesettings.for_cluster(c)
        mine_n = {pk: node_docs.get(pk) for pk in c.nodes}
        mine_s = {pk: server_docs.get(pk) for pk in c.servers}
        for pk, n in c.nodes.items():
            doc = mine_n[pk]
            if not judged(f"n{pk}"):
                continue
            if f"n{pk}" not in skip and (full or doc is None or conditions.is_stale(doc, c, now)):
                out.append(
                    Pass(
                        c.pk,
                        {f"n{pk}"},
                        conditions.node_rules(c, doc, now),
                        conditions.node_observations(
                            c,
                            n,
                            holds.without_own_changes(
                                with_layers(doc, engine.get(pk), situation.own_changes.get(c.pk)),
                                c,
                                situation.own_changes.get(c.pk),
                            ),
                            now,
                            rules,
                        ),
                    )
                )
        for pk, s in c.servers.items():
            doc = mine_s[pk]
            if not judged(f"s{pk}"):
                continue
            if f"s{pk}" not in skip and (full or doc is None or conditions.is_stale(doc, c, now, backend=True)):
                out.append(
                    Pass(
                        c.pk,
                        {f"s{pk}"},
                        conditions.SERVER_RULES,
                        conditions.backend_observations(c, s, doc, now, rules),
                    )
                )
        if judged(f"c{c.pk}"):
            out.append(
                Pass(
                    c.pk,
                    {f"c{c.pk}"},
                    conditions.CLUSTER_RULES,
                    conditions.cluster_observations(c, mine_n, mine_s, now, rules, situation.op_alerts.get(c.pk, [])),
                )
            )
    return out + _channel_passes(clusters, now, full, only)


def with_layers(doc, stored, own=None):
    """A node's document with the drift watcher's last result (the configuration's engine over every table and
    variable of the version, all three layers: apps/configuration/drift.watch; a drift.StoredResult) under
    "layers_drift". A result read before one of the cluster's own operations ended (own: context.OwnChanges) is
    left out: it may show the operation half done; the next run of the watcher (30 s) judges what it left."""
    if not doc or not stored or any(w.end is None or stored.ts < w.end for w in own or ()):
        return doc
    return {**doc, "layers_drift": stored}


# The holds' ends this process has scheduled, (operation id, end): an id alone is not enough, since a database can
# give a new operation the id of one rolled back or deleted (SQLite reuses the highest id: a test's switchover after
# another's found its id here and its hold's end was never judged, leaving that hold's pending alerts open).
_hold_ends_scheduled = set()


def _judge_when_holds_end(situation):
    """Planned work that just ended: its cluster is judged again when the hold's settling polls are over,
    once per operation (across processes: a key in Redis), so what outlived the work is released then."""
    for cluster_id, works in situation.work.items():
        for w in works:
            if w.until is None or w.operation_id is None or (w.operation_id, w.until) in _hold_ends_scheduled:
                continue
            if len(_hold_ends_scheduled) > 10_000:  # bounded: a worker runs for months
                _hold_ends_scheduled.clear()
            _hold_ends_scheduled.add((w.operation_id, w.until))
            try:
                if live.client().set(f"alerts:hold-end:{w.operation_id}:{w.until}", 1, nx=True, ex=3600):
                    judge_at(cluster_id, w.until)
            except Exception as exc:
                log.debug("hold end of operation %s not scheduled: %s", w.operation_id, exc)


def _due_clusters(situation, now):
    """Clusters with an alert to look at now: pending past its `for`, held by work that is over, or with an
    operation alert (failed, rollback or finish pending) not yet open."""
    due = set()
    rows = Alert.objects.filter(active_key__isnull=False, state=AlertState.PENDING).values_list(
        "cluster_id", "held", "fires_at"
    )
    for cluster_id, held, fires_at in rows:
        if held:
            if not any(w.until is None or now < w.until for w in situation.work.get(cluster_id, [])):
                due.add(cluster_id)
        elif fires_at.timestamp() <= now:
            due.add(cluster_id)
    if situation.op_alerts:
        open_ops = set(
            Alert.objects.filter(active_key__isnull=False, operation__isnull=False).values_list(
                "operation_id", flat=True
            )
        )
        due |= {cid for cid, ops in situation.op_alerts.items() if any(op.pk not in open_ops for op in ops)}
    return due


def _sweep(inv, shard, shards, situation, now, swept):
    """Of the clusters this shard owns, those to judge whole at a sweep: a node or backend not polled for three
    of its intervals (its document is stale: its own round is not running), or an operation alert to open
    or close. The others changed nothing a rule reads since their last judgement (their rounds trigger one
    when something does); every FULL_SWEEP_EVERY sweeps all are judged (a rule's new threshold, a worker
    just started)."""
    mine = [c for pk, c in inv.clusters.items() if pk % shards == shard]
    if not mine or swept % FULL_SWEEP_EVERY == 1:
        return {c.pk for c in mine}  # now and then every one, whatever changed (and at a worker's start)
    r = live.client()
    try:
        started = {
            kind: r.hmget(f"poll-started:{kind}", pks) if pks else []
            for kind, pks in (
                (live.PROXYSQL, [pk for c in mine for pk in c.nodes]),
                (live.BACKEND, [pk for c in mine for pk in c.servers]),
            )
        }
    except Exception as exc:
        log.debug("sweep: poll times unreadable: %s", exc)
        return {c.pk for c in mine}
    out = set()
    nodes, servers = iter(started[live.PROXYSQL]), iter(started[live.BACKEND])
    for c in mine:
        limit_n, limit_s = status.stale_after(c.interval), status.stale_after(c.backend_interval)
        if any(ts is None or now - float(ts) > limit_n for ts in (next(nodes) for _ in c.nodes)) | any(
            ts is None or now - float(ts) > limit_s for ts in (next(servers) for _ in c.servers)
        ):
            out.add(c.pk)
    out |= set(situation.op_alerts)
    out |= set(
        Alert.objects.filter(active_key__isnull=False, operation__isnull=False).values_list("cluster_id", flat=True)
    )
    return out & {c.pk for c in mine}


def _sweep_due(shard, shards, now):
    """0 when the clusters this shard owns were swept less than ALERTS_SWEEP_S ago; else the sweep's number
    (counted in Redis), the first being 1."""
    r = live.client()
    key = f"alerts:swept:{shard}:{shards}"
    try:
        last = r.get(key)
        if last is not None and now - float(last) < settings.ALERTS_SWEEP_S:
            return 0
        r.set(key, now, ex=3600)
        return r.incr(f"{key}:count")
    except Exception as exc:  # Redis down: the round itself has already said so
        log.debug("sweep skipped: %s", exc)
        return 0


# -- transitions -------------------------------------------------------------------------------------
class Writes:
    """What a judgement changes, written in a few statements however many alerts it opens, fires or resolves
    (a fleet-wide outage opens thousands at once, and the pollers share the database meanwhile)."""

    def __init__(self):
        self.opens, self.fires, self.resolves, self.drops = [], [], [], []

    def flush(self, now):
        with transaction.atomic():
            for i in range(0, len(self.opens), 500):
                # Another round may have opened one of these a moment ago: its row stands (one per rule and subject).
                Alert.objects.bulk_create(self.opens[i : i + 500], ignore_conflicts=True)
            for i in range(0, len(self.fires), 500):
                Alert.objects.filter(pk__in=self.fires[i : i + 500], state=AlertState.PENDING).update(
                    state=AlertState.FIRING, fired_at=_dt(now), last_seen_at=_dt(now)
                )
            for i in range(0, len(self.resolves), 500):
                Alert.objects.filter(pk__in=self.resolves[i : i + 500], active_key__isnull=False).update(
                    state=AlertState.RESOLVED, resolved_at=_dt(now), active_key=None, held=False
                )
            for i in range(0, len(self.drops), 500):  # pending, never held: a blip that never fired leaves no row
                Alert.objects.filter(pk__in=self.drops[i : i + 500], state=AlertState.PENDING).delete()


def apply(passes, situation, now):
    """Open, fire, hold, release and resolve alerts for what these passes saw. Returns counts."""
    counts = {"opened": 0, "fired": 0, "resolved": 0, "held": 0, "released": 0}
    targets = set()
    for p in passes:
        targets |= p.targets
    if not targets:
        return counts
    active, by_target = _open_alerts(sorted(targets))
    changes = []  # (cluster_id, "fired" | "resolved" | "pending", severity, alert id or fires_at)
    writes = Writes()
    inv = context.inventory()
    for p in passes:
        c = inv.clusters.get(p.cluster_id)
        if c is None:
            continue
        works = situation.work.get(p.cluster_id, []) if p.observations else []
        seen = set()
        for o in p.observations:
            key = (o.rule, o.subject)
            if key in seen:
                continue
            seen.add(key)
            setting = rulesettings.effective(c, o.rule)
            hold = holds.hold_for(o, works, now)
            row = active.get(key)
            if row is None:
                changes += _open(c, o, setting, hold, now, counts, writes)
            else:
                changes += _update(row, o, setting, hold, now, counts, writes)
        for target in p.targets:
            for row in by_target.get(target, ()):
                if (row.rule, row.subject) not in seen and row.rule in p.rules:
                    changes += _resolve(row, counts, writes)
    writes.flush(now)
    told = [ch for ch in changes if ch[1] != "pending"]
    channels = notify.channels_now() if told else []
    for cluster_id in {ch[0] for ch in told}:
        notify.changed(cluster_id, [ch for ch in told if ch[0] == cluster_id], now, channels)
    pending_at = _earliest({(ch[0], ch[3]) for ch in changes if ch[1] == "pending"})
    if pending_at:  # one Redis round trip for every cluster (judge_pending_at)
        transaction.on_commit(lambda: judge_pending_at(pending_at))
    return counts


def _open_alerts(targets):
    """The open alerts of these targets: {(rule, subject): OpenAlert} and {target: [OpenAlert]}. One query per 500
    targets, as plain tuples. The many firing alerts are read without their hold and times (NULL in the query):
    parsing a thousand datetimes and flags per round costs more than judging them; a pending one's come with it.
    The statement is written once per number of targets (Django compiling it, a CASE per pending field, cost
    three times the read of a judgement's ten rows), its datetimes converted as the ORM would."""
    active, by_target = {}, {}
    to_datetime = connection.ops.convert_datetimefield_value
    with connection.cursor() as cur:
        for i in range(0, len(targets), 500):
            batch = list(targets[i : i + 500])
            cur.execute(_open_alerts_sql(len(batch)), [AlertState.PENDING] * len(PENDING_FIELDS) + batch)
            for values in cur.fetchall():
                row = OpenAlert(*values[: len(ACTIVE_FIELDS)])
                held, was_held, fires_at = values[len(ACTIVE_FIELDS) :]
                if held is not None:  # pending
                    row.held, row.was_held = bool(held), bool(was_held)
                    row.fires_at = to_datetime(fires_at, None, connection)
                active[(row.rule, row.subject)] = row
                by_target.setdefault(row.target, []).append(row)
    return active, by_target


_open_alerts_statements: dict[tuple[str, int], str] = {}


def _open_alerts_sql(count):
    """SELECT the ACTIVE_FIELDS, and the PENDING_FIELDS of a pending alert (NULL on the others), of the open alerts
    of `count` targets: parameters the pending state once per PENDING_FIELDS, then the targets. Index
    alert_target_open (target, active_key): a target's resolved history is not read."""
    key = (connection.vendor, count)
    if key not in _open_alerts_statements:
        pending_only = [f"CASE WHEN {_column('state')} = %s THEN {_column(name)} END" for name in PENDING_FIELDS]
        _open_alerts_statements[key] = (
            f"SELECT {', '.join([*(_column(name) for name in ACTIVE_FIELDS), *pending_only])} "
            f"FROM {connection.ops.quote_name(Alert._meta.db_table)} "
            f"WHERE {_column('active_key')} IS NOT NULL AND {_column('target')} IN ({', '.join(['%s'] * count)})"
        )
    return _open_alerts_statements[key]


def _column(name):
    """An Alert field's column, quoted for the database (the statements run on a cursor)."""
    return connection.ops.quote_name(Alert._meta.get_field(name).column)


def _earliest(pairs):
    out = {}
    for cluster_id, fires_at in pairs:
        out[cluster_id] = min(fires_at, out.get(cluster_id, fires_at))
    return out


# The judgements of pending alerts at their end of `for` (issue 40, fleet scale). A flapping figure opens a pending
# alert at every poll, and alerts opened by one event (a backend down behind every cluster) end their `for` together:
# one eta task per cluster held a thousand tasks in the worker's memory, run within seconds, each paying a task's
# overhead and its own inventory and situation read for ~2 ms of judging. Now Redis keeps one sorted set of the
# clusters to judge, each scored by the earliest end of `for` scheduled for it (DUE_KEY), and one task per time slot
# of JUDGEMENT_SLOT_S (claimed once per slot: DUE_SLOT_KEY, SET NX) judges every cluster due by then together
# (judge_slot -> judge_due). A round schedules a cluster again only for an earlier time, and each judgement, when it
# runs, schedules the next for the earliest end of `for` still pending (judge_due).
DUE_KEY = "alerts:judge-due"
DUE_SLOT_KEY = "alerts:judge-slot:{}"
JUDGEMENT_SLOT_S = 0.5  # an alert fires at most this late after its end of `for` (was 0.02 s; polls are seconds apart)
JUDGEMENT_BATCH_MAX = 500  # clusters judged by one task; more due at once: another task takes the rest at once
JUDGEMENT_SLACK_S = 1.0  # one scheduled this little after an alert's end of `for` covers it (judge_due: due within 1 s)
JUDGEMENT_GRACE_S = 30.0  # a time this far past is a task late or lost: it stops no later one (nor its slot) for longer
# ARGV: now, slack, grace, then (cluster, when, slot, slot ttl ms) per cluster. Returns the slots claimed (the caller
# queues their tasks). A cluster already scheduled at or before `when` (within the slack) is left as it is.
_RECORD_DUE = """
local now, slack, grace = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local claimed = {}
for i = 4, #ARGV, 4 do
  local when = tonumber(ARGV[i + 1])
  local scheduled = redis.call('zscore', KEYS[1], ARGV[i])
  if not (scheduled and tonumber(scheduled) <= when + slack and tonumber(scheduled) >= now - grace) then
    redis.call('zadd', KEYS[1], ARGV[i + 1], ARGV[i])
    if redis.call('set', KEYS[2] .. ARGV[i + 2], 1, 'NX', 'PX', ARGV[i + 3]) then
      table.insert(claimed, ARGV[i + 2])
    end
  end
end
return claimed
"""
# The clusters due by ARGV[1], at most ARGV[2] of them, taken out of the set (a judgement of each is under way).
_POP_DUE = """
local due = redis.call('zrangebyscore', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #due > 0 then redis.call('zrem', KEYS[1], unpack(due)) end
return due
"""
# One cluster's judgement whose time has come is scheduled no longer (a later one recorded instead stays).
_FORGET_DUE = """
local scheduled = redis.call('zscore', KEYS[1], ARGV[1])
if scheduled and tonumber(scheduled) <= tonumber(ARGV[2]) then return redis.call('zrem', KEYS[1], ARGV[1]) end
return 0
"""


def _slot_of(when):
    """The slot whose task judges an end of `for` at `when`: the first slot end at or after it (slot * SLOT_S)."""
    return math.ceil(when / JUDGEMENT_SLOT_S)


def slot_end(slot):
    return slot * JUDGEMENT_SLOT_S


def _record_due(times, now):
    """{cluster: when} recorded in the due set (an earlier time replaces a later one); returns the slots claimed."""
    args = [repr(now), JUDGEMENT_SLACK_S, JUDGEMENT_GRACE_S]
    for cluster_id, when in sorted(times.items()):
        slot = _slot_of(max(when, now + 0.01))  # a time already past (a long round's): a slot whose task is to come
        args += [cluster_id, repr(when), slot, int((max(slot_end(slot) - now, 0.0) + JUDGEMENT_GRACE_S) * 1000)]
    script = live.client().register_script(_RECORD_DUE)
    return [int(slot) for slot in script(keys=[DUE_KEY, DUE_SLOT_KEY.format("")], args=args)]


def _forget_judgement(cluster_id, now):
    try:
        script = live.client().register_script(_FORGET_DUE)
        script(keys=[DUE_KEY], args=[cluster_id, repr(now + JUDGEMENT_SLACK_S)])
    except Exception as exc:  # a judgement too many later, never one lost
        log.debug("judgement of cluster %s not forgotten: %s", cluster_id, exc)


def judge_pending_at(times):
    """Judge these clusters' pending alerts at their end of `for` ({cluster: when}, epoch): each judged then only if
    one is still pending and due (judge_due); a cluster whose judgement is already at or before `when` is left to that
    one, which schedules the next. One Redis round trip for them all, one task per slot not yet claimed. Redis not
    answering: one task per cluster, as before the due set (a judgement too many, never one lost); the broker not
    answering: none, the rounds' sweeps promote the due alerts (_due_clusters)."""
    if not times:
        return
    now = time.time()
    try:
        slots = _record_due(times, now)
    except Exception as exc:
        log.debug("judgements due unrecorded, one task per cluster: %s", exc)
        for cluster_id, when in times.items():
            _enqueue_cluster(cluster_id, when, pending_due=True)
        return
    for slot in slots:
        try:
            tasks.enqueue("alerts.judge_due", (slot,), eta=_dt(slot_end(slot) + 0.02))
        except Exception as exc:  # no broker: the sweeps promote them; the slot is freed for a later request to retry
            log.debug("judgement slot %s not scheduled: %s", slot, exc)
            try:
                live.client().delete(DUE_SLOT_KEY.format(slot))
            except Exception:
                pass


def _enqueue_cluster(cluster_id, when, pending_due=False):
    try:
        tasks.enqueue(
            "alerts.judge_cluster", (cluster_id, True) if pending_due else (cluster_id,), eta=_dt(when + 0.02)
        )
    except Exception as exc:  # no broker: the sweeps promote it
        log.debug("judge of cluster %s not scheduled: %s", cluster_id, exc)


def judge_at(cluster_id, when, pending_due=False):
    """Judge a cluster again at `when` (epoch): a pending alert when its `for` ends (pending_due: through the due set,
    judge_pending_at), held ones when the work that held them is over (the cluster whole, a task of its own: one per
    operation's end, few, and never covered by a pending judgement, which judges only the due targets); not at the next
    sweep after that."""
    if pending_due:
        judge_pending_at({cluster_id: when})
    else:
        _enqueue_cluster(cluster_id, when)


def judge_slot(slot, now=None):
    """The task of a slot: every cluster due by the slot's end (or by now, with those a lost task left), judged
    together (judge_due). More than JUDGEMENT_BATCH_MAX due: another task is queued first for the rest.
    The clusters are taken out of the due set before their pending alerts are read (a round opening one after that
    read schedules its own judgement, as _forget_judgement did). If this task dies on its way, the clusters it took
    are not scheduled again by it: their due alerts are promoted by the rounds' sweeps (_due_clusters, every
    ALERTS_SWEEP_S), which judge them whole and schedule what is still to come, as for a task lost."""
    if not settings.ALERTS_ENABLED:
        return {}
    if now is None:
        early = slot_end(slot) - time.time()
        if 0 < early <= JUDGEMENT_SLOT_S:  # run before its slot's end (a worker's clock behind the scheduler's)
            time.sleep(early)
        now = time.time()
    try:
        script = live.client().register_script(_POP_DUE)
        due = [int(pk) for pk in script(keys=[DUE_KEY], args=[repr(max(now, slot_end(slot))), JUDGEMENT_BATCH_MAX])]
    except Exception as exc:  # the sweeps promote them
        log.debug("judgements due of slot %s unread: %s", slot, exc)
        return {}
    if len(due) == JUDGEMENT_BATCH_MAX:
        try:
            tasks.enqueue("alerts.judge_due", (slot,))
        except Exception as exc:  # the sweeps promote them
            log.debug("the rest of slot %s not scheduled: %s", slot, exc)
    if not due:
        return {}
    return {**judge_due(due, now), "clusters": len(due)}


def _pending_times_of(cluster_ids):
    """{cluster: [(target, end of `for` epoch)]} of these clusters' pending alerts not held: one indexed query per 500
    clusters, on a cursor (as _open_alerts: Django compiling the filter cost ten times the read)."""
    to_datetime = connection.ops.convert_datetimefield_value
    out = {}
    ids = list(cluster_ids)
    with connection.cursor() as cur:
        for i in range(0, len(ids), 500):
            batch = ids[i : i + 500]
            cur.execute(_pending_times_sql(len(batch)), [*batch, AlertState.PENDING, False])
            for cluster_id, target, fires_at in cur.fetchall():
                out.setdefault(cluster_id, []).append((target, to_datetime(fires_at, None, connection).timestamp()))
    return out


def _pending_times(cluster_id):
    """[(target, end of `for` epoch)] of one cluster's pending alerts not held."""
    return _pending_times_of([cluster_id]).get(cluster_id, [])


_pending_times_statements: dict[tuple[str, int], str] = {}


def _pending_times_sql(count=1):
    """Parameters: `count` clusters' pks, the pending state, False (not held). Index alert_cluster_state."""
    key = (connection.vendor, count)
    if key not in _pending_times_statements:
        _pending_times_statements[key] = (
            f"SELECT {_column('cluster_id')}, {_column('target')}, {_column('fires_at')} "
            f"FROM {connection.ops.quote_name(Alert._meta.db_table)} "
            f"WHERE {_column('cluster_id')} IN ({', '.join(['%s'] * count)}) "
            f"AND {_column('state')} = %s AND {_column('held')} = %s"
        )
    return _pending_times_statements[key]


def _alone(c, targets):
    """True when each of these targets is one a judgement can judge by itself: a node, backend, DR channel or the
    cluster's own pass (not an alert judged elsewhere: a mirror rule's, a digest's)."""
    own = {
        f"c{c.pk}",
        *(f"n{pk}" for pk in c.nodes),
        *(f"s{pk}" for pk in c.servers),
        *(f"ch{pk}" for pk in c.channels),
    }
    return set(targets) <= own


def _judging_context(now):
    inv = context.inventory()
    situation = context.situation(inv, now)
    if situation.last_ended:  # an operation may have changed the inventory (a switchover's new writer...)
        inv = context.inventory(changed_after=situation.last_ended)
    return inv, situation


def judge_now(cluster_id, now=None, pending_due=False):
    """Every rule of one cluster, now (the task judge_at() scheduled for a hold's end). pending_due: the judgement of
    its pending alerts at their end of `for` (judge_due; tasks queued per cluster before the due set, or while Redis
    did not answer)."""
    if not settings.ALERTS_ENABLED:
        return {}
    now = now or time.time()
    if pending_due:
        # Forgotten before reading what is pending: a round that opens one after this read schedules its own.
        _forget_judgement(cluster_id, now)
        return judge_due([cluster_id], now)
    inv, situation = _judging_context(now)
    c = inv.clusters.get(cluster_id)
    if c is None:
        return {}
    return apply(judge_clusters([c], situation, now, full=True), situation, now)


def judge_due(cluster_ids, now):
    """The judgement of these clusters' pending alerts at their end of `for`, together: one read of what is pending,
    one inventory and situation, one read of documents per kind and one of open alerts for them all. In each cluster
    only the targets (a node, a backend, the cluster's pass, a channel) whose pending alerts are due are judged, every
    rule of each (a cluster of many open alerts is not judged whole for one of them; a due alert of a target judged
    elsewhere, a mirror rule's or a digest's, judges its cluster whole); a cluster with none due any more (a blip
    dropped, or opened again later: a flapping figure opens one at every poll) is not judged. Either way the next
    judgement of each is scheduled for the earliest pending alert still to come, from the same one read (one already
    past is left to the rounds' sweeps: a node that does not answer keeps its alerts pending, judging it again at once
    would loop; one this judgement drops or holds costs that next judgement one query). The caller has taken the
    clusters out of the due set before (judge_slot, judge_now). Returns apply()'s counts, {} when nothing was due."""
    pending = _pending_times_of(cluster_ids)
    due, later = {}, {}
    for cluster_id, rows in pending.items():
        targets = {target for target, fires_at in rows if fires_at <= now + 1.0}
        if targets:
            due[cluster_id] = targets
        still_to_come = [fires_at for _, fires_at in rows if fires_at > now]
        if still_to_come:
            later[cluster_id] = min(still_to_come)
    counts = {}
    if due:
        inv, situation = _judging_context(now)
        by_targets, whole, only = [], [], set()
        for cluster_id in sorted(due):
            c = inv.clusters.get(cluster_id)
            if c is None:
                continue  # added since the inventory was read: the sweeps promote its due alerts
            if _alone(c, due[cluster_id]):
                by_targets.append(c)
                only |= due[cluster_id]  # targets name their kind and pk: one set serves every cluster
            else:
                whole.append(c)
        passes = judge_clusters(by_targets, situation, now, full=True, only=only) if by_targets else []
        if whole:
            passes += judge_clusters(whole, situation, now, full=True)
        counts = apply(passes, situation, now)
    judge_pending_at(later)
    return counts


def _open(c, o, setting, hold, now, counts, writes):
    since = o.started if o.started is not None and o.started <= now else now
    fires_at = since + setting.for_s
    firing = hold is None and now >= fires_at
    writes.opens.append(
        Alert(
            rule=o.rule,
            cluster_id=c.pk,
            target=o.target,
            subject=o.subject,
            subject_label=o.label[:300],
            node_id=o.node,
            server_id=o.server,
            hostgroup=o.hostgroup,
            operation_id=o.operation,
            severity=setting.severity,
            state=AlertState.FIRING if firing else AlertState.PENDING,
            summary=o.summary,
            value=o.value,
            details={**o.details, "for_s": setting.for_s},
            since=_dt(since),
            fires_at=_dt(max(fires_at, now) if hold else fires_at),
            fired_at=_dt(now) if firing else None,
            last_seen_at=_dt(now),
            held=hold is not None,
            was_held=hold is not None,
            hold_reason=hold.reason if hold else "",
            hold_operation_id=hold.operation_id if hold else None,
            active_key=f"{o.rule}|{o.subject}"[:250],
        )
    )
    counts["opened"] += 1
    if hold:
        counts["held"] += 1
    if firing:
        counts["fired"] += 1
        return [(c.pk, "fired", setting.severity, None)]
    return [] if hold else [(c.pk, "pending", setting.severity, fires_at)]


_summary_written = {}  # {alert pk: when this process last refreshed its summary}


def _update(row, o, setting, hold, now, counts, writes):
    pk = row.id
    values = {}
    out = []
    if row.state == AlertState.PENDING:
        if hold is not None and not row.held:
            values.update(held=True, was_held=True, hold_reason=hold.reason, hold_operation_id=hold.operation_id)
            counts["held"] += 1
        elif hold is None and row.held:
            values.update(held=False, fires_at=max(row.fires_at, _dt(now)))
            counts["released"] += 1
            if values["fires_at"].timestamp() > now:
                out.append((row.cluster_id, "pending", row.severity, values["fires_at"].timestamp()))
        held = values.get("held", row.held)
        fires_at = values.get("fires_at", row.fires_at)
        if not held and now >= fires_at.timestamp():
            if values:
                Alert.objects.filter(pk=pk).update(**values)
            writes.fires.append(pk)
            counts["fired"] += 1
            return out + [(row.cluster_id, "fired", row.severity, pk)]
    if values:
        Alert.objects.filter(pk=pk).update(summary=o.summary, value=o.value, last_seen_at=_dt(now), **values)
    elif o.summary != row.summary and now - _summary_written.get(pk, 0) >= SUMMARY_REFRESH_S:
        # New figures: written at most every SUMMARY_REFRESH_S (the WHERE holds it across processes; the memo spares
        # an UPDATE that matches nothing at every poll of a node with a pending alert whose figures move).
        _summary_written[pk] = now
        Alert.objects.filter(pk=pk, last_seen_at__lt=_dt(now - SUMMARY_REFRESH_S)).update(
            summary=o.summary, value=o.value, last_seen_at=_dt(now)
        )
    return out


def _resolve(row, counts, writes):
    if row.state == AlertState.PENDING and not row.was_held:
        writes.drops.append(row.id)
        return []
    writes.resolves.append(row.id)
    counts["resolved"] += 1
    if row.state == AlertState.FIRING:
        return [(row.cluster_id, "resolved", row.severity, row.id)]
    return []


def forget_caches():
    """Per-process caches (tests roll the database back under them)."""
    context.forget()
    rulesettings.forget()
    _hold_ends_scheduled.clear()
    _summary_written.clear()
