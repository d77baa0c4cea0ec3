"""Synthetic, realistic monitoring history for the LAB cluster, so that a person can read a real report
(manage.py lab_report_history). Everything written here is labelled lab data: operation titles start with
"[lab data]", audit events carry {"lab_data": true} and the actor "lab-history", and one audit event
"lab history generated" records the span, which the report turns into a banner.

The history is written the way the product keeps an older day: as 1-minute rollup rows (raw polls are
kept a day only), computed from simulated polls every 2 s exactly as apps/monitoring/rollups.py would
(worst state, highest queue, average rates). Query digests are written as polls every 5 minutes.

The last day tells a story; the days before it are quieter, and a week back there is a failover:
  02:10  maintenance drain of the third backend, MariaDB restarted (10 min unreachable), rejoin, restore
  09:30  heavy reporting desyncs the second backend; the read-pool rule takes it out, brings it back
  11:00  a deploy makes one query slower (a missing index); a new query appears
  11:20  connection errors on the second backend for 4 minutes (max_connections reached)
  14:05  planned switchover to the second backend (patching the first)
  16:21  the mirror queue of the first ProxySQL fills up for 4 minutes
  19:40  the second ProxySQL's admin interface unreachable for 3 min 10 s
  21:00  drift found on the second ProxySQL (a weight), fixed 12 min later
  22:30  planned switchover back to the first backend
"""

import hashlib
import math
import random
from collections import defaultdict
from datetime import datetime, timezone as dt_timezone

from django.core.exceptions import FieldError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.audit.models import ActorKind, AuditChainHead, AuditEvent
from apps.audit.services import GENESIS, record
from apps.fleet.models import HostgroupMembership
from apps.monitoring.models import MINUTE, BackendSample, PoolSnapshot, ProxySQLSample, worst_status
from apps.monitoring.pool import snapshot as pool_snapshot
from apps.operations.models import Operation, OperationStep

from apps.reports.content import LAB_MARK

LAB = "[lab data]"
ACTOR = "lab-history"
POLL_S = 2.0
THREADS, MIRROR_QUEUE_MAX, MIRROR_CONC_MAX = 4, 32000, 16


def _dt(ts):
    return datetime.fromtimestamp(ts, tz=dt_timezone.utc)


class Story:
    """Episodes (what was wrong, when) over the span, and how each thing looked at any instant."""

    def __init__(self, cluster, start, days, seed=7):
        self.cluster, self.start, self.days = cluster, start, days
        self.end = start + days * 86400  # local days may be 23/25 h: the caller passes exact bounds
        self.rng = random.Random(seed)
        self.servers = sorted(cluster.servers.all(), key=lambda s: (s.hostname, s.port))
        self.nodes = sorted(cluster.proxysql_nodes.all(), key=lambda n: n.name)
        if len(self.servers) < 3 or len(self.nodes) < 1:
            raise ValueError("the lab story needs a cluster with three backends and at least one ProxySQL node")
        self.W, self.R = cluster.writer_hostgroup, cluster.reader_hostgroup
        self.BW = cluster.backup_writer_hostgroup
        writer = (
            HostgroupMembership.objects.filter(server__cluster=cluster, hostgroup_id=self.W)
            .order_by("-weight")
            .select_related("server")
            .first()
        )
        self.s1 = writer.server if writer else self.servers[0]
        others = [s for s in self.servers if s.pk != self.s1.pk]
        self.s2, self.s3 = others[0], others[1]
        self.writers = [(float("-inf"), self.s1.pk)]  # (from, writer server id)
        self.backend_eps = []  # (t0, t1, server id, fields)
        self.pool_eps = []  # (t0, t1, node id or None, hostgroup or None, server id, status)
        self.node_eps = []  # (t0, t1, node id, fields)
        self.err_eps = []  # (t0, t1, hostgroup, server id, errors per second per node)
        self.ops = []  # operation specs
        self.events = []  # audit specs
        self.digest_eps = []  # (t0, t1, digest key, avg multiplier)
        self.new_digests = {}  # digest key -> first time
        self.bounds = set()

    # -- the episodes --------------------------------------------------------------------------------------
    def _b(self, t0, t1, server, **fields):
        self.backend_eps.append((t0, t1, server.pk, fields))
        self.bounds.update((t0, t1))

    def _p(self, t0, t1, server, status, node=None, hostgroup=None):
        self.pool_eps.append((t0, t1, node.pk if node else None, hostgroup, server.pk, status))
        self.bounds.update((t0, t1))

    def _n(self, t0, t1, node, **fields):
        self.node_eps.append((t0, t1, node.pk, fields))
        self.bounds.update((t0, t1))

    def _writer(self, t, server):
        self.writers.append((t, server.pk))
        self.bounds.add(t)

    def plan(self, day_starts):
        last = len(day_starts) - 1
        for i, d in enumerate(day_starts):
            if i == last:
                self.story_day(d)
            elif last - i == 4 and last >= 4:
                self.failover_day(d)
            else:
                self.quiet_day(d, i)

    def quiet_day(self, d, i):
        h = 3600
        # Heavier connection errors than the story day (so the trend reads "fewer"), one desync a day.
        self.err_eps.append((d + 10.5 * h, d + 10.5 * h + 600, self.R, self.s3.pk, 0.35))
        self.err_eps.append((d + 16 * h, d + 16 * h + 300, self.R, self.s2.pk, 0.25))
        t = d + (8 + i % 5) * h + 900
        self._b(t, t + 420, self.s2, local_state=2, desync=True, queue=60)

    def failover_day(self, d):
        h = 3600
        t = d + 3 * h + 12 * 60 + 5.3
        self._b(t, t + 455, self.s1, reachable=False)
        self._b(t + 455, t + 545, self.s1, local_state=1)
        self._writer(t + 2.04, self.s2)
        self.ops.append(
            dict(
                kind="failover",
                at=t + 1.95,
                title=f"Failover {self.cluster.name}: writer {self.s1} → {self.s2}",
                actor="automatic failover",
                old=self.s1,
                new=self.s2,
                steps=[
                    ("move", f"{self.s2} into writer hostgroup {self.W}, {self.s1} out", 9.6),
                    ("verify", "Verify every reachable node's runtime", 6.1),
                    ("inventory", "Record the new writer in the inventory", 3.2),
                ],
            )
        )
        self.err_eps.append((t, t + 3, self.W, self.s1.pk, 4.0))
        t2 = d + 9 * h
        self.switchover(t2, self.s2, self.s1, drain_ms=31.0, actor="lab-operator", why="failback after the crash")

    def story_day(self, d):
        h, m = 3600, 60
        s1, s2, s3 = self.s1, self.s2, self.s3
        # 02:10 maintenance of s3
        t = d + 2 * h + 10 * m
        self.drain(t, s3, back=t + 24 * m + 30)
        self._b(t + 5 * m + 40, t + 15 * m + 40, s3, reachable=False)
        self._b(t + 15 * m + 40, t + 17 * m + 10, s3, local_state=1)
        self._b(t + 17 * m + 10, t + 17 * m + 40, s3, local_state=3)
        # 09:30 reporting desyncs s2; the rule takes it out at 09:41:12, back at 09:52:40
        t = d + 9 * h + 30 * m
        self._b(t, t + 22 * m + 30, s2, local_state=2, desync=True, queue=180, peak=t + 11 * m)
        out, back = t + 11 * m + 12, t + 22 * m + 40
        self._p(out, back, s2, "OFFLINE_SOFT", hostgroup=self.R)
        self.read_pool(
            out, s2, "OFFLINE_SOFT", f"recv queue 142 over max_replication_lag {self.cluster.max_replication_lag}"
        )
        self.read_pool(back, s2, "ONLINE", "recv queue at or under the return mark for 10 s")
        # 11:00 a deploy: one query slower, one new
        self.digest_eps.append((d + 11 * h, d + 24 * h, "orders_by_customer", 3.2))
        self.new_digests["coupon_lookup"] = d + 11 * h
        # 11:20 connection errors on s2 (max_connections)
        self.err_eps.append((d + 11 * h + 20 * m, d + 11 * h + 24 * m, self.R, s2.pk, 0.22))
        # 14:05 planned switchover to s2
        self.switchover(
            d + 14 * h + 5 * m + 7.2, s1, s2, drain_ms=31.6, actor="lab-operator", why="patching the writer"
        )
        # 16:21 mirror queue full on the first ProxySQL
        self._n(d + 16 * h + 19 * m, d + 16 * h + 21 * m + 30, self.nodes[0], mirror=0.55)
        self._n(d + 16 * h + 21 * m + 30, d + 16 * h + 25 * m + 10, self.nodes[0], mirror=0.93, conc=MIRROR_CONC_MAX)
        self._n(d + 16 * h + 25 * m + 10, d + 16 * h + 28 * m, self.nodes[0], mirror=0.35)
        # 19:40 the second ProxySQL's admin interface down
        px2 = self.nodes[-1]
        self._n(d + 19 * h + 40 * m + 5, d + 19 * h + 43 * m + 15, px2, reachable=False)
        # 21:00 drift on the second ProxySQL, fixed at 21:12:30
        what = f"hostgroup {self.R} {s3}: weight 1000 in runtime, 10000 in the inventory"
        self.events.append((d + 21 * h + 0.4, "drift found", px2.name, "failure", {"summary": what}))
        self.events.append(
            (
                d + 21 * h + 12 * m + 30,
                "drift fixed",
                px2.name,
                "success",
                {"summary": f"{what}: runtime set back to the inventory (LOAD MYSQL SERVERS TO RUNTIME)"},
            )
        )
        # 22:30 switch back to s1
        self.switchover(
            d + 22 * h + 30 * m + 2.4, s2, s1, drain_ms=44.2, actor="lab-operator", why="patched writer back"
        )

    def drain(self, t, server, back):
        self._p(t, back, server, "OFFLINE_SOFT")
        steps = [
            ("drain", f"{server} to OFFLINE_SOFT in every hostgroup", 6.2),
            ("wait_drain", f"Wait until {server}'s ConnUsed is 0 on every node", 212.0),
            ("verify", "Verify every node's runtime", 5.4),
            ("save", "Save MYSQL SERVERS to disk on every node", 8.8),
            ("inventory", f"Mark {server} in maintenance", 2.9),
        ]
        self.ops.append(
            dict(
                kind="drain",
                at=t,
                title=f"Drain {server} for maintenance (MariaDB patch)",
                actor="lab-operator",
                steps=steps,
                inventory={"action": "maintenance_on", "server": server.pk, "note": "MariaDB patch"},
            )
        )
        self.ops.append(
            dict(
                kind="restore",
                at=back,
                title=f"Restore {server} from maintenance",
                actor="lab-operator",
                inventory={"action": "maintenance_off", "server": server.pk},
                steps=[
                    ("restore", f"{server} back to its statuses", 7.1),
                    ("verify", "Verify every node's runtime", 5.0),
                    ("save", "Save MYSQL SERVERS to disk on every node", 8.1),
                    ("inventory", f"Take {server} out of maintenance", 2.7),
                ],
            )
        )

    def read_pool(self, t, server, status, why):
        self.ops.append(
            dict(
                kind="read_pool",
                at=t - 0.07,
                inventory={"action": "statuses", "changes": [[server.pk, self.R, status]]},
                title=f"Read pool of {self.cluster.name}: {server} hg {self.R} → {status} ({why})",
                actor="read-pool rules",
                steps=[
                    ("apply", "Set the statuses on every node, load and save", 21.4),
                    ("verify", "Verify every node's runtime", 5.2),
                    ("inventory", "Record the statuses in the inventory", 2.4),
                ],
            )
        )

    def switchover(self, t, old, new, drain_ms, actor, why):
        steps = [
            ("autoinc_off", "Lower mysql-auto_increment_delay_multiplex to 0 for the drain", 2.1),
            ("drain", f"{old} to OFFLINE_SOFT in writer hostgroup {self.W}", 5.8),
            ("wait_drain", f"Wait until {old}'s ConnUsed in hostgroup {self.W} is 0 on every node", drain_ms),
            ("catch_up", f"Wait until {new} has applied everything {old} committed", 7.2),
            ("promote", f"Promote {new}", 4.9),
            ("move", f"{new} into writer hostgroup {self.W}; {old} ONLINE in reader hostgroup {self.R}", 12.4),
            ("verify", "Verify every node's runtime equals the plan", 9.3),
            ("save", "Save MYSQL SERVERS to disk on every node", 10.8),
            ("autoinc_restore", "Restore mysql-auto_increment_delay_multiplex", 2.6),
            ("inventory", "Record the new writer in the inventory", 3.9),
        ]
        self.ops.append(
            dict(
                kind="switchover",
                at=t,
                title=f"Switchover {self.cluster.name}: writer {old} → {new} ({why})",
                actor=actor,
                old=old,
                new=new,
                steps=steps,
            )
        )
        self._writer(t + 0.08, new)

    # -- the state at an instant ---------------------------------------------------------------------------
    def writer_at(self, t):
        current = self.writers[0][1]
        for since, sid in sorted(self.writers, key=lambda x: x[0]):
            if since <= t:
                current = sid
        return current

    def backend_at(self, sid, t):
        out = {
            "reachable": True,
            "local_state": 4,
            "primary": True,
            "ready": True,
            "cluster_size": 3,
            "recv_queue": self.rng.choice((0, 0, 0, 1, 2)),
            "desync": False,
            "flow_control_paused": 0.0,
        }
        for t0, t1, s, f in self.backend_eps:
            if s == sid and t0 <= t < t1:
                if f.get("reachable") is False:
                    return {
                        **out,
                        "reachable": False,
                        "local_state": None,
                        "primary": None,
                        "ready": None,
                        "cluster_size": None,
                        "recv_queue": None,
                        "desync": None,
                        "flow_control_paused": None,
                    }
                if "local_state" in f:
                    out["local_state"] = f["local_state"]
                    out["ready"] = f["local_state"] == 4 or f["local_state"] == 2
                if f.get("desync"):
                    out["desync"] = True
                    peak = f.get("peak", (t0 + t1) / 2)
                    shape = 1 - abs(t - peak) / max(peak - t0, t1 - peak)
                    out["recv_queue"] = int(f.get("queue", 50) * max(0.05, shape) * self.rng.uniform(0.85, 1.1))
        for t0, t1, s, f in self.backend_eps:
            if s != sid and t0 <= t < t1 and f.get("reachable") is False:
                out["cluster_size"] = 2
        return out

    def node_at(self, nid, t):
        out = {"reachable": True, "mirror": 0.01 * self.rng.random(), "conc": self.rng.randint(1, 6)}
        for t0, t1, n, f in self.node_eps:
            if n == nid and t0 <= t < t1:
                if f.get("reachable") is False:
                    return {"reachable": False}
                if "mirror" in f:
                    out["mirror"] = f["mirror"] * self.rng.uniform(0.94, 1.04)
                if "conc" in f:
                    out["conc"] = f["conc"]
        return out

    def pool_at(self, nid, t):
        """[(hostgroup, server id, status)] as this ProxySQL's pool holds them at t."""
        writer = self.writer_at(t)
        rows = [(self.W, writer)] + [(self.R, s.pk) for s in self.servers]
        if self.BW is not None:
            rows += [(self.BW, s.pk) for s in self.servers if s.pk != writer]
        out = []
        for hg, sid in rows:
            status = "ONLINE"
            for t0, t1, n, h, s, st in self.pool_eps:
                if s == sid and t0 <= t < t1 and (n is None or n == nid) and (h is None or h == hg):
                    status = st
            out.append((hg, sid, status))
        return out

    # -- traffic ---------------------------------------------------------------------------------------------
    def qps(self, t, node_index):
        local = timezone.localtime(_dt(t))
        hour = local.hour + local.minute / 60
        weekend = 0.6 if local.weekday() >= 5 else 1.0
        day = max(0.0, math.sin(math.pi * (hour - 6) / 17)) if 6 <= hour <= 23 else 0.0
        share = 0.55 if node_index == 0 else 0.45
        return share * weekend * (700 + 3600 * day**1.4) * self.rng.uniform(0.96, 1.04)

    def conn_err(self, t, hg, sid):
        rate = 0.0006 if self.rng.random() < 0.35 else 0.0
        for t0, t1, h, s, r in self.err_eps:
            if h == hg and s == sid and t0 <= t < t1:
                rate += r
        return rate


def _minute_polls(story, m):
    """The poll instants of one minute: every 2 s where something changes inside it, else the middle."""
    if any(m <= b < m + 60 for b in story.bounds):
        return [m + 1 + POLL_S * k for k in range(30)]
    return [m + 30]


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _min(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def minute_rows(story):
    """(backend rows, proxysql rows, pool rows): one per thing per minute, aggregated like the rollups."""
    backend, proxysql, pool = [], [], []
    endpoint = {s.pk: (s.hostname, s.port) for s in story.servers}
    m = story.start
    while m < story.end:
        polls = _minute_polls(story, m)
        ts = _dt(m)
        for s in story.servers:
            states = [story.backend_at(s.pk, t) for t in polls]
            backend.append(
                BackendSample(
                    server_id=s.pk,
                    ts=ts,
                    resolution=MINUTE,
                    reachable=all(x["reachable"] for x in states),
                    local_state=_min(x["local_state"] for x in states),
                    primary=_min(x["primary"] for x in states),
                    ready=_min(x["ready"] for x in states),
                    cluster_size=_mean(x["cluster_size"] for x in states),
                    recv_queue=_max(x["recv_queue"] for x in states),
                    desync=_max(x["desync"] for x in states),
                    flow_control_paused=_mean(x["flow_control_paused"] for x in states),
                    reject_queries=False,
                    read_only=False,
                )
            )
        for i, n in enumerate(story.nodes):
            states = [story.node_at(n.pk, t) for t in polls]
            up = [t for t, x in zip(polls, states) if x["reachable"]]
            rows = defaultdict(list)
            for t in up:
                for hg, sid, st in story.pool_at(n.pk, t):
                    rows[(hg, sid)].append((t, st))
            qps = story.qps(m + 30, i) if up else None
            writer = story.writer_at(m + 30)
            errs_total = 0.0
            servers = []
            for (hg, sid), seen in rows.items():
                host, port = endpoint[sid]
                err = story.conn_err(m + 30, hg, sid)
                errs_total += err
                reads = hg == story.R
                q = (qps * (0.3 if hg == story.W else (0.7 / 3 if reads else 0.0))) if qps else None
                servers.append(
                    {
                        "hostgroup": hg,
                        "srv_host": host,
                        "srv_port": port,
                        "status": worst_status(st for _, st in seen),
                        "conn_used": 2.0 if hg == story.W else 1.0,
                        "conn_free": 6.0,
                        "conn_err_ps": round(err, 6),
                        "queries_ps": q,
                        "bytes_sent_ps": q * 180 if q else None,
                        "bytes_recv_ps": q * 900 if q else None,
                        "latency_us": 420.0 if sid != writer else 380.0,
                    }
                )
            if servers:
                pool.append(pool_snapshot(n.pk, ts, servers, MINUTE))
            mirror = [x.get("mirror") for x in states if x["reachable"]]
            conc = [x.get("conc") for x in states if x["reachable"]]
            proxysql.append(
                ProxySQLSample(
                    node_id=n.pk,
                    ts=ts,
                    resolution=MINUTE,
                    reachable=len(up) == len(polls),
                    questions_ps=qps,
                    slow_queries_ps=0.01 if qps else None,
                    prepared_ps=qps * 0.1 if qps else None,
                    client_connections_connected=40.0 if qps else None,
                    client_connections_created_ps=0.5 if qps else None,
                    client_connections_aborted_ps=0.0 if qps else None,
                    server_connections_connected=24.0 if qps else None,
                    server_connections_aborted_ps=0.0 if qps else None,
                    active_transactions=3.0 if qps else None,
                    conn_used=7.0 if qps else None,
                    conn_free=30.0 if qps else None,
                    conn_err_ps=round(errs_total, 6) if up else None,
                    mirror_concurrency=_mean(conc) if conc else None,
                    mirror_queue_length=(int(max(mirror) * MIRROR_QUEUE_MAX * THREADS) if mirror else None),
                    mirror_max_concurrency=MIRROR_CONC_MAX if up else None,
                    mirror_max_queue_length=MIRROR_QUEUE_MAX if up else None,
                    mysql_threads=THREADS if up else None,
                )
            )
        m += 60
    return backend, proxysql, pool


# -- operations and audit ----------------------------------------------------------------------------------
def _append_event(created_at, action, *, cluster, target="", **kwargs):
    """Append once: a rerun (--replace) does not repeat an event already in the (append-only) log."""
    if AuditEvent.objects.filter(
        cluster_id=cluster.pk, action=action, created_at=created_at, target=target[:300]
    ).exists():
        return None
    return _append(created_at, action, cluster=cluster, target=target, **kwargs)


def _append(
    created_at,
    action,
    *,
    cluster,
    target="",
    outcome="success",
    details=None,
    actor=ACTOR,
    kind=ActorKind.SYSTEM,
    duration_ms=None,
):
    """An audit event dated in the past (lab history only), chained exactly like services.record()."""
    with transaction.atomic():
        head, _ = AuditChainHead.objects.select_for_update().get_or_create(id=1, defaults={"last_hash": GENESIS})
        event = AuditEvent(
            created_at=created_at,
            actor=actor,
            actor_kind=kind,
            cluster_id=cluster.pk,
            cluster_name=cluster.name,
            target=target[:300],
            action=action,
            outcome=outcome,
            details={**(details or {}), "lab_data": True},
            duration_ms=duration_ms,
            prev_hash=head.last_hash,
        )
        import json

        from django.core.serializers.json import DjangoJSONEncoder

        event.details = json.loads(json.dumps(event.details, cls=DjangoJSONEncoder))
        event.hash = event.compute_hash()
        event.save()
        AuditChainHead.objects.filter(id=1).update(last_hash=event.hash)
    return event


def write_operations(story):
    written = 0
    for spec in sorted(story.ops, key=lambda o: o["at"]):
        start = spec["at"]
        steps, t, rows = [], start, []
        gap = 0.0021
        for i, (key, title, ms) in enumerate(spec["steps"]):
            a, b = t, t + ms / 1000
            rows.append((i, key, title, a, b, ms))
            steps.append(
                {
                    "key": key,
                    "title": title,
                    "kind": "proxysql",
                    "nodes": {},
                    "params": {},
                    "point_of_no_return": key == "save",
                }
            )
            t = b + gap
        timings = {key: ms for _, key, _, _, _, ms in rows}
        total = round((t - gap - start) * 1000, 2)
        waited = sum(timings.get(k, 0) for k in ("wait_drain", "catch_up"))
        timings.update(total_ms=total, waiting_ms=round(waited, 2), overhead_ms=round(total - waited, 2))
        options = {}
        if spec.get("old"):
            options = {"old_writer": spec["old"].pk, "new_writer": spec["new"].pk, "old_writer_to": "reader"}
        plan = {
            "kind": spec["kind"],
            "cluster_id": story.cluster.pk,
            "title": spec["title"],
            "guards": [],
            "steps": steps,
            "facts": {"lab_data": True},
            "options": options,
        }
        if spec["kind"] == "failover":
            plan["steps"][-1]["params"] = {"old": spec["old"].pk, "new": spec["new"].pk, "old_writer_to": "none"}
        if spec.get("inventory"):
            plan["steps"][-1]["params"] = spec["inventory"]
        op = Operation.objects.create(
            cluster=story.cluster,
            kind=spec["kind"],
            state="done",
            title=f"{LAB} {spec['title']}"[:300],
            actor=spec["actor"],
            plan=plan,
            started_at=_dt(start),
            finished_at=_dt(t - gap),
            heartbeat_at=_dt(t - gap),
            point_of_no_return=True,
            timings=timings,
        )
        OperationStep.objects.bulk_create(
            [
                OperationStep(
                    operation=op,
                    index=i,
                    key=key,
                    title=title,
                    state="done",
                    started_at=_dt(a),
                    finished_at=_dt(b),
                    duration_ms=ms,
                )
                for i, key, title, a, b, ms in rows
            ]
        )
        is_rule = spec["kind"] in ("read_pool", "failover")
        _append_event(
            _dt(t),
            f"{spec['kind']} done",
            cluster=story.cluster,
            target=op.title,
            actor=spec["actor"],
            kind=ActorKind.RULE if is_rule else ActorKind.USER,
            duration_ms=total,
            details={"operation": op.pk, "state": "done", "timings": timings},
        )
        written += 1
    return written


def write_events(story):
    for at, action, target, outcome, details in sorted(story.events, key=lambda e: e[0]):
        _append_event(
            _dt(at),
            action,
            cluster=story.cluster,
            target=target,
            outcome=outcome,
            details=details,
            actor="lab-operator" if "fixed" in action else ACTOR,
        )
    return len(story.events)


# -- query digests -------------------------------------------------------------------------------------------
DIGESTS = {
    # key: (text, hostgroup role, share of queries, average ms)
    "orders_by_customer": (
        "SELECT id,status,total,created_at FROM orders WHERE customer_id=? ORDER BY created_at DESC LIMIT ?",
        "reader",
        0.16,
        1.1,
    ),
    "product_by_id": ("SELECT * FROM products WHERE id=?", "reader", 0.24, 0.21),
    "cart_items": (
        "SELECT ci.product_id,ci.qty,p.price FROM cart_items ci JOIN products p ON p.id=ci.product_id WHERE ci.cart_id=?",
        "reader",
        0.14,
        0.62,
    ),
    "session_touch": ("UPDATE sessions SET last_seen=? WHERE id=?", "writer", 0.12, 0.35),
    "order_insert": ("INSERT INTO orders (customer_id,status,total,created_at) VALUES (?,?,?,?)", "writer", 0.03, 1.9),
    "order_items_insert": (
        "INSERT INTO order_items (order_id,product_id,qty,price) VALUES (?,?,?,?)",
        "writer",
        0.06,
        0.8,
    ),
    "stock_decrement": ("UPDATE stock SET qty=qty-? WHERE product_id=? AND qty>=?", "writer", 0.05, 0.9),
    "search_products": (
        "SELECT id,name,price FROM products WHERE MATCH(name,description) AGAINST(? IN BOOLEAN MODE) LIMIT ?",
        "reader",
        0.04,
        6.5,
    ),
    "daily_sales_report": (
        "SELECT DATE(created_at),COUNT(*),SUM(total) FROM orders WHERE created_at>=? GROUP BY DATE(created_at)",
        "reader",
        0.0,
        950.0,
    ),
    "customer_by_email": ("SELECT id,name,password_hash FROM customers WHERE email=?", "reader", 0.05, 0.3),
    "coupon_lookup": ("SELECT discount,valid_until FROM coupons WHERE code=? AND active=?", "reader", 0.02, 0.4),
}


def write_digests(story, step_s=300):
    try:
        return _write_digests(story, step_s)
    except (ImportError, TypeError, ValueError, LookupError, FieldError) as exc:  # the digest models may differ
        return f"skipped ({type(exc).__name__}: {exc})"


def _write_digests(story, step_s):
    """Digest deltas every `step_s` per node, following the traffic, written as raw digest polls (and, where
    the digest rollups already passed this span, as their rollup rows too). Returns rows written, or a
    reason it was skipped."""
    from apps.digests import models as dm
    from apps.digests.services import rolled_until

    hash_of = {k: "0x" + hashlib.sha256(f"lab:{k}".encode()).hexdigest()[:16].upper() for k in DIGESTS}
    first_ts = int(story.start)
    digests = {}
    for key, (text, _, _, _) in DIGESTS.items():
        names = {f.name for f in dm.Digest._meta.get_fields()}
        text_field = "digest_text" if "digest_text" in names else "text"
        d, _ = dm.Digest.objects.get_or_create(
            digest=hash_of[key], defaults={text_field: text, "first_polled_at": first_ts}
        )
        digests[key] = d.pk
    sources = {}
    for n in story.nodes:
        for role, hg in (("writer", story.W), ("reader", story.R)):
            src, _ = dm.DigestSource.objects.get_or_create(
                node_id=n.pk, hostgroup=hg, schemaname="shop", username="app", client_address=""
            )
            sources[(n.pk, role)] = src.pk
    stats, polls = [], []
    t = int(story.start // step_s * step_s)
    while t < story.end:
        for i, n in enumerate(story.nodes):
            if not story.node_at(n.pk, t + step_s / 2)["reachable"]:
                polls.append(dm.DigestPoll(resolution=0, ts=t, node_id=n.pk, polls_ok=0, polls_failed=1))
                continue
            queries = story.qps(t + step_s / 2, i) * step_s
            rows = 0
            for key, (text, role, share, avg_ms) in DIGESTS.items():
                if key in story.new_digests and t < story.new_digests[key]:
                    continue
                mult = 1.0
                for t0, t1, k, factor in story.digest_eps:
                    if k == key and t0 <= t < t1:
                        mult = factor
                count = max(0, int(queries * share * story.rng.uniform(0.9, 1.1)))
                if count == 0 and share == 0.0:  # a report run a few dozen times a day
                    count = 1 if story.rng.random() < 0.12 else 0
                if count == 0:
                    continue
                avg_us = avg_ms * 1000 * mult * story.rng.uniform(0.9, 1.12)
                stats.append(
                    dm.DigestStat(
                        resolution=0,
                        ts=t,
                        source_id=sources[(n.pk, role)],
                        digest_id=digests[key],
                        count_star=count,
                        sum_time=int(avg_us * count),
                        min_time=int(avg_us * 0.3),
                        max_time=int(avg_us * (4 if count > 1 else 1)),
                    )
                )
                rows += 1
            polls.append(dm.DigestPoll(resolution=0, ts=t, node_id=n.pk, polls_ok=1, stat_rows=rows, interval_s=step_s))
        t += step_s
    marks = rolled_until()
    for level in dm.LEVELS:  # buckets the digest rollups consider done already: write them here
        done = marks.get(level)
        if not done:
            continue
        agg, pagg = {}, {}
        for s in stats:
            if s.resolution != 0:
                continue
            b = s.ts // level * level
            if b + level > done:
                continue
            k = (b, s.source_id, s.digest_id)
            a = agg.setdefault(k, [0, 0, None, None])
            a[0] += s.count_star
            a[1] += s.sum_time
            a[2] = s.min_time if a[2] is None else min(a[2], s.min_time)
            a[3] = s.max_time if a[3] is None else max(a[3], s.max_time)
        for p in polls:
            if p.resolution != 0:
                continue
            b = p.ts // level * level
            if b + level > done:
                continue
            a = pagg.setdefault((b, p.node_id), [0, 0, 0, 0.0])
            a[0] += p.polls_ok
            a[1] += p.polls_failed
            a[2] += p.stat_rows
            a[3] += p.interval_s
        stats += [
            dm.DigestStat(
                resolution=level,
                ts=b,
                source_id=src,
                digest_id=dig,
                count_star=c,
                sum_time=s_,
                min_time=mn,
                max_time=mx,
            )
            for (b, src, dig), (c, s_, mn, mx) in agg.items()
        ]
        polls += [
            dm.DigestPoll(
                resolution=level, ts=b, node_id=nid, polls_ok=ok, polls_failed=bad, stat_rows=r, interval_s=iv
            )
            for (b, nid), (ok, bad, r, iv) in pagg.items()
        ]
    dm.DigestStat.objects.bulk_create(stats, batch_size=2000)
    dm.DigestPoll.objects.bulk_create(polls, batch_size=2000)
    return len(stats)


def clear(cluster, start, end):
    """Remove the cluster's samples (and lab operations) in [start, end) before writing new history."""
    nodes = list(cluster.proxysql_nodes.values_list("pk", flat=True))
    servers = list(cluster.servers.values_list("pk", flat=True))
    span = {"ts__gte": _dt(start), "ts__lt": _dt(end)}
    BackendSample.objects.filter(server_id__in=servers, **span).delete()
    ProxySQLSample.objects.filter(node_id__in=nodes, **span).delete()
    PoolSnapshot.objects.filter(node_id__in=nodes, **span).delete()
    Operation.objects.filter(
        cluster=cluster, title__startswith=LAB, started_at__gte=_dt(start), started_at__lt=_dt(end)
    ).delete()
    try:
        from apps.digests import models as dm

        dm.DigestStat.objects.filter(source__node_id__in=nodes, ts__gte=int(start), ts__lt=int(end)).delete()
        dm.DigestPoll.objects.filter(node_id__in=nodes, ts__gte=int(start), ts__lt=int(end)).delete()
    except ImportError:
        pass


def existing(cluster, start, end):
    nodes = list(cluster.proxysql_nodes.values_list("pk", flat=True))
    servers = list(cluster.servers.values_list("pk", flat=True))
    span = Q(ts__gte=_dt(start), ts__lt=_dt(end))
    return (
        BackendSample.objects.filter(span, server_id__in=servers).count()
        + ProxySQLSample.objects.filter(span, node_id__in=nodes).count()
    )


def generate(cluster, day_starts, end, seed=7):
    """Write the story over the local days starting at `day_starts` (epoch seconds) up to `end`."""
    story = Story(cluster, day_starts[0], len(day_starts), seed)
    story.end = end
    story.plan(day_starts)
    backend, proxysql, pool = minute_rows(story)
    with transaction.atomic():
        BackendSample.objects.bulk_create(backend, batch_size=2000)
        ProxySQLSample.objects.bulk_create(proxysql, batch_size=2000)
        PoolSnapshot.objects.bulk_create(pool, batch_size=2000)
    ops = write_operations(story)
    events = write_events(story)
    digests = write_digests(story)
    record(
        LAB_MARK,
        rule="lab_report_history",
        cluster=cluster,
        target=cluster.name,
        details={
            "start": story.start,
            "end": end,
            "lab_data": True,
            "seed": seed,
            "rows": {"backend": len(backend), "proxysql": len(proxysql), "pool": len(pool)},
            "operations": ops,
            "events": events,
            "digests": digests,
        },
    )
    return {
        "backend": len(backend),
        "proxysql": len(proxysql),
        "pool": len(pool),
        "operations": ops,
        "events": events,
        "digests": digests,
    }
