"""The failover of ProxySQL's own manager on a natively managed cluster (Cluster.native_manager galera or replication),
seen, measured and said. There Monitor moves the writer by itself on every ProxySQL node (lab/reference/native-galera/:
a stopped writer replaced at the next healthcheck; native-replication/: a dead or read_only primary leaves the writer
hostgroup and nobody is promoted). The product's own failover stays out (operations/rules.py: two actors moving the
writer would fight); this watches the placement the ProxySQL polls read, after every poll round:

- the writer Monitor had placed on every node leaves the writer hostgroup on a node, or its backend stops answering
  the backend polls: "writer death seen" at the earliest of those polls; the event alert native_failover fires;
- every node then places one and the same new writer ONLINE: the move is recorded in the audit log ("writer moved by
  ProxySQL's Galera manager", old, new, when the death was seen, when the last node placed the new writer, the time
  between) and the alert resolved with that said;
- no node places a writer (the replication manager promotes nobody): the alert says so, promotion being the DBA's or
  their tooling's; it resolves, measured the same way, when a writer is placed again on every node.
The times are the polls' (each node's first poll that showed the new writer): their resolution is the poll interval.
During an operation of the product on the cluster (its own switchover moves the writer) nothing is said.
"""

import json
import logging
from datetime import datetime, timezone

from django.conf import settings

from apps.audit.actor import Actor
from apps.audit.models import ActorKind, AuditEvent
from apps.audit.services import record
from apps.fleet.choices import NativeManager
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.monitoring import formatting, live
from apps.operations.locks import current_holder

from . import events
from .lean import BackendDoc, ProxySQLDoc
from .models import Alert

log = logging.getLogger(__name__)
RULE = "native_failover"
WATCHER = "native manager watch"  # who the audit says noticed it
MOVED = "writer moved by ProxySQL's {manager} manager"
LEFT = "writer left, none placed by ProxySQL's {manager} manager"
MANAGERS = {NativeManager.GALERA: "Galera", NativeManager.REPLICATION: "replication"}
STATE_TTL_S = 7 * 86400


def after_round(kind, docs, now):
    """After a ProxySQL or backend poll round (docs {pk: ...} of its targets): watch each natively managed cluster
    with a polled node or backend."""
    model = ProxySQLNode if kind == live.PROXYSQL else Server
    ids = set(
        model.objects.filter(pk__in=list(docs), cluster__native_manager__in=list(MANAGERS)).values_list(
            "cluster_id", flat=True
        )
    )
    for cluster in Cluster.objects.filter(pk__in=ids):
        try:
            watch(cluster, now)
        except live.LiveUnavailable:
            return


def _writers(doc, W):
    """The ONLINE writers a node's latest poll read ("host:port", sorted), or None when it has no good poll."""
    if doc is None or not doc.ok or doc.runtime_servers is None:
        return None
    return sorted(
        f"{r['hostname']}:{r['port']}"
        for r in doc.runtime_servers
        if int(r["hostgroup_id"]) == W and r["status"] == "ONLINE"
    )


def _key(cluster):
    return f"native_writer:{cluster.pk}"


def watch(cluster, now):
    """One look at the cluster's latest polls; the state between looks is kept in Redis. Returns what it said
    ("moved", "back", "left", "none") or None."""
    r = live.client()
    if current_holder(cluster) is not None:  # the product's own operation moves the writer: not the manager's failover
        r.delete(_key(cluster))
        return None
    nodes = dict(cluster.proxysql_nodes.values_list("pk", "name"))
    docs = live.read_typed(live.PROXYSQL, list(nodes), ProxySQLDoc)
    seen = {pk: _writers(doc, cluster.writer_hostgroup) for pk, doc in docs.items()}
    answered = {pk: w for pk, w in seen.items() if w is not None}
    if not answered:
        return None
    agreed = next(iter(answered.values()))
    agreed = (
        agreed[0]
        if len(answered) == len(nodes) and len(agreed) == 1 and all(w == [agreed[0]] for w in answered.values())
        else None
    )
    raw = r.get(_key(cluster))
    state = json.loads(raw) if raw else {}
    old = state.get("writer")
    said = None
    if old is None:
        if agreed:
            state = {"writer": agreed}
    elif agreed == old and state.get("left_ts") is None:
        return None  # steady
    else:
        if state.get("left_ts") is None:
            gone = [pk for pk, w in answered.items() if old not in w]
            down = _backend_down_since(cluster, old)
            if not gone and down is None:
                return None
            state["left_ts"] = min([docs[pk].ts for pk in gone] + ([down] if down is not None else []))
            state["places"] = {}
            said = "left"
            _alert(
                cluster,
                old,
                state,
                f"Writer {old} left writer hostgroup {cluster.writer_hostgroup} (death seen at "
                f"{_at(state['left_ts'])}); ProxySQL's {MANAGERS[cluster.native_manager]} manager is failing over"
                + (
                    ""
                    if cluster.native_manager == NativeManager.GALERA
                    else ": it promotes nobody; a new primary is the DBA's or their tooling's (read_only OFF on it)"
                ),
            )
        for pk, w in answered.items():  # each node's first poll that showed its one writer now
            if len(w) == 1 and state["places"].get(str(pk), [None])[0] != w[0]:
                state["places"][str(pk)] = [w[0], docs[pk].ts]
        if agreed is not None:
            said = _placed(cluster, old, agreed, state, nodes)
            state = {"writer": agreed}
        elif not any(answered.values()) and not state.get("none_said"):
            state["none_said"] = True
            said = "none"
            _alert(
                cluster,
                old,
                state,
                f"No writer: writer {old} left writer hostgroup {cluster.writer_hostgroup} at "
                f"{_at(state['left_ts'])} and ProxySQL's {MANAGERS[cluster.native_manager]} manager placed none on "
                f"any node"
                + (
                    "; it promotes nobody: a new primary is the DBA's or their tooling's (read_only OFF "
                    "on it), Monitor then places it"
                    if cluster.native_manager == NativeManager.REPLICATION
                    else ""
                ),
            )
    r.set(_key(cluster), json.dumps(state), ex=STATE_TTL_S)
    return said


def _placed(cluster, old, new, state, nodes):
    """Every node places one writer, the same: the manager's failover (or the old writer back) recorded, measured."""
    online_ts = (
        max(ts for w, ts in state["places"].values() if w == new)
        if any(w == new for w, _ in state["places"].values())
        else state["left_ts"]
    )
    ms = round(max(0.0, online_ts - state["left_ts"]) * 1000, 1)
    manager = MANAGERS[cluster.native_manager]
    details = {
        "manager": manager,
        "old_writer": old,
        "new_writer": new,
        "death_seen_at": state["left_ts"],
        "online_everywhere_at": online_ts,
        "failover_ms": ms,
        "nodes": {nodes.get(int(pk), pk): ts for pk, (w, ts) in state["places"].items() if w == new},
    }
    if new == old:
        words = (
            f"Writer {old} placed again by ProxySQL's {manager} manager on every node "
            f"{formatting.milliseconds(ms)} after it left"
        )
        record(
            f"writer back, placed by ProxySQL's {manager} manager",
            actor=Actor.rule(WATCHER),
            cluster=cluster,
            target=new,
            details=details,
            duration_ms=ms,
        )
    else:
        words = (
            f"Writer changed by ProxySQL's {manager} manager from {old} to {new}: writer death seen at "
            f"{_at(state['left_ts'])}, new writer ONLINE on every node at {_at(online_ts)} "
            f"(+{formatting.milliseconds(ms)}, at the polls' resolution)"
        )
        record(
            MOVED.format(manager=manager),
            actor=Actor.rule(WATCHER),
            cluster=cluster,
            target=new,
            details=details,
            duration_ms=ms,
        )
    if settings.ALERTS_ENABLED:
        alert = Alert.objects.filter(active_key=f"{RULE}|c{cluster.pk}").first()
        if alert is not None:
            Alert.objects.filter(pk=alert.pk).update(
                summary=words, details={**(alert.details or {}), **details}, value=ms
            )
            events.resolve_event(RULE, f"c{cluster.pk}")
    return "back" if new == old else "moved"


def recent_moves(cluster_id, start=None, end=None, limit=10):
    """The manager's writer moves this watch recorded (audit events), newest first: for the cluster page and the
    reports."""
    events = AuditEvent.objects.filter(cluster_id=cluster_id, actor_kind=ActorKind.RULE, actor=WATCHER)
    if start is not None:
        events = events.filter(created_at__gte=start, created_at__lt=end)
    return [
        {"at": e.created_at, "action": e.action, **(e.details or {})} for e in events.order_by("-created_at")[:limit]
    ]


def _alert(cluster, old, state, words):
    if not settings.ALERTS_ENABLED:
        return
    details = {"old_writer": old, "death_seen_at": state["left_ts"]}
    alert = events.raise_event(
        RULE, cluster.pk, f"c{cluster.pk}", f"{cluster.name}: writer {old}", words, details=details
    )
    if alert is not None and alert.summary != words:  # already open (left, then none placed): say the news
        Alert.objects.filter(pk=alert.pk).update(summary=words)


def _backend_down_since(cluster, writer):
    """When the backend polls first failed to reach the writer, if they do now (None otherwise)."""
    host, _, port = writer.rpartition(":")
    server = cluster.servers.filter(hostname=host, port=int(port)).values_list("pk", flat=True).first()
    if server is None:
        return None
    doc = live.read_typed(live.BACKEND, [server], BackendDoc).get(server)
    return (doc.error_since or doc.ts) if doc is not None and not doc.ok else None


def _at(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%H:%M:%S.%f")[:-3]
