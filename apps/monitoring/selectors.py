"""Reads for the node, backend and cluster pages: the latest state from Redis joined to the inventory, and
the last known figures from the database when Redis is down. The fleet overview has its own module
(overview.py), built for fleet scale.

Everything here returns plain dicts and lists ready for a template; status.py says what they mean. The documents
are decoded into the structs below (live.read_typed), which name what these pages read.
"""

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import msgspec
from django.conf import settings
from django.urls import reverse

from apps.clients import proxysql_versions as versions
from apps.clients.backend import BackendClient
from apps.clients.proxysql import ProxySQLAdmin
from apps.clients.wire import ClientError
from apps.fleet import selectors as fleet_selectors  # the cluster's nodes and backends, as the API lists them
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server

from . import live, live_doc, proxysql_cluster, status
from .chunks import last_reachable_raw
from .chunks import samples as chunked_samples
from .models import RAW, BackendSample
from .chunks import read_pool


class NodeDoc(live_doc.Polled):
    """What the node and cluster pages read of a ProxySQL node's latest-state document (live_doc.ProxySQLNodeDoc)."""

    figures: dict[str, float | int | None] = {}
    pool: list[dict] = []
    runtime_servers: list[dict] = []
    variables: dict[str, Any] = {}
    variables_ts: float | None = None
    proxysql_cluster: dict | None = None
    query_stats: dict | None = None


class BackendDoc(live_doc.Polled):
    """What the backend and cluster pages read of a backend's latest-state document (live_doc.BackendNodeDoc)."""

    state: dict | None = None  # clients.backend.NodeState's fields
    lag_seconds: int | None = None


class QueryStatsDoc(msgspec.Struct):
    """What the query tools' panels read of a ProxySQL node's document: only its query_stats."""

    ts: float
    query_stats: dict | None = None


STRUCTS = {live.PROXYSQL: NodeDoc, live.BACKEND: BackendDoc}
NO_BACKEND_DOC = BackendDoc(ts=0.0)  # what backend_live shows of a backend with no document: every field's default


@dataclass
class Latest:
    """Latest-state documents of one kind ({pk: struct or None}), or why there are none."""

    docs: dict[int, Any] = field(default_factory=dict)
    unavailable: str = ""  # "" when Redis answered


def latest(kind: str, pks: list[int], struct: type[msgspec.Struct] | None = None) -> Latest:
    """The documents decoded into `struct` (by default NodeDoc or BackendDoc for the kind); one MGET."""
    try:
        return Latest(docs=live.read_typed(kind, pks, struct or STRUCTS[kind]))
    except live.LiveUnavailable as exc:
        return Latest(unavailable=str(exc) or "Redis unavailable")


def _url_maker(name: str) -> Callable[..., str]:
    """reverse() once, then format: a thousand reverse() calls would cost more than the page."""
    pattern = reverse(name, args=[987654321]).replace("987654321", "{}")
    return pattern.format


def _ts(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch else None


# -- one ProxySQL node -----------------------------------------------------------------------------
def proxysql_live(node: ProxySQLNode, now: float | None = None) -> dict[str, Any]:
    """The node's latest state for its page: freshness, figures, the mirror verdict, the pool rows.
    When Redis is down, the last pool poll stored in the database stands in (and says so)."""
    now = now or time.time()
    cluster = node.cluster
    got = latest(live.PROXYSQL, [node.pk])
    doc = got.docs.get(node.pk)
    state, age = status.freshness(doc, cluster.poll_interval_s, now)
    out: dict[str, Any] = {
        "node": node,
        "unavailable": got.unavailable,
        "doc": doc,
        "state": state,
        "colour": status.COLOURS[state],
        "age": age,
        "figures_age": status.figures_age(doc, age, now),
        "error": None,
        "error_kind": None,
        "error_since": None,
        "last_ok": None,
        "figures": {},
        "pool": [],
        "from_history": None,
        "variables_age": None,
        # A ProxySQL serving several clusters: its global figures and mirror are every one's (node-wide).
        "shared_with": [n.cluster.name for n in node.shares_with()],
        "version": status.polled_version(node, doc),
    }
    if doc:
        out.update(
            error=doc.error,
            error_kind=doc.error_kind,
            error_since=_ts(doc.error_since),
            advice=status.advice("proxysql", doc.error_kind) if doc.error else "",
            last_ok=_ts(doc.last_ok),
            figures=doc.figures or {},
            variables_age=(now - doc.variables_ts) if doc.variables_ts else None,
        )
        roles = cluster.hostgroup_roles()
        out["pool"] = sorted(
            (
                {
                    "hostgroup": r["key"][0],
                    "role": roles.get(r["key"][0], "other"),
                    "host": r["key"][1],
                    "port": r["key"][2],
                    "status": r.get("status"),
                    "conn_used": r.get("conn_used"),
                    "conn_free": r.get("conn_free"),
                    "queries_ps": r.get("queries_ps"),
                    "latency_us": r.get("latency_us"),
                    "conn_err_ps": r.get("conn_err_ps"),
                    "bytes_sent_ps": r.get("bytes_sent_ps"),
                    "bytes_recv_ps": r.get("bytes_recv_ps"),
                }
                for r in doc.pool or []
            ),
            key=lambda r: (r["hostgroup"], r["host"], r["port"]),
        )
    elif got.unavailable:
        out.update(_pool_from_history(node, now))
    out["mirror"] = status.mirror(out["figures"])
    out["qs"] = _query_stats_view(doc.query_stats if doc else None, now)
    return out


def _pool_from_history(node: ProxySQLNode, now: float) -> dict[str, Any]:
    last = last_reachable_raw(node.pk)
    if not last:
        return {}
    ts, figures = last
    roles = node.cluster.hostgroup_roles()
    fields = [
        "status",
        "conn_used",
        "conn_free",
        "queries_ps",
        "latency_us",
        "conn_err_ps",
        "bytes_sent_ps",
        "bytes_recv_ps",
    ]
    rows = sorted(
        (key, values) for *_, key, values in read_pool({"node_id": node.pk, "resolution": RAW, "ts": ts}, fields)
    )
    pool_rows = [
        {"hostgroup": hg, "role": roles.get(hg, "other"), "host": host, "port": port, **dict(zip(fields, values))}
        for (hg, host, port), values in rows
    ]
    figures = {k: v for k, v in figures.items() if not k.endswith(("_min", "_max"))}
    return {
        "figures": figures,
        "pool": pool_rows,
        "from_history": ts,
        "age": now - ts.timestamp(),
        "figures_age": now - ts.timestamp(),
    }


# -- one backend -----------------------------------------------------------------------------------
def backend_live(server: Server, now: float | None = None) -> dict[str, Any]:
    now = now or time.time()
    cluster = server.cluster
    got = latest(live.BACKEND, [server.pk])
    doc = got.docs.get(server.pk)
    state, age = status.freshness(doc, cluster.backend_poll_interval_s, now)
    d = doc or NO_BACKEND_DOC
    problems = (
        status.backend_problems_of(d.state, d.lag_seconds, cluster.max_replication_lag) if state == status.OK else []
    )
    out: dict[str, Any] = {
        "server": server,
        "unavailable": got.unavailable,
        "doc": doc,
        "state": state,
        "age": age,
        "figures_age": status.figures_age(doc, age, now),
        "colour": status.backend_colour(state, problems),
        "problems": problems,
        "label": status.wsrep_label_of(d.state),
        "wsrep": d.state or {},
        "lag_seconds": d.lag_seconds,
        "error": d.error,
        "error_kind": d.error_kind,
        "error_since": _ts(d.error_since),
        "last_ok": _ts(d.last_ok),
        "advice": status.advice("backend", d.error_kind) if d.error else "",
        "from_history": None,
    }
    if not doc and got.unavailable:
        found = last_reachable_raw(server.pk, BackendSample)
        if found:
            ts, last = found
            out.update(
                from_history=ts,
                age=now - ts.timestamp(),
                figures_age=now - ts.timestamp(),
                label=status.WSREP_STATES.get(
                    last["local_state"], "" if last["local_state"] is None else str(last["local_state"])
                ),
                wsrep={
                    "wsrep_on": last["local_state"] is not None,
                    "local_state": last["local_state"],
                    "cluster_status": (
                        None if last["primary"] is None else "Primary" if last["primary"] else "non-Primary"
                    ),
                    "cluster_size": last["cluster_size"],
                    "ready": last["ready"],
                    "local_recv_queue": last["recv_queue"],
                    "flow_control_paused": last["flow_control_paused"],
                    "desync": last["desync"],
                    "read_only": last["read_only"],
                },
                lag_seconds=last["lag_seconds"],
            )
    return out


# -- one cluster -----------------------------------------------------------------------------------
def cluster_live(
    cluster: Cluster, now: float | None = None, backends: fleet_selectors.ServerFilter | None = None
) -> dict[str, Any]:
    """Hostgroups by servers by ProxySQL node from the nodes' latest pool and runtime rows, and each
    backend's wsrep state: every backend, or those the backend filter narrows to (the rows GET /api/v1/servers/
    answers for the cluster and that filter). Three queries and two MGETs; a fourth query with a filter."""
    now = now or time.time()
    nodes = list(fleet_selectors.proxysql_nodes(cluster=cluster.pk))
    servers = list(fleet_selectors.servers(cluster=cluster.pk))
    shown = list(fleet_selectors.servers(cluster=cluster.pk, **backends)) if backends else servers
    memberships = list(HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server"))
    px = latest(live.PROXYSQL, [n.pk for n in nodes])
    be = latest(live.BACKEND, [s.pk for s in shown]) if not px.unavailable else Latest(unavailable=px.unavailable)
    roles = cluster.hostgroup_roles()
    server_by_key = {(s.hostname, s.port): s for s in servers}

    keys: dict[tuple[int, str, int], HostgroupMembership | None] = {
        (m.hostgroup_id, m.server.hostname, m.server.port): m for m in memberships
    }
    node_views: list[dict[str, Any]] = []
    per_node = {}
    for n in nodes:
        doc = px.docs.get(n.pk)
        state, age = status.freshness(doc, cluster.poll_interval_s, now)
        node_views.append(
            {
                "node": n,
                "state": state,
                "colour": status.COLOURS[state],
                "age": age,
                "error": doc.error if doc else None,
                "version": status.polled_version(n, doc),
            }
        )
        pool = {tuple(r["key"]): r for r in (doc.pool if doc else None) or []}
        runtime = {
            (r["hostgroup_id"], r["hostname"], r["port"]): r for r in (doc.runtime_servers if doc else None) or []
        }
        per_node[n.pk] = (state, age, status.figures_age(doc, age, now), pool, runtime)
        for k in list(pool) + list(runtime):
            if k[0] in roles or any(k[0] == key[0] for key in keys):
                keys.setdefault(k, None)

    hostgroups: dict[int, dict[str, Any]] = {}
    for key in sorted(keys):
        hg, host, port = key
        m = keys[key]
        group = hostgroups.setdefault(hg, {"id": hg, "role": roles.get(hg, "other"), "servers": []})
        rows = []
        for n in nodes:
            state, age, figures_age, pool, runtime = per_node[n.pk]
            p, r = pool.get(key), runtime.get(key)
            rows.append(
                {
                    "node": n,
                    "state": state,
                    "age": age,
                    "figures_age": figures_age,
                    "present": bool(p or r),
                    "status": (p or {}).get("status") or (r or {}).get("status"),
                    "weight": (r or {}).get("weight"),
                    "conn_used": (p or {}).get("conn_used"),
                    "conn_free": (p or {}).get("conn_free"),
                    "queries_ps": (p or {}).get("queries_ps"),
                    "latency_us": (p or {}).get("latency_us"),
                }
            )
        group["servers"].append(
            {"host": host, "port": port, "server": server_by_key.get((host, port)), "intended": m, "rows": rows}
        )
    for hg, role in roles.items():
        hostgroups.setdefault(hg, {"id": hg, "role": role, "servers": []})

    backend_rows: list[dict[str, Any]] = []
    for s in shown:
        doc = be.docs.get(s.pk)
        state, age = status.freshness(doc, cluster.backend_poll_interval_s, now)
        d = doc or NO_BACKEND_DOC
        problems = (
            status.backend_problems_of(d.state, d.lag_seconds, cluster.max_replication_lag)
            if state == status.OK
            else []
        )
        backend_rows.append(
            {
                "server": s,
                "state": state,
                "age": age,
                "colour": status.backend_colour(state, problems),
                "label": status.wsrep_label_of(d.state),
                "wsrep": d.state or {},
                "problems": problems,
                "error": d.error,
                "error_since": _ts(d.error_since),
                "lag_seconds": d.lag_seconds,
            }
        )
    series = sorted({s for s in (versions.series(v["version"]) for v in node_views) if s})
    return {
        "cluster": cluster,
        "unavailable": px.unavailable or be.unavailable,
        "node_views": node_views,
        "mixed_versions": series if len(series) > 1 else [],
        "live_hostgroups": [hostgroups[k] for k in sorted(hostgroups)],
        "backends": backend_rows,
        "backend_count": len(servers),
        "proxysql_cluster": proxysql_cluster.cluster_view(nodes, px.docs),
    }


def sparklines(
    cluster: Cluster, servers: Iterable[Server] | None = None, now: float | None = None, minutes: int = 60
) -> tuple[list[dict[str, Any]], datetime | None, datetime | None]:
    """Per backend of the cluster, one mark per minute of the last hour from the raw samples (one query):
    the worst wsrep_local_state and the highest recv queue of each minute, None where no poll reached
    the node. Returns (rows, start, end)."""
    now = now or time.time()
    end = int(now // 60 * 60) + 60
    start = end - minutes * 60
    servers = list(servers if servers is not None else fleet_selectors.servers(cluster=cluster.pk))
    states: dict[int, list[int | None]] = {s.pk: [None] * minutes for s in servers}
    queues: dict[int, list[int | None]] = {s.pk: [None] * minutes for s in servers}
    rows = chunked_samples(
        {"server_id__in": list(states), "resolution": RAW, "ts__gte": _ts(start)},
        ["reachable", "local_state", "recv_queue"],
        BackendSample,
    )
    for server_id, ts, _, reachable, local_state, recv_queue in rows:
        if not reachable:
            continue
        i = int((ts.timestamp() - start) // 60)
        if server_id not in states or not 0 <= i < minutes:
            continue
        if local_state is not None:
            old = states[server_id][i]
            states[server_id][i] = local_state if old is None else min(old, local_state)
        if recv_queue is not None:
            old = queues[server_id][i]
            queues[server_id][i] = recv_queue if old is None else max(old, recv_queue)
    return ([{"server": s, "states": states[s.pk], "queue": queues[s.pk]} for s in servers], _ts(start), _ts(end))


# -- the query tools' figures (query_stats.py's part of the documents) ------------------------------
COMMANDS_SHOWN = 15
NEAR_LIMIT = 0.9  # a user at 90 % of its max_connections is marked


def _users(rows: Iterable[tuple[str, int, int]]) -> list[dict[str, Any]]:
    out = []
    for name, connections, limit in rows:
        ratio = connections / limit if limit else None
        out.append(
            {
                "username": name,
                "connections": connections,
                "max_connections": limit,
                "ratio": ratio,
                "near_limit": ratio is not None and ratio >= NEAR_LIMIT,
            }
        )
    return sorted(out, key=lambda u: (-(u["ratio"] or 0), -u["connections"], u["username"]))


def _query_stats_view(stats: dict[str, Any] | None, now: float) -> dict[str, Any] | None:
    """A document's `query_stats` for the pages: users by how near their limit, sessions by command, the most
    frequent backend errors, the busiest commands."""
    if not stats:
        return None
    commands = sorted(
        (
            {"command": name, "count": n, "total_s": t / 1e6, "avg_ms": (t / n / 1000) if n else None}
            for name, (n, t) in (stats.get("commands") or {}).items()
        ),
        key=lambda c: -c["count"],
    )
    sessions = sorted(
        (
            {"command": c, "count": n, "longest_ms": longest}
            for c, (n, longest) in (stats.get("sessions") or {}).items()
        ),
        key=lambda s: -s["count"],
    )
    errors = [
        {
            "hostgroup": e[0],
            "server": f"{e[1]}:{e[2]}",
            "username": e[3],
            "schemaname": e[4],
            "errno": e[5],
            "count": e[6],
            "first_seen": _ts(e[7]),
            "last_seen": _ts(e[8]),
            "last_error": e[9],
        }
        for e in stats.get("errors") or []
    ]
    return {
        "age": max(0.0, now - stats["ts"]),
        "error": stats.get("error"),
        "users": _users(stats.get("users") or []),
        "sessions": sessions,
        "sessions_total": sum(s["count"] for s in sessions),
        "errors": errors,
        "errors_total": sum(e["count"] for e in errors),
        "commands": commands[:COMMANDS_SHOWN],
        "commands_more": max(0, len(commands) - COMMANDS_SHOWN),
        "interval_s": settings.MONITOR_QUERY_STATS_INTERVAL_S,
    }


def proxysql_query_stats(node: ProxySQLNode, now: float | None = None) -> dict[str, Any]:
    now = now or time.time()
    got = latest(live.PROXYSQL, [node.pk], QueryStatsDoc)
    doc = got.docs.get(node.pk)
    return {
        "node": node,
        "unavailable": got.unavailable,
        "qs": _query_stats_view(doc and doc.query_stats, now),
        "shared_with": [n.cluster.name for n in node.shares_with()],
    }


def cluster_query_stats(cluster: Cluster, now: float | None = None) -> dict[str, Any]:
    """Per node: sessions, client connections of its users, backend errors; and every user over the nodes (its
    connections summed, against its limit on each node)."""
    now = now or time.time()
    nodes = list(fleet_selectors.proxysql_nodes(cluster=cluster.pk))
    got = latest(live.PROXYSQL, [n.pk for n in nodes], QueryStatsDoc)
    rows: list[dict[str, Any]] = []
    users: dict[str, dict[str, Any]] = {}
    for n in nodes:
        doc = got.docs.get(n.pk)
        view = _query_stats_view(doc and doc.query_stats, now)
        rows.append({"node": n, "qs": view})
        for u in (view or {}).get("users") or []:
            total = users.setdefault(
                u["username"], {"username": u["username"], "connections": 0, "limits": set(), "near_limit_on": []}
            )
            total["connections"] += u["connections"]
            total["limits"].add(u["max_connections"])
            if u["near_limit"]:
                total["near_limit_on"].append(n.name)
    for u in users.values():
        u["limits"] = sorted(u["limits"])
    return {
        "cluster": cluster,
        "unavailable": got.unavailable,
        "query_nodes": rows,
        "query_users": sorted(
            users.values(), key=lambda u: (-len(u["near_limit_on"]), -u["connections"], u["username"])
        ),
    }


# -- the contexts of the pages that show these sections (apps/pages/views.py and the partials here) ---------
# (the ProxySQL node page's context mixes in digests' mirror rules: apps/pages/node.py)
def server_context(server: Server) -> dict[str, Any]:
    return {**backend_live(server), "stale_factor": status.STALE_FACTOR}


def sparkline_context(cluster: Cluster) -> dict[str, Any]:
    rows, start, end = sparklines(cluster)
    return {"cluster": cluster, "spark_rows": rows, "spark_start": start, "spark_end": end}


# -- read now, for the pages' live fragments (a person asked: one node or backend, read at once) -------------------
def runtime_servers_now(node: ProxySQLNode) -> dict[str, Any]:
    """The node's runtime_mysql_servers read now: {"rows", "error", "shared_with", "hidden"}. A ProxySQL serving
    several clusters: this cluster's rows only, the others' counted in `hidden` (they are on their own pages)."""
    rows: list[Any] = []
    error: ClientError | None = None
    try:
        with ProxySQLAdmin.for_node(node) as admin:
            rows = admin.servers("runtime")
    except ClientError as exc:
        error = exc
    others = [n.cluster.name for n in node.shares_with()]
    hidden = 0
    if others:
        mine = node.cluster.hostgroup_ids()
        hidden = sum(1 for r in rows if r.hostgroup_id not in mine)
        rows = [r for r in rows if r.hostgroup_id in mine]
    return {"rows": rows, "error": error, "shared_with": others, "hidden": hidden}


def backend_state_now(server: Server) -> dict[str, Any]:
    """What the backend says about itself now (wsrep, read_only): {"state", "error"}."""
    if not server.cluster.monitor_user:
        return {"state": None, "error": "No monitor credentials are set for this cluster (Django admin, cluster page)."}
    try:
        with BackendClient.for_server(server) as client:
            return {"state": client.state(), "error": None}
    except ClientError as exc:
        return {"state": None, "error": exc}
