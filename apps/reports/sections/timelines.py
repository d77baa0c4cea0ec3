"""The sampled timelines (backends with the pool's view folded in, hostgroups, ProxySQL nodes, the service) and
the operations' measured windows that replace what the polls sampled inside them (measured.py)."""

from collections import defaultdict

from django.db.models import Prefetch

from apps.monitoring.models import HOUR
from apps.operations.models import Operation, OperationStep

from .. import history, measured
from .. import timeline as tl
from ..history import L, P, as_dt
from .common import (
    ALL,
    DESYNCED,
    DOWN,
    NONE,
    OUT,
    REACHABLE,
    REDUCED,
    SERVING_ROLES,
    SYNCED,
    UNREACHABLE,
    UP,
    _truthy,
    backend_state,
)


def backend_timelines(ctx):
    """{server id: [(a, b, (category, why))]}, the pool's view folded in."""
    state = {sid: tl.from_coverage(segs, backend_state) for sid, segs in ctx.h.backends.items()}
    serving = {hg for hg, role in ctx.roles.items() if role in SERVING_ROLES}
    per_server = defaultdict(list)  # server id -> [per node timeline of "ONLINE in a serving hostgroup"]
    per_node_server = defaultdict(list)
    for (node_id, hg, host, port), segs in ctx.h.pool.items():
        sid = ctx.by_endpoint.get((host, port))
        if sid is None or hg not in serving:
            continue
        per_node_server[(node_id, sid)].append(tl.from_coverage(segs, lambda r: r[L["status"]] == "ONLINE"))
    for (node_id, sid), tls in per_node_server.items():
        per_server[sid].append(tl.combine(lambda vs: None if all(v is None for v in vs) else any(vs), tls))
    in_pool = {
        sid: tl.combine(lambda vs: None if all(v is None for v in vs) else any(v for v in vs if v), tls)
        for sid, tls in per_server.items()
    }
    out = {}
    for sid in ctx.servers:
        st, pool = state.get(sid, []), in_pool.get(sid, [])

        def fold(vs):
            s, p = vs
            if s is None:
                return None
            if s[0] in (SYNCED, DESYNCED) and p is False:
                return (OUT, "not ONLINE in a writer or reader hostgroup")
            return s

        out[sid] = tl.combine(fold, [st, pool])
    ctx.backend_states = state
    return out


def hostgroup_timelines(ctx):
    """{hostgroup: [(a, b, (category, nodes without a usable server))]} over the cluster's hostgroups."""
    usable = {sid: tl.mapped(t, lambda v: v[0] in (SYNCED, DESYNCED)) for sid, t in ctx.backend_states.items()}
    per_node = defaultdict(list)  # (hostgroup, node) -> member timelines of "ONLINE and usable"
    for (node_id, hg, host, port), segs in ctx.h.pool.items():
        if hg not in ctx.roles:
            continue
        online = tl.from_coverage(segs, lambda r: r[L["status"]] == "ONLINE")
        sid = ctx.by_endpoint.get((host, port))
        good = tl.combine(
            lambda vs: None if vs[0] is None else bool(vs[0] and vs[1] is not False), [online, usable.get(sid, [])]
        )
        per_node[(hg, node_id)].append(good)
    counted = defaultdict(list)
    for (hg, node_id), members in per_node.items():

        def count(vs, node_id=node_id):
            present = [v for v in vs if v is not None]
            return (node_id, sum(present), len(present)) if present else None

        counted[hg].append(tl.combine(count, members))
    out = {}
    for hg in ctx.roles:

        def worst(vs):
            present = [v for v in vs if v is not None]
            if not present:
                return None
            empty = tuple(sorted(ctx.nodes[n].name for n, good, _ in present if good == 0 and n in ctx.nodes))
            if any(good == 0 for _, good, _ in present):
                return (NONE, empty)
            if all(good == total for _, good, total in present):
                return (ALL, ())
            return (REDUCED, ())

        out[hg] = tl.combine(worst, counted.get(hg, []))
    return out


def proxysql_timelines(ctx):
    return {
        nid: tl.from_coverage(segs, lambda r: REACHABLE if _truthy(r[P["reachable"]]) else UNREACHABLE)
        for nid, segs in ctx.h.proxysql.items()
    }


def service_timeline(ctx, hostgroups, proxysql):
    writer, reader = hostgroups.get(ctx.cluster.writer_hostgroup, []), hostgroups.get(ctx.cluster.reader_hostgroup, [])
    any_px = tl.combine(
        lambda vs: None if all(v is None for v in vs) else any(v == REACHABLE for v in vs), list(proxysql.values())
    )

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
def sample_s(ctx, t):
    """(seconds one sample at t stands for at most, whether it is a rollup bucket)."""
    resolution = history.resolution_at(t, ctx.h.backend_pieces, ctx.h.pool_pieces)
    return (resolution, True) if resolution else (ctx.h.max_gap, False)


def measured_windows(ctx):
    """Finished operations around the period, as measured.Window (an operation begun just before the
    period may explain its first moments)."""
    ops = Operation.objects.filter(
        cluster=ctx.cluster, started_at__gte=as_dt(ctx.start - HOUR), started_at__lt=as_dt(ctx.end)
    ).prefetch_related(Prefetch("steps", queryset=OperationStep.objects.order_by("index")))
    return measured.windows(ops, ctx.cluster.failover_after_polls, ctx.h.interval)


def measured_only(ctx, timeline, is_bad):
    return measured.apply(timeline, is_bad, ctx.found, lambda t: sample_s(ctx, t), (ctx.start, ctx.end))


def sourced(ctx, stretches, timeline, is_bad):
    """Each stretch with how much of it an operation measured (and which) and how much the polls sampled."""
    bad = [seg for seg in timeline if is_bad(seg[2])]
    by_id = {w.op_id: w for w in ctx.found}
    for x in stretches:
        m, smp, ops = measured.split(bad, x["start"], x["end"])
        x.update(
            measured_s=round(m, 3),
            sampled_s=round(smp, 3),
            measured_by=[by_id[o].describe() for o in ops if o in by_id],
        )
    return stretches
