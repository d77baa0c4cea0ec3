"""Reads for the monitoring pages: the latest state from Redis (one MGET per kind) joined to the
inventory (a few flat queries, no per-node query), and the last known figures from the database when
Redis is down.

Everything here returns plain dicts and lists ready for a template; status.py says what they mean.
"""
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone

from django.urls import reverse

from apps.clients.proxysql import SERVER_FIELDS
from apps.fleet import drift
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server

from . import live, status
from .models import RAW, BackendSample, PoolSample, ProxySQLSample

OVERVIEW_PAGE_SIZE = 25
ATTENTION_SHOWN = 200


@dataclass
class Latest:
    """Latest-state documents of one kind, or why there are none."""

    docs: dict = field(default_factory=dict)
    unavailable: str = ""  # "" when Redis answered


def latest(kind, pks):
    try:
        return Latest(docs=live.read_many(kind, pks))
    except live.LiveUnavailable as exc:
        return Latest(unavailable=str(exc) or "Redis unavailable")


def _url_maker(name):
    """reverse() once, then format: a thousand reverse() calls would cost more than the page."""
    pattern = reverse(name, args=[987654321]).replace("987654321", "{}")
    return pattern.format


def _ts(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc) if epoch else None


# -- the fleet overview ----------------------------------------------------------------------------
def _intended_by_cluster():
    """{cluster_id: {(hg, host, port): {field: value}}} for every cluster, in one query."""
    intended = defaultdict(dict)
    for row in HostgroupMembership.objects.values_list("server__cluster_id", "hostgroup_id", "server__hostname",
                                                       "server__port", *SERVER_FIELDS):
        intended[row[0]][(row[1], row[2], row[3])] = dict(zip(SERVER_FIELDS, row[4:]))
    return intended


def _hostgroups(cluster, intended):
    hgs = {cluster["writer_hostgroup"], cluster["reader_hostgroup"]}
    hgs |= {cluster[k] for k in ("backup_writer_hostgroup", "offline_hostgroup") if cluster[k] is not None}
    return hgs | {k[0] for k in intended}


def _since(doc):
    return _ts(doc.get("error_since")) if doc else None


def fleet_overview(*, page=1, only_attention=False, now=None):
    """Everything the overview shows: the attention list (whole fleet, always), the clusters of one page,
    fleet totals. Five database queries and one Redis MGET per kind, whatever the fleet's size."""
    now = now or time.time()
    clusters = list(Cluster.objects.order_by("name").values(
        "id", "name", "kind", "poll_interval_s", "max_replication_lag", "writer_hostgroup", "reader_hostgroup",
        "backup_writer_hostgroup", "offline_hostgroup"))
    by_id = {c["id"]: c for c in clusters}
    nodes = list(ProxySQLNode.objects.order_by("name").values_list("id", "cluster_id", "name"))
    servers = list(Server.objects.order_by("hostname", "port").values_list("id", "cluster_id", "hostname", "port"))
    intended = _intended_by_cluster()

    px = latest(live.PROXYSQL, [n[0] for n in nodes])
    be = latest(live.BACKEND, [s[0] for s in servers]) if not px.unavailable else Latest(unavailable=px.unavailable)
    unavailable = px.unavailable or be.unavailable

    node_url, server_url, cluster_url = (_url_maker("fleet:proxysql_node"), _url_maker("fleet:server"),
                                         _url_maker("fleet:cluster"))
    for c in clusters:
        c.update(url=cluster_url(c["id"]), nodes=[], servers=[], attention=0, oldest=None)
    attention = []
    totals = {"nodes": len(nodes), "nodes_ok": 0, "servers": len(servers), "servers_ok": 0, "questions_ps": 0.0}

    def attend(colour, what, cluster, name, url, detail, since=None):
        cluster["attention"] += 1
        attention.append({"colour": colour, "what": what, "cluster": cluster["name"], "cluster_url": cluster["url"],
                          "name": name, "url": url, "detail": detail, "since": since})

    runtime_by_cluster = defaultdict(dict)
    for pk, cluster_id, name in nodes:
        c = by_id[cluster_id]
        doc = px.docs.get(pk)
        state, age = status.freshness(doc, c["poll_interval_s"], now) if not unavailable else (status.NODATA, None)
        figures = (doc or {}).get("figures") or {}
        entry = {"id": pk, "name": name, "url": node_url(pk), "state": state, "colour": status.COLOURS[state],
                 "age": age, "questions_ps": figures.get("questions_ps"), "conn_used": figures.get("conn_used"),
                 "conn_free": figures.get("conn_free"), "error": (doc or {}).get("error")}
        c["nodes"].append(entry)
        if age is not None and (c["oldest"] is None or age > c["oldest"]):
            c["oldest"] = age
        if state == status.UNREACHABLE:
            attend("red", "unreachable", c, name, entry["url"], f"{doc.get('error_kind')}: {doc.get('error')}",
                   _since(doc))
            continue
        if state == status.STALE:
            last = f"; last poll failed: {doc.get('error')}" if not doc.get("ok", True) else ""
            attend("grey", "stale", c, name, entry["url"], f"no poll for {status_age(age)}{last}", _ts(doc["ts"]))
            continue
        if state != status.OK:
            continue
        totals["nodes_ok"] += 1
        totals["questions_ps"] += figures.get("questions_ps") or 0
        verdict = status.mirror(figures)
        if verdict.saturated:
            entry["colour"] = "amber"
            attend("amber", "mirror", c, name, entry["url"], verdict.summary())
        rows = doc.get("runtime_servers")
        if rows is not None:
            runtime_by_cluster[cluster_id][name] = rows
            diffs = drift.compare(intended.get(cluster_id, {}), rows, _hostgroups(c, intended.get(cluster_id, {})))
            if diffs:
                entry["colour"] = "amber"
                first = diffs[0]
                more = f" and {len(diffs) - 1} more" if len(diffs) > 1 else ""
                attend("amber", "drift", c, name, c["url"] + "#drift-section",
                       f"hg {first.hostgroup_id} {first.hostname}:{first.port} {first.field}: intended "
                       f"{first.intended}, runtime {first.runtime}{more}")
    for cluster_id, per_node in runtime_by_cluster.items():
        c = by_id[cluster_id]
        between = drift.between_nodes(per_node, _hostgroups(c, intended.get(cluster_id, {})))
        if between:
            d = between[0]
            values = ", ".join(f"{n}: {v}" for n, v in d["values"].items())
            more = f" and {len(between) - 1} more" if len(between) > 1 else ""
            attend("amber", "drift", c, "ProxySQL nodes disagree", c["url"] + "#drift-section",
                   f"hg {d['key'][0]} {d['key'][1]}:{d['key'][2]} {d['field']} ({values}){more}")

    for pk, cluster_id, hostname, port in servers:
        c = by_id[cluster_id]
        doc = be.docs.get(pk)
        name = f"{hostname}:{port}"
        state, age = status.freshness(doc, c["poll_interval_s"], now) if not unavailable else (status.NODATA, None)
        problems = status.backend_problems(doc, c["max_replication_lag"]) if state == status.OK else []
        st = (doc or {}).get("state") or {}
        entry = {"id": pk, "name": name, "url": server_url(pk), "state": state, "age": age,
                 "colour": status.backend_colour(state, problems), "label": status.wsrep_label(doc),
                 "recv_queue": st.get("local_recv_queue")}
        c["servers"].append(entry)
        if age is not None and (c["oldest"] is None or age > c["oldest"]):
            c["oldest"] = age
        if state == status.UNREACHABLE:
            attend("red", "unreachable", c, name, entry["url"], f"{doc.get('error_kind')}: {doc.get('error')}",
                   _since(doc))
        elif state == status.STALE:
            attend("grey", "stale", c, name, entry["url"], f"no poll for {status_age(age)}", _ts(doc["ts"]))
        elif state == status.OK:
            if problems:
                for colour, text in problems:
                    attend(colour, "not synced" if text.startswith("wsrep") else "backend", c, name, entry["url"], text)
            else:
                totals["servers_ok"] += 1

    order = {"red": 0, "amber": 1, "grey": 2}
    attention.sort(key=lambda a: (order[a["colour"]], a["cluster"], a["name"]))
    listed = [c for c in clusters if c["attention"]] if only_attention else clusters
    pages = max(1, -(-len(listed) // OVERVIEW_PAGE_SIZE))
    page = min(max(1, page), pages)
    shown = listed[(page - 1) * OVERVIEW_PAGE_SIZE: page * OVERVIEW_PAGE_SIZE]
    return {
        "clusters": shown, "cluster_count": len(clusters), "listed_count": len(listed), "page": page, "pages": pages,
        "only_attention": only_attention, "attention": attention[:ATTENTION_SHOWN], "attention_count": len(attention),
        "totals": totals, "unavailable": unavailable, "now": _ts(now),
    }


def status_age(age):
    from .templatetags.monitoring import age as age_filter

    return age_filter(age)


# -- one ProxySQL node -----------------------------------------------------------------------------
def proxysql_live(node, now=None):
    """The node's latest state for its page: freshness, figures, the mirror verdict, the pool rows.
    When Redis is down, the last pool poll stored in the database stands in (and says so)."""
    now = now or time.time()
    cluster = node.cluster
    got = latest(live.PROXYSQL, [node.pk])
    doc = got.docs.get(node.pk)
    state, age = status.freshness(doc, cluster.poll_interval_s, now)
    out = {"node": node, "unavailable": got.unavailable, "doc": doc, "state": state, "colour": status.COLOURS[state],
           "age": age, "error": None, "error_kind": None, "error_since": None, "last_ok": None,
           "figures": {}, "pool": [], "from_history": None}
    if doc:
        out.update(error=doc.get("error"), error_kind=doc.get("error_kind"), error_since=_ts(doc.get("error_since")),
                   last_ok=_ts(doc.get("last_ok")), figures=doc.get("figures") or {},
                   variables_age=(now - doc["variables_ts"]) if doc.get("variables_ts") else None)
        roles = cluster.hostgroup_roles()
        out["pool"] = sorted(({"hostgroup": r["key"][0], "role": roles.get(r["key"][0], "other"),
                               "host": r["key"][1], "port": r["key"][2], "status": r.get("status"),
                               "conn_used": r.get("conn_used"), "conn_free": r.get("conn_free"),
                               "queries_ps": r.get("queries_ps"), "latency_us": r.get("latency_us"),
                               "conn_err_ps": r.get("conn_err_ps"), "bytes_sent_ps": r.get("bytes_sent_ps"),
                               "bytes_recv_ps": r.get("bytes_recv_ps")} for r in doc.get("pool") or []),
                             key=lambda r: (r["hostgroup"], r["host"], r["port"]))
    elif got.unavailable:
        out.update(_pool_from_history(node, now))
    out["mirror"] = status.mirror(out["figures"])
    return out


def _pool_from_history(node, now):
    last = (ProxySQLSample.objects.filter(node=node, resolution=RAW, reachable=True)
            .order_by("-ts").values("ts", *[f.name for f in ProxySQLSample._meta.concrete_fields
                                            if f.name not in ("id", "node", "ts", "resolution", "reachable")]).first())
    if not last:
        return {}
    roles = node.cluster.hostgroup_roles()
    rows = PoolSample.objects.filter(node=node, resolution=RAW, ts=last["ts"]).order_by("hostgroup", "srv_host",
                                                                                        "srv_port")
    pool = [{"hostgroup": r.hostgroup, "role": roles.get(r.hostgroup, "other"), "host": r.srv_host, "port": r.srv_port,
             "status": r.status, "conn_used": r.conn_used, "conn_free": r.conn_free, "queries_ps": r.queries_ps,
             "latency_us": r.latency_us, "conn_err_ps": r.conn_err_ps, "bytes_sent_ps": r.bytes_sent_ps,
             "bytes_recv_ps": r.bytes_recv_ps} for r in rows]
    ts = last.pop("ts")
    return {"figures": last, "pool": pool, "from_history": ts, "age": now - ts.timestamp()}


# -- one backend -----------------------------------------------------------------------------------
def backend_live(server, now=None):
    now = now or time.time()
    cluster = server.cluster
    got = latest(live.BACKEND, [server.pk])
    doc = got.docs.get(server.pk)
    state, age = status.freshness(doc, cluster.poll_interval_s, now)
    problems = status.backend_problems(doc, cluster.max_replication_lag) if state == status.OK else []
    out = {"server": server, "unavailable": got.unavailable, "doc": doc, "state": state, "age": age,
           "colour": status.backend_colour(state, problems), "problems": problems, "label": status.wsrep_label(doc),
           "wsrep": (doc or {}).get("state") or {}, "lag_seconds": (doc or {}).get("lag_seconds"),
           "error": (doc or {}).get("error"), "error_kind": (doc or {}).get("error_kind"),
           "error_since": _ts((doc or {}).get("error_since")), "last_ok": _ts((doc or {}).get("last_ok")),
           "from_history": None}
    if not doc and got.unavailable:
        last = (BackendSample.objects.filter(server=server, resolution=RAW, reachable=True).order_by("-ts").first())
        if last:
            out.update(from_history=last.ts, age=now - last.ts.timestamp(), label=status.WSREP_STATES.get(
                last.local_state, "" if last.local_state is None else str(last.local_state)),
                wsrep={"wsrep_on": last.local_state is not None, "local_state": last.local_state,
                       "cluster_status": None if last.primary is None else ("Primary" if last.primary else "non-Primary"),
                       "cluster_size": last.cluster_size, "ready": last.ready, "local_recv_queue": last.recv_queue,
                       "flow_control_paused": last.flow_control_paused, "desync": last.desync,
                       "read_only": last.read_only},
                lag_seconds=last.lag_seconds)
    return out


# -- one cluster -----------------------------------------------------------------------------------
def cluster_live(cluster, now=None):
    """Hostgroups by servers by ProxySQL node from the nodes' latest pool and runtime rows, and each
    backend's wsrep state. Three queries and two MGETs."""
    now = now or time.time()
    nodes = list(cluster.proxysql_nodes.order_by("name"))
    servers = list(cluster.servers.order_by("hostname", "port"))
    memberships = list(HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server"))
    px = latest(live.PROXYSQL, [n.pk for n in nodes])
    be = latest(live.BACKEND, [s.pk for s in servers]) if not px.unavailable else Latest(unavailable=px.unavailable)
    roles = cluster.hostgroup_roles()
    server_by_key = {(s.hostname, s.port): s for s in servers}

    keys = {(m.hostgroup_id, m.server.hostname, m.server.port): m for m in memberships}
    node_views = []
    per_node = {}
    for n in nodes:
        doc = px.docs.get(n.pk)
        state, age = status.freshness(doc, cluster.poll_interval_s, now)
        node_views.append({"node": n, "state": state, "colour": status.COLOURS[state], "age": age,
                           "error": (doc or {}).get("error")})
        pool = {tuple(r["key"]): r for r in (doc or {}).get("pool") or []}
        runtime = {(r["hostgroup_id"], r["hostname"], r["port"]): r for r in (doc or {}).get("runtime_servers") or []}
        per_node[n.pk] = (state, age, pool, runtime)
        for k in list(pool) + list(runtime):
            if k[0] in roles or any(k[0] == key[0] for key in keys):
                keys.setdefault(k, None)

    hostgroups = {}
    for key in sorted(keys):
        hg, host, port = key
        m = keys[key]
        group = hostgroups.setdefault(hg, {"id": hg, "role": roles.get(hg, "other"), "servers": []})
        rows = []
        for n in nodes:
            state, age, pool, runtime = per_node[n.pk]
            p, r = pool.get(key), runtime.get(key)
            rows.append({"node": n, "state": state, "age": age, "present": bool(p or r),
                         "status": (p or {}).get("status") or (r or {}).get("status"),
                         "weight": (r or {}).get("weight"), "conn_used": (p or {}).get("conn_used"),
                         "conn_free": (p or {}).get("conn_free"), "queries_ps": (p or {}).get("queries_ps"),
                         "latency_us": (p or {}).get("latency_us")})
        group["servers"].append({"host": host, "port": port, "server": server_by_key.get((host, port)),
                                 "intended": m, "rows": rows})
    for hg, role in roles.items():
        hostgroups.setdefault(hg, {"id": hg, "role": role, "servers": []})

    backends = []
    for s in servers:
        doc = be.docs.get(s.pk)
        state, age = status.freshness(doc, cluster.poll_interval_s, now)
        problems = status.backend_problems(doc, cluster.max_replication_lag) if state == status.OK else []
        backends.append({"server": s, "state": state, "age": age, "colour": status.backend_colour(state, problems),
                         "label": status.wsrep_label(doc), "wsrep": (doc or {}).get("state") or {},
                         "problems": problems, "error": (doc or {}).get("error"),
                         "error_since": _ts((doc or {}).get("error_since")), "lag_seconds": (doc or {}).get("lag_seconds")})
    return {"cluster": cluster, "unavailable": px.unavailable or be.unavailable, "node_views": node_views,
            "live_hostgroups": [hostgroups[k] for k in sorted(hostgroups)], "backends": backends}


def sparklines(cluster, servers=None, now=None, minutes=60):
    """Per backend of the cluster, one mark per minute of the last hour from the raw samples (one query):
    the worst wsrep_local_state and the highest recv queue of each minute, None where no poll reached
    the node. Returns (rows, start, end)."""
    now = now or time.time()
    end = int(now // 60 * 60) + 60
    start = end - minutes * 60
    servers = list(servers if servers is not None else cluster.servers.order_by("hostname", "port"))
    states = {s.pk: [None] * minutes for s in servers}
    queues = {s.pk: [None] * minutes for s in servers}
    rows = (BackendSample.objects.filter(server__cluster=cluster, resolution=RAW, reachable=True, ts__gte=_ts(start))
            .values_list("server_id", "ts", "local_state", "recv_queue"))
    for server_id, ts, local_state, recv_queue in rows:
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
