"""The sampled timelines (backends with the pool's view folded in, hostgroups, ProxySQL nodes, the service) and
the operations' measured windows that replace what the polls sampled inside them (measured.py)."""
from collections import defaultdict

from django.db.models import Prefetch

from apps.monitoring.models import HOUR
from apps.operations.models import Operation, OperationStep

from .. import history, measured
from .. import timeline as tl
from ..history import L, P, as_dt
from .common import (ALL, DESYNCED, DOWN, NONE, OUT, REACHABLE, REDUCED, SERVING_ROLES, SYNCED, UNREACHABLE, UP,
                     _truthy, backend_state)


class Timelines:
    """ClusterSection's timelines: reads self.h (history.load), self.servers, self.nodes, self.roles."""

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
