"""What a report says, as data: one section per cluster (availability, writer changes, read-pool actions,
connection errors, query digests, mirror saturation, drift, ProxySQL reachability), a fleet section, and
the summary a manager reads first. Reads only the database; everything returned is JSON.

Definitions (also printed in the report's notes):
- a backend is *Synced* (or up, off Galera), *Desynced* (wsrep state 2: still serving reads), *out*
  (reachable but not serving: Joining/Joined, not Primary, not ready, or not ONLINE in any writer/reader
  hostgroup on any ProxySQL node) or *unreachable* (the poll failed). Its availability is Synced + Desynced
  over the time observed.
- a hostgroup has *all* its servers ONLINE and usable, a *reduced* set, or *none* on at least one
  reachable ProxySQL node. "None" in the writer hostgroup is a writer interruption.
- the cluster's service is *available* while at least one ProxySQL node answers and neither the writer
  nor the reader hostgroup has none on any reachable node.
- those figures are sampled by the polls (a poll that saw a hostgroup empty counts until the next poll),
  except where an operation measured the interruption itself: a sampled stretch inside an operation's
  window counts that window instead (measured.py), and the report says which is which.
"""
from collections import defaultdict

from django.db.models import Prefetch

from apps.audit.models import AuditEvent
from apps.audit.services import count_with_repeats
from apps.fleet.models import HostgroupMembership
from apps.monitoring import status
from apps.operations.choices import OperationKind, OperationState
from apps.operations.models import Operation, OperationStep

from apps.monitoring.models import HOUR

from apps.alerts import report as alerts_report
from apps.dr import report as dr_report

from . import fmt, history, measured
from . import timeline as tl
from .history import B, L, P, as_dt

SYNCED, DESYNCED, OUT, UNREACHABLE = "synced", "desynced", "out", "unreachable"
BACKEND_CATS = (SYNCED, DESYNCED, OUT, UNREACHABLE)
ALL, REDUCED, NONE = "all", "reduced", "none"
HOSTGROUP_CATS = (ALL, REDUCED, NONE)
UP, DOWN = "up", "down"
REACHABLE = "reachable"
ROLE_LABELS = {"writer": "writer", "reader": "reader", "backup_writer": "backup writer", "offline": "offline"}
SERVING_ROLES = ("writer", "reader")
MAX_STRETCHES = 30
LAB_MARK = "lab history generated"  # audit action written by manage.py lab_report_history
DIGEST_TOP = 10
DIGEST_SLOWER = 1.5     # average time up by half or more...
DIGEST_SLOWER_MS = 0.2  # ...and by at least this much...
DIGEST_MIN_COUNT = 100  # ...over at least this many executions in both periods


def _down(v):
    return v[0] == DOWN


def _held(v):
    """Down for want of a usable server: what an operation's measured window can explain."""
    return v[0] == DOWN and v[1].startswith("no usable")


def _none(v):
    return v[0] == NONE


def _truthy(v):
    return v is not None and bool(v)


def _falsy(v):
    return v is not None and not bool(v)


def backend_state(row):
    """(category, why) of one backend sample row."""
    if not _truthy(row[B["reachable"]]):
        return (UNREACHABLE, "the poll failed")
    if _falsy(row[B["primary"]]):
        return (OUT, "not in the Primary component")
    local = row[B["local_state"]]
    if local is not None and local not in (2, 4):
        return (OUT, status.WSREP_STATES.get(local, f"wsrep state {local}"))
    if _falsy(row[B["ready"]]):
        return (OUT, "wsrep_ready OFF")
    if local == 2:
        return (DESYNCED, "Donor/Desynced")
    return (SYNCED, "")


def _stretch_list(timeline, want, reason_of=None, join_gap=0.0):
    out = []
    for a, b in tl.stretches(timeline, want, join_gap):
        reasons = []
        if reason_of:
            for sa, sb, v in timeline:
                if sb > a and sa < b and want(v):
                    r = reason_of(v)
                    if r and r not in reasons:
                        reasons.append(r)
        out.append({"start": a, "end": b, "seconds": round(b - a, 3), "why": ", ".join(reasons)})
    return out


def _top_stretches(stretches):
    """Chronological, but the longest kept when there are too many to list."""
    if len(stretches) <= MAX_STRETCHES:
        return stretches, 0
    kept = sorted(sorted(stretches, key=lambda s: -s["seconds"])[:MAX_STRETCHES], key=lambda s: s["start"])
    return kept, len(stretches) - MAX_STRETCHES


def _avail(durations, good, observed):
    return round(100.0 * sum(durations.get(k, 0.0) for k in good) / observed, 6) if observed else None


def _json_timeline(timeline, key=lambda v: v):
    return [[round(a, 3), round(b, 3), v] for a, b, v in tl.mapped(timeline, key)]


class ClusterSection:
    """Builds the section of one cluster for [start, end) (epoch seconds), with `prev` the period before."""

    def __init__(self, cluster, start, end, prev_start, prev_end, bucket_s, before_words="the period before",
                 hourly_only=False):
        self.before_words = before_words
        self.cluster, self.start, self.end = cluster, start, end
        self.prev_start, self.prev_end, self.bucket_s = prev_start, prev_end, bucket_s
        self.hourly_only = hourly_only  # a fleet report's first pass (history.load)
        self.h = history.load(cluster, start, end, hourly_only)
        self.servers = {s.pk: s for s in cluster.servers.all()}
        self.by_endpoint = {(s.hostname, s.port): s.pk for s in self.servers.values()}
        self.nodes = {n.pk: n for n in cluster.proxysql_nodes.all()}
        # A ProxySQL that serves other clusters too: its queries and mirror figures are node-wide (the pool's
        # connection errors are this cluster's hostgroups only: the poller scopes them).
        self.also_serves = {pk: [o.cluster.name for o in n.shares_with()] for pk, n in self.nodes.items()}
        self.shared_with = sorted({name for names in self.also_serves.values() for name in names})
        self.roles = cluster.hostgroup_roles()

    # -- availability ---------------------------------------------------------------------------------
    def backend_timelines(self):
        """{server id: [(a, b, (category, why))]}, the pool's view folded in."""
        state = {sid: tl.from_coverage(segs, backend_state) for sid, segs in self.h.backends.items()}
        serving = {hg for hg, role in self.roles.items() if role in SERVING_ROLES}
        per_server = defaultdict(list)  # server id -> [per node timeline of "ONLINE in a serving hostgroup"]
        per_node_server = defaultdict(list)
        for (node_id, hg, host, port), segs in self.h.pool.items():
            sid = self.by_endpoint.get((host, port))
            if sid is None or hg not in serving:
                continue
            per_node_server[(node_id, sid)].append(tl.from_coverage(segs, lambda r: r[L["status"]] == "ONLINE"))
        for (node_id, sid), tls in per_node_server.items():
            per_server[sid].append(tl.combine(lambda vs: None if all(v is None for v in vs) else any(vs), tls))
        in_pool = {sid: tl.combine(lambda vs: None if all(v is None for v in vs) else any(v for v in vs if v), tls)
                   for sid, tls in per_server.items()}
        out = {}
        for sid in self.servers:
            st, pool = state.get(sid, []), in_pool.get(sid, [])

            def fold(vs):
                s, p = vs
                if s is None:
                    return None
                if s[0] in (SYNCED, DESYNCED) and p is False:
                    return (OUT, "not ONLINE in a writer or reader hostgroup")
                return s
            out[sid] = tl.combine(fold, [st, pool])
        self._state_only = state
        return out

    def hostgroup_timelines(self):
        """{hostgroup: [(a, b, (category, nodes without a usable server))]} over the cluster's hostgroups."""
        usable = {sid: tl.mapped(t, lambda v: v[0] in (SYNCED, DESYNCED)) for sid, t in self._state_only.items()}
        per_node = defaultdict(list)  # (hostgroup, node) -> member timelines of "ONLINE and usable"
        for (node_id, hg, host, port), segs in self.h.pool.items():
            if hg not in self.roles:
                continue
            online = tl.from_coverage(segs, lambda r: r[L["status"]] == "ONLINE")
            sid = self.by_endpoint.get((host, port))
            good = tl.combine(lambda vs: None if vs[0] is None else bool(vs[0] and vs[1] is not False),
                              [online, usable.get(sid, [])])
            per_node[(hg, node_id)].append(good)
        counted = defaultdict(list)
        for (hg, node_id), members in per_node.items():
            def count(vs, node_id=node_id):
                present = [v for v in vs if v is not None]
                return (node_id, sum(present), len(present)) if present else None
            counted[hg].append(tl.combine(count, members))
        out = {}
        for hg in self.roles:
            def worst(vs):
                present = [v for v in vs if v is not None]
                if not present:
                    return None
                empty = tuple(sorted(self.nodes[n].name for n, good, _ in present if good == 0 and n in self.nodes))
                if any(good == 0 for _, good, _ in present):
                    return (NONE, empty)
                if all(good == total for _, good, total in present):
                    return (ALL, ())
                return (REDUCED, ())
            out[hg] = tl.combine(worst, counted.get(hg, []))
        return out

    def proxysql_timelines(self):
        return {nid: tl.from_coverage(segs, lambda r: REACHABLE if _truthy(r[P["reachable"]]) else UNREACHABLE)
                for nid, segs in self.h.proxysql.items()}

    def service_timeline(self, hostgroups, proxysql):
        writer, reader = hostgroups.get(self.cluster.writer_hostgroup, []), hostgroups.get(self.cluster.reader_hostgroup, [])
        any_px = tl.combine(lambda vs: None if all(v is None for v in vs) else any(v == REACHABLE for v in vs),
                            list(proxysql.values()))

        def service(vs):
            w, r, px = vs
            if px is False:
                return (DOWN, "no ProxySQL node answered")
            if w is None and r is None:
                return None
            if w is not None and w[0] == NONE:
                return (DOWN, "no usable ONLINE writer" + (f" on {', '.join(w[1])}" if w[1] else ""))
            if r is not None and r[0] == NONE:
                return (DOWN, "no usable ONLINE reader" + (f" on {', '.join(r[1])}" if r[1] else ""))
            return (UP, "")
        return tl.combine(service, [writer, reader, any_px])

    # -- sampled and measured -------------------------------------------------------------------------
    def _sample_s(self, t):
        """(seconds one sample at t stands for at most, whether it is a rollup bucket)."""
        resolution = history.resolution_at(t, self.h.backend_pieces, self.h.pool_pieces)
        return (resolution, True) if resolution else (self.h.max_gap, False)

    def measured_windows(self):
        """Finished operations around the period, as measured.Window (an operation begun just before the
        period may explain its first moments)."""
        ops = (Operation.objects.filter(cluster=self.cluster, started_at__gte=as_dt(self.start - HOUR),
                                        started_at__lt=as_dt(self.end))
               .prefetch_related(Prefetch("steps", queryset=OperationStep.objects.order_by("index"))))
        return measured.windows(ops, self.cluster.failover_after_polls, self.h.interval)

    def _measured(self, timeline, is_bad):
        return measured.apply(timeline, is_bad, self.found, self._sample_s, (self.start, self.end))

    def _sourced(self, stretches, timeline, is_bad):
        """Each stretch with how much of it an operation measured (and which) and how much the polls sampled."""
        bad = [seg for seg in timeline if is_bad(seg[2])]
        by_id = {w.op_id: w for w in self.found}
        for x in stretches:
            m, smp, ops = measured.split(bad, x["start"], x["end"])
            x.update(measured_s=round(m, 3), sampled_s=round(smp, 3),
                     measured_by=[by_id[o].describe() for o in ops if o in by_id])
        return stretches

    # -- the section ----------------------------------------------------------------------------------
    def build(self):
        c = self.cluster
        period_s = self.end - self.start
        self.found = self.measured_windows()
        backends_tl = self.backend_timelines()
        sampled_hostgroups_tl = self.hostgroup_timelines()
        hostgroups_tl = {hg: self._measured(t, _none) for hg, t in sampled_hostgroups_tl.items()}
        proxysql_tl = self.proxysql_timelines()
        service_tl = self._measured(self.service_timeline(sampled_hostgroups_tl, proxysql_tl), _held)
        observed = tl.covered(service_tl)
        sd = tl.durations(service_tl, key=lambda v: v[0])
        down_stretches, more = _top_stretches(self._sourced(_stretch_list(service_tl, _down, lambda v: v[1]),
                                                            service_tl, _down))
        measured_s, sampled_s, measured_ops = measured.split([seg for seg in service_tl if _down(seg[2])],
                                                             self.start, self.end)
        section = {
            "id": c.pk, "name": c.name, "kind": c.get_kind_display(), "url": c.get_absolute_url(),
            "writer_hostgroup": c.writer_hostgroup, "reader_hostgroup": c.reader_hostgroup,
            "coverage": {"period_s": period_s, "observed_s": round(observed, 3), "hourly_only": self.hourly_only,
                         "resolutions": {history.RESOLUTION_NAMES[r]: round(s, 1) for r, s in sorted(
                             history.resolutions_used(self.h.backend_pieces).items())},
                         "interval_s": self.h.interval},
            "service": {"availability": _avail(sd, [UP], observed), "down_s": round(sd.get(DOWN, 0.0), 3),
                        "measured_s": round(measured_s, 3), "sampled_s": round(sampled_s, 3),
                        "measured_ops": len(measured_ops), "interval_s": self.h.interval,
                        "stretches": down_stretches, "more_stretches": more,
                        "timeline": _json_timeline(service_tl, key=lambda v: v[0])},
        }
        ops = list(Operation.objects.filter(cluster=c, started_at__gte=as_dt(self.start), started_at__lt=as_dt(self.end))
                   .prefetch_related(Prefetch("steps", queryset=OperationStep.objects.order_by("index")))
                   .order_by("started_at"))
        self.windows = _windows(ops, self.start, self.end)
        section["backends"] = self._backends(backends_tl)
        section["hostgroups"] = self._hostgroups(hostgroups_tl)
        section["proxysql"] = self._proxysql(proxysql_tl)
        section["operations"] = [self._operation(op) for op in ops]
        section["writer_changes"] = self._writer_changes(ops, backends_tl, sampled_hostgroups_tl)
        section["read_pool"] = self._read_pool(ops)
        section["conn_err"], section["traffic"] = self._conn_err_and_traffic()
        section["mirror"] = self._mirror()
        section["drift"] = self._drift()
        section["digests"] = digest_section(self.start, self.end, self.prev_start, self.prev_end, cluster_id=c.pk)
        section["alerts"] = alerts_report.section(c.pk, self.start, self.end)
        section["dr_channels"] = dr_report.section(c.pk, self.start, self.end)
        section["lab_data"] = _lab_marked(c.pk, self.start, self.end)
        section["summary"] = cluster_summary(section, before=self.before_words)
        return section

    def _backends(self, timelines):
        members = defaultdict(list)
        for m in HostgroupMembership.objects.filter(server__cluster=self.cluster).order_by("hostgroup_id"):
            members[m.server_id].append(m.hostgroup_id)
        out = []
        for sid, server in sorted(self.servers.items(), key=lambda kv: (kv[1].hostname, kv[1].port)):
            t = timelines.get(sid, [])
            d = tl.durations(t, key=lambda v: v[0])
            observed = tl.covered(t)
            stretches, more = _top_stretches(_category_stretches(t, exclude=SYNCED))
            roles = [ROLE_LABELS.get(self.roles.get(hg), f"hg {hg}") for hg in members.get(sid, [])]
            # Time not serving that an operation explains: planned maintenance, or the read-pool rules.
            slack = 60 + self.h.max_gap  # rollup buckets round stretches out to whole minutes
            w = self.windows.get(sid, {})
            maint = [(a - slack, b + slack) for a, b in w.get("maintenance", [])]
            rules = [(a - slack, b + slack) for a, b in w.get("rules", [])]
            planned_s = _overlap([(a, b) for a, b, v in t if v[0] != SYNCED and v[0] != DESYNCED], maint)
            rules_s = _overlap([(a, b) for a, b, v in t if v[0] == OUT], rules) if rules else 0.0
            out.append({"id": sid, "name": str(server), "url": server.get_absolute_url(),
                        "hostgroups": members.get(sid, []), "roles": roles, "maintenance": server.maintenance,
                        "durations": {k: round(d.get(k, 0.0), 3) for k in BACKEND_CATS},
                        "observed_s": round(observed, 3), "availability": _avail(d, [SYNCED, DESYNCED], observed),
                        "stretches": stretches, "more_stretches": more,
                        "planned_s": round(planned_s, 3), "rules_s": round(rules_s, 3),
                        "maintenance_windows": [[a, b] for a, b in w.get("maintenance", [])],
                        "timeline": _json_timeline(t, key=lambda v: v[0])})
        return out

    def _hostgroups(self, timelines):
        out = []
        for hg, role in sorted(self.roles.items(), key=lambda kv: kv[0]):
            t = timelines.get(hg, [])
            if not t and role == "offline":
                continue  # an offline hostgroup nobody used
            d = tl.durations(t, key=lambda v: v[0])
            observed = tl.covered(t)
            stretches, more = _top_stretches(self._sourced(_stretch_list(
                t, _none, lambda v: ("on " + ", ".join(v[1])) if v[1] else ""), t, _none))
            longest = max((s["seconds"] for s in stretches), default=0.0)
            out.append({"hostgroup": hg, "role": role, "role_label": ROLE_LABELS.get(role, role),
                        "durations": {k: round(d.get(k, 0.0), 3) for k in HOSTGROUP_CATS},
                        "observed_s": round(observed, 3), "availability": _avail(d, [ALL, REDUCED], observed),
                        "longest_none_s": longest, "stretches": stretches, "more_stretches": more,
                        "timeline": _json_timeline(t, key=lambda v: v[0])})
        return out

    def _proxysql(self, timelines):
        out = []
        for nid, node in sorted(self.nodes.items(), key=lambda kv: kv[1].name):
            t = timelines.get(nid, [])
            d = tl.durations(t)
            observed = tl.covered(t)
            stretches, more = _top_stretches(_stretch_list(t, lambda v: v == UNREACHABLE, join_gap=0.0))
            out.append({"id": nid, "name": node.name, "endpoint": f"{node.admin_host}:{node.admin_port}",
                        "also_serves": self.also_serves.get(nid, []),
                        "url": node.get_absolute_url(), "unreachable_s": round(d.get(UNREACHABLE, 0.0), 3),
                        "observed_s": round(observed, 3), "availability": _avail(d, [REACHABLE], observed),
                        "longest_s": max((s["seconds"] for s in stretches), default=0.0),
                        "stretches": stretches, "more_stretches": more,
                        "timeline": _json_timeline(t)})
        return out

    # -- operations -----------------------------------------------------------------------------------
    def _operation(self, op):
        return {"id": op.pk, "url": op.get_absolute_url(), "kind": op.kind, "kind_label": op.get_kind_display(),
                "state": op.state, "state_label": op.get_state_display(), "title": op.title, "actor": op.actor,
                "automatic": op.requested_by_id is None and op.kind in (OperationKind.READ_POOL, OperationKind.FAILOVER),
                "start": op.started_at.timestamp(),
                "end": op.finished_at.timestamp() if op.finished_at else None,
                "total_ms": (op.timings or {}).get("total_ms", op.duration_ms), "error": op.error[:300]}

    def _writer_changes(self, ops, backends_tl, hostgroups_tl):
        writer_tl = hostgroups_tl.get(self.cluster.writer_hostgroup, [])
        out = []
        for op in ops:
            if op.kind not in (OperationKind.SWITCHOVER, OperationKind.FAILOVER):
                continue
            row = self._operation(op)
            steps = {s.key: s for s in op.steps.all()}
            old_id, new_id = _writer_pair(op)
            row["old"] = str(self.servers[old_id]) if old_id in self.servers else "?"
            row["new"] = str(self.servers[new_id]) if new_id in self.servers else "?"
            row["changed"] = op.state == OperationState.DONE or (op.state == OperationState.FAILED and op.point_of_no_return)
            ms, how = (_switchover_interruption(op, steps) if op.kind == OperationKind.SWITCHOVER
                       else self._failover_interruption(op, steps, old_id, backends_tl.get(old_id, [])))
            row["interruption_ms"] = None if ms is None else round(ms, 1)
            row["how"] = how
            lo = op.started_at.timestamp() - self.h.max_gap
            hi = (op.finished_at or op.started_at).timestamp() + self.h.max_gap
            row["polls_saw_none_s"] = round(sum(min(b, hi) - max(a, lo) for a, b, v in writer_tl
                                               if v[0] == NONE and b > lo and a < hi), 3)
            out.append(row)
        return out

    def _failover_interruption(self, op, steps, old_id, old_tl):
        """From the last good poll of the old writer (the monitoring history: it failed at some moment after it)
        to the new writer ONLINE; where that poll is not known, from the first failed poll or the rollup bucket
        it lies in, else the operation's own time."""
        move = steps.get("move")
        end = (move.finished_at if move and move.finished_at else op.finished_at or op.started_at).timestamp()
        began = op.started_at.timestamp()
        first_bad = None
        for a, b, v in old_tl:
            if v[0] in (UNREACHABLE, OUT) and a <= began and b >= began - self.h.max_gap:
                first_bad = a
        # Walk back over adjacent bad segments (unreachable after "not Primary", say).
        if first_bad is not None:
            for a, b, v in reversed(old_tl):
                if v[0] in (UNREACHABLE, OUT) and b >= first_bad - 1e-6 and a < first_bad:
                    first_bad = a
        last = max((row for _, _, row in self.h.backends.get(old_id, [])
                    if row[0] < (began if first_bad is None else first_bad)), default=None, key=lambda row: row[0])
        if last is not None and last[1] == 0 and backend_state(last)[0] not in (UNREACHABLE, OUT):
            after = (f"its first failed poll at {fmt.clock(first_bad)}" if first_bad is not None
                     else "no failed poll before the failover started")
            return ((end - last[0]) * 1000,
                    f"from the last good poll of the old writer ({fmt.clock(last[0])}; {after}) to the new writer "
                    f"ONLINE ({fmt.clock(end)}): it failed at some moment after that poll, the polls cannot say when")
        if first_bad is None:
            total = (op.timings or {}).get("total_ms")
            return total, "the failover operation itself (no poll of the old writer found before it)"
        resolution = next((r for r, lo, hi in sorted(self.h.backend_pieces) if lo <= first_bad < hi), 0)
        if resolution:
            return ((end - first_bad) * 1000,
                    f"from the start of the first {history.RESOLUTION_NAMES[resolution][:-1]} bucket in which the old "
                    f"writer failed a poll ({fmt.clock(first_bad)}) to the new writer ONLINE ({fmt.clock(end)}): an upper "
                    f"bound, the raw polls of that time are no longer kept")
        return ((end - first_bad) * 1000,
                f"from the first failed poll of the old writer ({fmt.clock(first_bad)}) to the new writer ONLINE "
                f"({fmt.clock(end)}); the failure itself came up to one poll interval "
                f"({fmt.duration(self.cluster.backend_poll_interval_s)}) before that poll")

    def _read_pool(self, ops):
        actions = [self._operation(op) for op in ops if op.kind == OperationKind.READ_POOL]
        events = AuditEvent.objects.filter(cluster_id=self.cluster.pk, created_at__gte=as_dt(self.start),
                                           created_at__lt=as_dt(self.end))
        dry = list(events.filter(action="read-pool rules (dry run)").order_by("created_at")[:50])
        alerts = events.filter(action="read-pool alert").count()
        # repeated refusals are summarised in the log (apps/audit/services.py): count what each summary stands for
        refused = count_with_repeats(events.filter(action__in=["read_pool refused", "failover refused"]))
        return {"actions": actions, "done": sum(1 for a in actions if a["state"] == OperationState.DONE),
                "dry_runs": [{"at": e.created_at.timestamp(), "would": _would_change(e.details)} for e in dry],
                "dry_run_count": events.filter(action="read-pool rules (dry run)").count(),
                "alerts": alerts, "refused": refused}

    # -- rates ----------------------------------------------------------------------------------------
    def _conn_err_and_traffic(self):
        start, end, width = self.start, self.end, self.bucket_s
        per_backend = defaultdict(float)
        per_backend_hgs = defaultdict(set)
        for (node_id, hg, host, port), segs in self.h.pool.items():
            total = sum((b - a) * (r[L["conn_err_ps"]] or 0.0) for a, b, r in segs)
            per_backend[f"{host}:{port}"] += total
            if round(total) > 0:
                per_backend_hgs[f"{host}:{port}"].add(hg)
        err_buckets = _sum_lists([tl.bucketed(segs, start, end, width, lambda r: r[P["conn_err_ps"]])
                                  for segs in self.h.proxysql.values()])
        qps_buckets = _sum_lists([tl.bucketed(segs, start, end, width, lambda r: r[P["questions_ps"]], how="mean")
                                  for segs in self.h.proxysql.values()])
        total_err = sum((b - a) * (r[P["conn_err_ps"]] or 0.0) for segs in self.h.proxysql.values() for a, b, r in segs)
        queries = sum((b - a) * (r[P["questions_ps"]] or 0.0) for segs in self.h.proxysql.values() for a, b, r in segs)
        prev = history.load_proxysql_only(self.cluster, self.prev_start, self.prev_end, self.hourly_only)
        prev_err_b = _sum_lists([tl.bucketed(segs, self.prev_start, self.prev_end, width, lambda r: r[P["conn_err_ps"]])
                                 for segs in prev.values()])
        prev_qps_b = _sum_lists([tl.bucketed(segs, self.prev_start, self.prev_end, width, lambda r: r[P["questions_ps"]],
                                             how="mean") for segs in prev.values()])
        has_prev = any(prev.values())
        prev_err = sum((b - a) * (r[P["conn_err_ps"]] or 0.0) for segs in prev.values() for a, b, r in segs) if has_prev else None
        prev_q = sum((b - a) * (r[P["questions_ps"]] or 0.0) for segs in prev.values() for a, b, r in segs) if has_prev else None
        rows = sorted(({"name": k, "hostgroups": sorted(per_backend_hgs[k]), "total": round(v)}
                       for k, v in per_backend.items() if round(v) > 0), key=lambda r: -r["total"])
        worst_hour = max(range(len(err_buckets)), key=lambda i: err_buckets[i] or 0, default=None)
        conn_err = {"total": round(total_err), "previous": None if prev_err is None else round(prev_err),
                    "change_pct": _round(fmt.change(round(total_err), None if prev_err is None else round(prev_err))),
                    "per_backend": rows[:15], "bucket_s": width, "buckets": _rounded(err_buckets),
                    "previous_buckets": _rounded(prev_err_b),
                    "worst_bucket": None if worst_hour is None or not (err_buckets[worst_hour] or 0) else
                    {"start": start + worst_hour * width, "total": round(err_buckets[worst_hour])}}
        peak = max((v for v in qps_buckets if v is not None), default=None)
        traffic = {"queries": round(queries), "previous": None if prev_q is None else round(prev_q),
                   "change_pct": _round(fmt.change(queries, prev_q)), "peak_qps": _round(peak),
                   "bucket_s": width, "buckets_qps": _rounded(qps_buckets, 1), "previous_buckets_qps": _rounded(prev_qps_b, 1),
                   "shared_with": self.shared_with}
        return conn_err, traffic

    def _mirror(self):
        nodes, stretches, has_data = [], [], False
        for nid, segs in self.h.proxysql.items():
            name = self.nodes[nid].name if nid in self.nodes else str(nid)

            def verdict(r):
                if not _truthy(r[P["reachable"]]):
                    return None
                return status.mirror({"mirror_queue_length": r[P["mirror_queue_length"]],
                                      "mirror_max_queue_length": r[P["mirror_max_queue_length"]],
                                      "mysql_threads": r[P["mysql_threads"]],
                                      "mirror_concurrency": r[P["mirror_concurrency"]],
                                      "mirror_max_concurrency": r[P["mirror_max_concurrency"]]})
            saturated = []
            for a, b, r in segs:
                m = verdict(r)
                if m is None:
                    continue
                if (m.queue or 0) > 0 or (m.concurrency or 0) > 0:
                    has_data = True
                tl.append(saturated, a, b, bool(m.saturated))
            ratios = tl.bucketed(segs, self.start, self.end, self.bucket_s,
                                 lambda r: (verdict(r).queue_ratio if verdict(r) else None), how="max")
            nodes.append({"id": nid, "name": name, "ratio_buckets": [None if v is None else round(v * 100, 1) for v in ratios]})
            for a, b in tl.stretches(saturated, lambda v: v, join_gap=self.h.max_gap):
                inside = [verdict(r) for sa, sb, r in segs if sb > a and sa < b and verdict(r)]
                peak = max(inside, key=lambda m: m.queue_ratio or 0, default=None)
                stretches.append({"node": name, "start": a, "end": b, "seconds": round(b - a, 3),
                                  "peak_queue": peak.queue if peak else None, "limit": peak.queue_limit if peak else None,
                                  "peak_pct": round((peak.queue_ratio or 0) * 100, 1) if peak else None,
                                  "concurrency_at_limit": any(m.concurrency_at_limit for m in inside)})
        stretches.sort(key=lambda s: s["start"])
        return {"has_data": has_data, "warn_pct": status.MIRROR_QUEUE_WARN * 100, "nodes": nodes,
                "shared_with": self.shared_with,
                "stretches": stretches[:MAX_STRETCHES], "count": len(stretches),
                "total_s": round(sum(s["seconds"] for s in stretches), 3), "bucket_s": self.bucket_s}

    def _drift(self):
        events = (AuditEvent.objects.filter(cluster_id=self.cluster.pk, created_at__gte=as_dt(self.start),
                                            created_at__lt=as_dt(self.end), action__icontains="drift")
                  .order_by("created_at"))
        rows = []
        for e in events[:100]:
            fixed = any(w in e.action.lower() for w in ("fixed", "resolved", "repaired", "corrected"))
            rows.append({"at": e.created_at.timestamp(), "action": e.action, "fixed": fixed, "target": e.target,
                         "actor": e.actor, "outcome": e.outcome, "what": _drift_what(e.details),
                         "url": f"/audit/{e.pk}/"})
        return {"found": sum(1 for r in rows if not r["fixed"]), "fixed": sum(1 for r in rows if r["fixed"]),
                "events": rows}


def _category_stretches(timeline, exclude):
    """Stretches of each category but `exclude`, one per change of category, with their reasons."""
    out = []
    for a, b, v in timeline:
        cat, why = v
        if cat == exclude:
            continue
        if out and out[-1]["category"] == cat and abs(out[-1]["end"] - a) < 1e-6:
            out[-1]["end"] = b
            if why and why not in out[-1]["reasons"]:
                out[-1]["reasons"].append(why)
        else:
            out.append({"category": cat, "start": a, "end": b, "reasons": [why] if why else []})
    return [{"category": x["category"], "start": x["start"], "end": x["end"], "seconds": round(x["end"] - x["start"], 3),
             "why": ", ".join(x["reasons"])} for x in out]


def _inventory_params(op):
    for step in (op.plan or {}).get("steps", []):
        if step.get("key") == "inventory":
            return step.get("params") or {}
    return {}


def _windows(ops, start, end):
    """{server id: {"maintenance": [(a, b)], "rules": [(a, b)]}}: from a maintenance drain to its restore,
    and from a read-pool rule taking a server out to the one bringing it back (or the period's edges)."""
    out = defaultdict(lambda: {"maintenance": [], "rules": []})
    drained, ruled_out = {}, {}
    for op in ops:
        if op.state != OperationState.DONE:
            continue
        params = _inventory_params(op)
        a = op.started_at.timestamp()
        b = op.finished_at.timestamp() if op.finished_at else a
        if op.kind == OperationKind.DRAIN and params.get("server"):
            drained[params["server"]] = a
        elif op.kind == OperationKind.RESTORE and params.get("server"):
            out[params["server"]]["maintenance"].append((drained.pop(params["server"], start), b))
        elif op.kind == OperationKind.READ_POOL:
            for change in params.get("changes") or []:
                sid, status_ = change[0], change[-1]
                if status_ == "ONLINE":
                    if sid in ruled_out:
                        out[sid]["rules"].append((ruled_out.pop(sid), b))
                else:
                    ruled_out.setdefault(sid, a)
    for sid, a in drained.items():
        out[sid]["maintenance"].append((a, end))
    for sid, a in ruled_out.items():
        out[sid]["rules"].append((a, end))
    return dict(out)


def _overlap(segments, windows):
    total = 0.0
    for a, b in segments:
        for wa, wb in windows:
            lo, hi = max(a, wa), min(b, wb)
            if hi > lo:
                total += hi - lo
    return total


def _writer_pair(op):
    options = (op.plan or {}).get("options") or {}
    old, new = options.get("old_writer"), options.get("new_writer")
    if old is None or new is None:
        for step in (op.plan or {}).get("steps", []):
            if step.get("key") == "inventory":
                params = step.get("params") or {}
                old, new = params.get("old", old), params.get("new", new)
    return old, new


def _switchover_interruption(op, steps):
    """A planned switchover interrupts writes from the moment the old writer goes OFFLINE_SOFT (the drain
    step) until the new writer is ONLINE in the writer hostgroup (the end of the move step): ProxySQL holds
    new writes meanwhile. Measured on the steps' clocks; the steps' own timings when those are missing."""
    a, b, how = measured.switchover_window(op, steps)
    timings = op.timings or {}
    if how == measured.HOLD:
        return (b - a) * 1000, how
    if op.state == OperationState.DONE and any(k in timings for k in ("drain", "move")):
        return (sum(timings.get(k) or 0 for k in ("drain", "wait_drain", "catch_up", "promote", "move")),
                "sum of the drain, wait, catch-up, promote and move step timings")
    return (None if a is None else (b - a) * 1000), how


def _would_change(details):
    would = (details or {}).get("would_change") or {}
    return "; ".join(f"{k} → {v[0] if isinstance(v, list) else v}" for k, v in list(would.items())[:5])


def _drift_what(details):
    details = details or {}
    for key in ("summary", "what", "differences", "diff"):
        if key in details:
            value = details[key]
            if isinstance(value, list):
                return "; ".join(str(v) for v in value[:3])[:300]
            return str(value)[:300]
    return ""


def _lab_marked(cluster_id, start, end):
    """Lab history (manage.py lab_report_history) covering part of the period: the report must say so."""
    for e in AuditEvent.objects.filter(cluster_id=cluster_id, action=LAB_MARK).only("details")[:50]:
        d = e.details or {}
        if d.get("start", 0) < end and d.get("end", 0) > start:
            return True
    return False


def _sum_lists(lists):
    if not lists:
        return []
    out = []
    for values in zip(*lists):
        present = [v for v in values if v is not None]
        out.append(sum(present) if present else None)
    return out


def _round(v, digits=1):
    if v is None or v in (float("inf"), float("-inf")):
        return v if v is None else None
    return round(v, digits)


def _rounded(values, digits=0):
    return [None if v is None else round(v, digits) for v in values]


# -- query digests ---------------------------------------------------------------------------------------
def digest_section(start, end, prev_start, prev_end, cluster_id=None):
    """Top digests by total time and their change against the period before, from apps.digests' selectors.
    The digests app is optional here: without it the section says so instead of failing the report."""
    try:
        from apps.digests import selectors as ds
    except ImportError:  # the digest history is not installed in this deployment
        return {"available": False, "note": "Query digest history is not available.", "rows": [], "regressions": []}

    def window(a, b):
        w = ds.effective_window(int(a), int(b))
        w.pieces = ds.plan_window(w.start, w.end)
        return w

    this, before = window(start, end), window(prev_start, prev_end)
    filters = ds.Filters(cluster=cluster_id)
    page = ds.top_digests(this, filters, sort="total", per_page=25)
    rows, regressions = [], []
    for r in page.rows:
        prev_row = None
        if r.digest:
            prev_page = ds.top_digests(before, ds.Filters(cluster=cluster_id, search=r.digest), sort="total", per_page=5)
            prev_row = next((p for p in prev_page.rows if p.digest_id == r.digest_id), None)
        avg_ms = r.avg_us / 1000 if r.avg_us is not None else None
        prev_avg = prev_row.avg_us / 1000 if prev_row and prev_row.avg_us is not None else None
        row = {"digest": r.digest, "text": r.text[:400], "count": r.count, "total_s": round(r.total_us / 1e6, 3),
               "avg_ms": _round(avg_ms, 3), "max_ms": _round(r.max_us / 1000 if r.max_us is not None else None, 3),
               "prev_count": prev_row.count if prev_row else 0,
               "prev_total_s": round(prev_row.total_us / 1e6, 3) if prev_row else 0.0,
               "prev_avg_ms": _round(prev_avg, 3), "hostgroups": (r.where or {}).get("hostgroups", []),
               "url": f"/digests/{r.digest_id}/"}
        verdict = ""
        if prev_row is None or prev_row.count == 0:
            verdict = "new"
        elif (avg_ms is not None and prev_avg and r.count >= DIGEST_MIN_COUNT and prev_row.count >= DIGEST_MIN_COUNT
              and avg_ms >= prev_avg * DIGEST_SLOWER and avg_ms - prev_avg >= DIGEST_SLOWER_MS):
            verdict = "slower"
        row["verdict"] = verdict
        row["total_change_pct"] = _round(fmt.change(row["total_s"], row["prev_total_s"] or None))
        if verdict:
            regressions.append(row)
        rows.append(row)
    has_prev = bool(before.pieces) and ds.top_digests(before, filters, per_page=1).total > 0
    if not has_prev:  # nothing was recorded the period before: "new" says nothing
        for row in rows:
            if row["verdict"] == "new":
                row["verdict"] = ""
        regressions = [r for r in regressions if r["verdict"]]
    return {"available": True, "note": "", "total_digests": page.total, "rows": rows[:DIGEST_TOP],
            "regressions": regressions, "has_previous": has_prev,
            "snapped": this.snapped, "window": [this.start, this.end]}


# -- the summary -----------------------------------------------------------------------------------------
def _join(parts):
    parts = [p for p in parts if p]
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def writer_change_phrase(changes):
    done = [w for w in changes if w["changed"]]
    if not done:
        return ""
    planned = [w for w in done if w["kind"] == OperationKind.SWITCHOVER]
    failovers = [w for w in done if w["kind"] == OperationKind.FAILOVER]
    parts = []
    for group, noun in ((planned, "planned switchover"), (failovers, "automatic failover")):
        if not group:
            continue
        times = [fmt.duration(w["interruption_ms"] / 1000) for w in group if w["interruption_ms"] is not None]
        what = fmt.count_word(len(group), noun)
        if len(times) == 1:
            parts.append(f"{what}, {times[0]} of writer interruption")
        elif times:
            parts.append(f"{what} ({_join(times)} of writer interruption)")
        else:
            parts.append(what)
    return "; ".join(parts)


def measured_words(svc):
    """Which part of an interruption the operations measured and which the polls sampled, and how often."""
    m, smp, n = svc.get("measured_s") or 0, svc.get("sampled_s") or 0, svc.get("measured_ops") or 0
    polls = f"sampled by polls every {fmt.duration(svc.get('interval_s'))}"
    ops = f"measured by {fmt.count_word(n, 'operation')}' own clocks" if n > 1 else "measured by the operation's own clock"
    if m and smp:
        return f" ({fmt.duration(m)} {ops}, {fmt.duration(smp)} {polls})"
    if m:
        return f" ({ops})"
    return f" ({polls})" if smp else ""


def cluster_summary(s, before="the period before"):
    """The headline and the few points a manager should see, each with a tone (good / warn / bad)."""
    points = []
    avail = s["service"]["availability"]
    cov = s["coverage"]
    polled = avail is not None or any(p["observed_s"] for p in s["proxysql"]) or any(b["observed_s"] for b in s["backends"])
    if not polled:
        headline = f"{s['name']}: no monitoring data for this period."
        return {"headline": headline, "points": [{"tone": "warn", "text": "Nothing was polled in this period."}],
                "availability": None}
    head = [f"{fmt.percent(avail)} available" if avail is not None else "service availability unknown"]
    w = writer_change_phrase(s["writer_changes"])
    head.append(w or "no writer change")
    down = s["service"]["down_s"]
    if down > 0 and not w:
        head.append(f"{fmt.duration(down)} of service interruption")
    headline = f"{s['name']}: " + "; ".join(head) + "."
    if avail is None:
        points.append({"tone": "warn", "text": "No backend or connection-pool polls: service availability unknown."})
    elif down > 0:
        longest = max(s["service"]["stretches"], key=lambda x: x["seconds"], default=None)
        text = f"Service interrupted for {fmt.duration(down)} in total{measured_words(s['service'])}"
        if longest:
            text += f"; longest {fmt.duration(longest['seconds'])} at {fmt.clock(longest['start'])} ({longest['why']})"
        points.append({"tone": "bad", "text": text + "."})
    else:
        points.append({"tone": "good", "text": "No service interruption seen by the polls."})
    if avail is not None and cov["observed_s"] < cov["period_s"] * 0.99:
        points.append({"tone": "warn", "text": f"Monitoring covered {fmt.duration(cov['observed_s'])} of "
                                                f"{fmt.duration(cov['period_s'])}: the rest is unknown."})
    for wc in s["writer_changes"]:
        if wc["interruption_ms"] is not None and wc["changed"]:
            tone = "good" if wc["interruption_ms"] < 864 else ("warn" if wc["interruption_ms"] < 5000 else "bad")
            points.append({"tone": tone, "text": f"{wc['kind_label'].capitalize()} {wc['old']} → {wc['new']} at "
                                                 f"{fmt.clock(wc['start'])}: writes held for "
                                                 f"{fmt.duration(wc['interruption_ms'] / 1000)}."})
        elif not wc["changed"]:
            points.append({"tone": "warn", "text": f"{wc['kind_label'].capitalize()} at {fmt.clock(wc['start'])} "
                                                   f"{wc['state_label']}: the writer did not change."})
    worst = [b for b in s["backends"] if b["availability"] is not None and b["availability"] < 100]
    for b in sorted(worst, key=lambda b: b["availability"])[:4]:
        d = b["durations"]
        lost = d[UNREACHABLE] + d[OUT]
        if lost < 1:
            continue
        detail = _join([f"{fmt.duration(d[k])} {label}" for k, label in ((UNREACHABLE, "unreachable"), (OUT, "out of service"))
                        if d[k] >= 1])
        explained = b["planned_s"] + b["rules_s"]
        if b["planned_s"] >= lost * 0.95 and b["maintenance_windows"]:
            m = b["maintenance_windows"][0]
            points.append({"tone": "good", "text": f"Planned maintenance of {b['name']} ({fmt.clock(m[0])[:5]}–"
                                                   f"{fmt.clock(m[1])[:5]}): {detail}, drained first."})
        elif explained >= lost * 0.95 and b["rules_s"]:
            points.append({"tone": "good", "text": f"The read-pool rules kept {b['name']} out of the read pool for "
                                                   f"{fmt.duration(b['rules_s'])} while it lagged behind."})
        else:
            points.append({"tone": "warn", "text": f"Backend {b['name']}: {detail} ({fmt.percent(b['availability'])} "
                                                   f"available){', partly planned' if explained >= 1 else ''}."})
    desynced = [b for b in s["backends"] if b["durations"][DESYNCED] >= 1]
    if desynced:
        points.append({"tone": "good", "text": "Desynced but serving: " + _join(
            [f"{b['name']} {fmt.duration(b['durations'][DESYNCED])}" for b in desynced]) + "."})
    rp = s["read_pool"]
    if rp["actions"]:
        points.append({"tone": "good", "text": f"Read-pool rules acted {fmt.count_word(len(rp['actions']), 'time')}."})
    if rp["dry_run_count"]:
        points.append({"tone": "warn", "text": f"Read-pool rules in dry run would have acted "
                                               f"{fmt.count_word(rp['dry_run_count'], 'time')}."})
    ce = s["conn_err"]
    if ce["total"] or ce["previous"]:
        tone = "good" if (ce["change_pct"] is not None and ce["change_pct"] < 0) or ce["total"] == 0 else "warn"
        points.append({"tone": tone, "text": f"{ce['total']:,} connection errors (ConnERR), "
                                             f"{fmt.change_text(ce['total'], ce['previous'], 'count', before)}."})
    else:
        points.append({"tone": "good", "text": "No connection errors (ConnERR)."})
    mirror = s["mirror"]
    if mirror["count"]:
        points.append({"tone": "bad", "text": f"Mirror queue saturated {fmt.count_word(mirror['count'], 'time')} "
                                              f"({fmt.duration(mirror['total_s'])}): mirrored queries were likely dropped."})
    for px in s["proxysql"]:
        if px["unreachable_s"] >= 1:
            points.append({"tone": "warn", "text": f"ProxySQL {px['name']} unreachable for {fmt.duration(px['unreachable_s'])}"
                                                   + (f" ({fmt.count_word(len(px['stretches']), 'time')})"
                                                      if len(px["stretches"]) > 1 else "") + "."})
    drift = s["drift"]
    if drift["found"] or drift["fixed"]:
        tone = "good" if drift["fixed"] >= drift["found"] else "warn"
        points.append({"tone": tone, "text": f"Configuration drift found {fmt.count_word(drift['found'], 'time')}, "
                                             f"fixed {fmt.count_word(drift['fixed'], 'time')}."})
    alert_point = alerts_report.summary_point(s["alerts"], fmt) if "alerts" in s else None
    if alert_point:  # (reports archived before alerts existed have no "alerts")
        points.append(alert_point)
    channel_point = dr_report.summary_point(s.get("dr_channels"), fmt)
    if channel_point:
        points.append(channel_point)
    dg = s["digests"]
    slower = [r for r in dg.get("regressions", []) if r["verdict"] == "slower"]
    if slower:
        r = slower[0]
        points.append({"tone": "warn", "text": f"{fmt.count_word(len(slower), 'query', 'queries').capitalize()} got slower: "
                                               f"{_short_sql(r['text'])} (average {fmt.ms(r['prev_avg_ms'])} → {fmt.ms(r['avg_ms'])})."})
    rank = {"bad": 0, "warn": 1, "good": 2}
    points = points[:1] + sorted(points[1:], key=lambda p: rank[p["tone"]])
    return {"headline": headline, "points": points, "availability": avail}


def _short_sql(text, n=60):
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


# -- the fleet -------------------------------------------------------------------------------------------
FLEET_DETAILED = 10  # clusters shown in full in a fleet report (the least available first)
# Clusters listed in its table (and read again at the finest resolution when the fleet is bigger); the others
# are summarised in one line. At 500 clusters, each listed cluster costs about 2 s of the build (a week
# of 1-minute rows), the others 0.05 s each (docs/benchmarks.md, "Weekly fleet report at scale").
FLEET_TABLE_ROWS = FLEET_DETAILED


def _worst_first(r):
    """Least available first; at equal availability, the one with more trouble of another kind."""
    return (r["availability"] is None, r["availability"] if r["availability"] is not None else 0,
            -r["backends_below_100"], -r["proxysql_unreachable_s"], -r["writer_changes"], -r["conn_err"],
            -r["mirror_saturations"], -r["drift_found"], r["name"])


def fleet_section(sections, start, end, prev_start, prev_end, before="the period before", digests=True):
    rows = []
    up = observed = 0.0
    for s in sections:
        svc = s["service"]
        obs = s["coverage"]["observed_s"]
        if svc["availability"] is not None:
            up += obs - svc["down_s"]
            observed += obs
        done = [w for w in s["writer_changes"] if w["changed"]]
        rows.append({"id": s["id"], "name": s["name"], "availability": svc["availability"], "down_s": svc["down_s"],
                     "writer_changes": len(done),
                     "max_interruption_ms": max((w["interruption_ms"] or 0 for w in done), default=None),
                     "conn_err": s["conn_err"]["total"], "conn_err_change_pct": s["conn_err"]["change_pct"],
                     "mirror_saturations": s["mirror"]["count"], "drift_found": s["drift"]["found"],
                     "drift_fixed": s["drift"]["fixed"],
                     "proxysql_unreachable_s": round(sum(p["unreachable_s"] for p in s["proxysql"]), 3),
                     "alerts_fired": s.get("alerts", {}).get("fired", 0),
                     "alerts_held": s.get("alerts", {}).get("held_cleared", 0),
                     "backends_below_100": sum(1 for b in s["backends"] if b["availability"] is not None
                                               and b["availability"] < 100),
                     "headline": s["summary"]["headline"]})
    availability = round(100.0 * up / observed, 6) if observed else None
    ranked = sorted(rows, key=_worst_first)
    changes = [w for s in sections for w in s["writer_changes"]]
    ce_total = sum(s["conn_err"]["total"] for s in sections)
    prevs = [s["conn_err"]["previous"] for s in sections if s["conn_err"]["previous"] is not None]
    ce_prev = sum(prevs) if prevs else None
    head = [f"{fmt.percent(availability)} available across {fmt.count_word(len(sections), 'cluster')}"
            if availability is not None else f"no monitoring data across {fmt.count_word(len(sections), 'cluster')}"]
    w = writer_change_phrase(changes)
    head.append(w or "no writer change")
    headline = "The fleet: " + "; ".join(head) + "."
    points = []
    below = [r for r in ranked if r["availability"] is not None and r["availability"] < 100]
    if below:
        points.append({"tone": "warn" if below[0]["availability"] >= 99.9 else "bad",
                       "text": "Least available: " + _join([f"{r['name']} {fmt.percent(r['availability'])}"
                                                             for r in below[:3]]) + "."})
    else:
        points.append({"tone": "good", "text": "Every cluster was available all the time the polls saw."})
    points.append({"tone": "good" if not ce_total or (ce_prev is not None and ce_total <= ce_prev) else "warn",
                   "text": f"{ce_total:,} connection errors (ConnERR), {fmt.change_text(ce_total, ce_prev, 'count', before)}."})
    sat = sum(r["mirror_saturations"] for r in rows)
    if sat:
        points.append({"tone": "bad", "text": f"Mirror queues saturated {fmt.count_word(sat, 'time')}: "
                                              f"mirrored queries were likely dropped."})
    found, fixed = sum(r["drift_found"] for r in rows), sum(r["drift_fixed"] for r in rows)
    if found or fixed:
        points.append({"tone": "good" if fixed >= found else "warn",
                       "text": f"Configuration drift found {fmt.count_word(found, 'time')}, fixed {fmt.count_word(fixed, 'time')}."})
    if any(r["alerts_fired"] or r["alerts_held"] for r in rows):
        points.append(alerts_report.summary_point(alerts_report.section(None, start, end), fmt))
    channels = dr_report.section(None, start, end)
    channel_point = dr_report.summary_point(channels, fmt)
    if channel_point and channel_point["tone"] != "good":
        points.append(channel_point)
    px = [(r["name"], r["proxysql_unreachable_s"]) for r in rows if r["proxysql_unreachable_s"] >= 1]
    if px:
        points.append({"tone": "warn", "text": "ProxySQL nodes unreachable: " + _join(
            [f"{n} {fmt.duration(s)}" for n, s in px[:5]]) + "."})
    detailed = {r["id"] for r in ranked[:FLEET_DETAILED]}
    for s in sections:
        s["detailed"] = s["id"] in detailed
    hourly = {s["id"] for s in sections if s["coverage"].get("hourly_only")}
    return {"availability": availability, "clusters": ranked, "detailed": len(detailed),
            "listed": min(len(ranked), FLEET_TABLE_ROWS), "tail": _tail(ranked[FLEET_TABLE_ROWS:], hourly),
            "summary": {"headline": headline, "points": points, "availability": availability},
            "dr_channels": channels,
            "digests": digest_section(start, end, prev_start, prev_end, cluster_id=None) if digests else None}


def _tail(rows, hourly):
    """One line for the clusters after the table's: how many, their least availability, their sums."""
    if not rows:
        return None
    known = [r["availability"] for r in rows if r["availability"] is not None]
    return {"clusters": len(rows), "least_availability": min(known) if known else None,
            "no_data": len(rows) - len(known), "down_s": round(sum(r["down_s"] for r in rows), 3),
            "writer_changes": sum(r["writer_changes"] for r in rows), "conn_err": sum(r["conn_err"] for r in rows),
            "mirror_saturations": sum(r["mirror_saturations"] for r in rows),
            "drift_found": sum(r["drift_found"] for r in rows),
            "backends_below_100": sum(r["backends_below_100"] for r in rows),
            "proxysql_unreachable_s": round(sum(r["proxysql_unreachable_s"] for r in rows), 3),
            "hourly_only": sum(1 for r in rows if r["id"] in hourly)}
