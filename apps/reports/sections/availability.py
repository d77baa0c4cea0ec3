"""The backends, hostgroups and ProxySQL tables: availability per member, its stretches, and the time
planned maintenance or the read-pool rules explain."""

from collections import defaultdict

from apps.fleet.models import HostgroupMembership
from apps.operations.choices import OperationKind, OperationState

from .. import timeline as tl
from .common import (
    ALL,
    BACKEND_CATS,
    DESYNCED,
    HOSTGROUP_CATS,
    OUT,
    REACHABLE,
    REDUCED,
    ROLE_LABELS,
    SYNCED,
    UNREACHABLE,
    _avail,
    _json_timeline,
    _none,
    _stretch_list,
    _top_stretches,
)
from .timelines import sourced


def backends(ctx, timelines):
    members = defaultdict(list)
    for m in HostgroupMembership.objects.filter(server__cluster=ctx.cluster).order_by("hostgroup_id"):
        members[m.server_id].append(m.hostgroup_id)
    out = []
    for sid, server in sorted(ctx.servers.items(), key=lambda kv: (kv[1].hostname, kv[1].port)):
        t = timelines.get(sid, [])
        d = tl.durations(t, key=lambda v: v[0])
        observed = tl.covered(t)
        stretches, more = _top_stretches(_category_stretches(t, exclude=SYNCED))
        roles = [ROLE_LABELS.get(ctx.roles.get(hg), f"hg {hg}") for hg in members.get(sid, [])]
        # Time not serving that an operation explains: planned maintenance, or the read-pool rules.
        slack = 60 + ctx.h.max_gap  # rollup buckets round stretches out to whole minutes
        w = ctx.windows.get(sid, {})
        maint = [(a - slack, b + slack) for a, b in w.get("maintenance", [])]
        rules = [(a - slack, b + slack) for a, b in w.get("rules", [])]
        planned_s = _overlap([(a, b) for a, b, v in t if v[0] != SYNCED and v[0] != DESYNCED], maint)
        rules_s = _overlap([(a, b) for a, b, v in t if v[0] == OUT], rules) if rules else 0.0
        out.append(
            {
                "id": sid,
                "name": str(server),
                "url": server.get_absolute_url(),
                "hostgroups": members.get(sid, []),
                "roles": roles,
                "maintenance": server.maintenance,
                "durations": {k: round(d.get(k, 0.0), 3) for k in BACKEND_CATS},
                "observed_s": round(observed, 3),
                "availability": _avail(d, [SYNCED, DESYNCED], observed),
                "stretches": stretches,
                "more_stretches": more,
                "planned_s": round(planned_s, 3),
                "rules_s": round(rules_s, 3),
                "maintenance_windows": [[a, b] for a, b in w.get("maintenance", [])],
                "timeline": _json_timeline(t, key=lambda v: v[0]),
            }
        )
    return out


def hostgroups(ctx, timelines):
    out = []
    for hg, role in sorted(ctx.roles.items(), key=lambda kv: kv[0]):
        t = timelines.get(hg, [])
        if not t and role == "offline":
            continue  # an offline hostgroup nobody used
        d = tl.durations(t, key=lambda v: v[0])
        observed = tl.covered(t)
        stretches, more = _top_stretches(
            sourced(ctx, _stretch_list(t, _none, lambda v: ("on " + ", ".join(v[1])) if v[1] else ""), t, _none)
        )
        longest = max((s["seconds"] for s in stretches), default=0.0)
        out.append(
            {
                "hostgroup": hg,
                "role": role,
                "role_label": ROLE_LABELS.get(role, role),
                "durations": {k: round(d.get(k, 0.0), 3) for k in HOSTGROUP_CATS},
                "observed_s": round(observed, 3),
                "availability": _avail(d, [ALL, REDUCED], observed),
                "longest_none_s": longest,
                "stretches": stretches,
                "more_stretches": more,
                "timeline": _json_timeline(t, key=lambda v: v[0]),
            }
        )
    return out


def proxysql(ctx, timelines):
    out = []
    for nid, node in sorted(ctx.nodes.items(), key=lambda kv: kv[1].name):
        t = timelines.get(nid, [])
        d = tl.durations(t)
        observed = tl.covered(t)
        stretches, more = _top_stretches(_stretch_list(t, lambda v: v == UNREACHABLE, join_gap=0.0))
        out.append(
            {
                "id": nid,
                "name": node.name,
                "endpoint": f"{node.admin_host}:{node.admin_port}",
                "also_serves": ctx.also_serves.get(nid, []),
                "url": node.get_absolute_url(),
                "unreachable_s": round(d.get(UNREACHABLE, 0.0), 3),
                "observed_s": round(observed, 3),
                "availability": _avail(d, [REACHABLE], observed),
                "longest_s": max((s["seconds"] for s in stretches), default=0.0),
                "stretches": stretches,
                "more_stretches": more,
                "timeline": _json_timeline(t),
            }
        )
    return out


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
    return [
        {
            "category": x["category"],
            "start": x["start"],
            "end": x["end"],
            "seconds": round(x["end"] - x["start"], 3),
            "why": ", ".join(x["reasons"]),
        }
        for x in out
    ]


def _inventory_params(op):
    for step in (op.plan or {}).get("steps", []):
        if step.get("key") == "inventory":
            return step.get("params") or {}
    return {}


def windows(ops, start, end):
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
