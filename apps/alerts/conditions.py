"""The rules' conditions: pure functions over the latest-state documents that the poll rounds write
(apps/monitoring/pollers.py) and a snapshot of the inventory (context.py). No I/O here.

Each returns Observations: one per rule and subject whose condition holds now, with the figures that
show it. A rule that holds for nobody returns nothing; evaluate.py resolves what is no longer observed.

Three levels, by what a check needs:
  node    one ProxySQL node's document          (target "n<node>")
  server  one backend's document                (target "s<server>")
  cluster every document of the cluster, and its operations (target "c<cluster>")
  channel one DR channel's document (apps/dr/polling.py, kind "channel"), on its replica cluster
          (target "ch<channel>")
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from apps.configuration import drift as layers_drift
from apps.dr.choices import ChannelState
from apps.monitoring import proxysql_cluster, status
from apps.monitoring.formatting import duration

from .catalogue import BY_KEY
from .context import ChannelCtx, ClusterCtx, NodeCtx, OperationAlert, ServerCtx

if TYPE_CHECKING:  # why: the types only; rulesettings reads the database, nothing of it runs here
    from apps.configuration.drift import StoredResult
    from apps.fleet.drift import LayerDifference, LayerFinding

    from .rulesettings import Effective

Doc = dict[str, Any]  # a latest-state document as the poll wrote it (JSON: its values are any)
Settings = Mapping[str, "Effective"]  # rulesettings.for_cluster(): each rule's effective settings

NODE_RULES = (
    "proxysql_unreachable",
    "proxysql_auth",
    "poll_latency",
    "mirror_queue",
    "conn_errors",
    "drift",
    "restart_drift",
    "backend_shunned",
    "backend_flapping",
    "proxysql_cluster_diff_growing",
)
SERVER_RULES = (
    "backend_unreachable",
    "galera_non_primary",
    "galera_not_ready",
    "galera_desynced",
    "galera_recv_queue",
    "galera_flow_control",
    "replica_lag",
    "replication_stopped",
)
CLUSTER_RULES = (
    "writer_none",
    "writer_many",
    "writer_disagree",
    "readers_low",
    "galera_cluster_size",
    "proxysql_cluster_diverged",
    "operation_failed",
    "rollback_pending",
    "finish_pending",
)
CHANNEL_RULES = ("channel_stopped", "channel_lag")
# What a pass judges of a ProxySQL node it cannot read (its last poll failed, or is stale): whether it answers. Its
# other alerts (a backend SHUNNED on it, drift, a disk a restart would load) stand as they were until it answers
# again: its silence tells nothing of them, and resolving them would tell the on-call they are over.
NODE_REACH_RULES = ("proxysql_unreachable", "proxysql_auth")


def node_rules(c: ClusterCtx, doc: Doc | None, now: float) -> tuple[str, ...]:
    """The rules a pass over this node's document judges: what it does not observe of them is resolved."""
    if doc is not None and (_stale(doc, c, now) or not doc.get("ok", True)):
        return NODE_REACH_RULES
    return NODE_RULES


@dataclass
class Observation:
    rule: str
    subject: str
    target: str
    label: str
    summary: str
    value: float | None = None
    details: dict[str, Any] = field(default_factory=dict)
    started: float | None = None  # when the condition began, when the document says (else: first seen)
    node: int | None = None
    server: int | None = None
    hostgroup: int | None = None
    operation: int | None = None


def node_label(n: NodeCtx) -> str:
    return f"ProxySQL {n.name} ({n.admin_host}:{n.admin_port})"


def _age(doc: Doc, now: float) -> float:
    return max(0.0, now - doc["ts"])


def _stale(doc: Doc, c: ClusterCtx, now: float, backend: bool = False) -> bool:
    return _age(doc, now) > status.stale_after(c.backend_interval if backend else c.interval)


is_stale = _stale


def _on(settings: Settings, key: str) -> bool:
    return settings[key].enabled


# -- one ProxySQL node -------------------------------------------------------------------------------
ENGINE_FRESH_S = 120  # the drift watcher runs every 30 s: an older result is not judged (nothing resolved on it)


def _engine_result(doc: Doc, now: float) -> "StoredResult | None":
    """The drift watcher's last result for this node (a configuration.drift.StoredResult: evaluate.with_layers
    attaches it), None when there is none, it is too old, or the watcher could not read the node (unreachable is
    its own rule)."""
    result: StoredResult | None = doc.get("layers_drift")
    if result is None or result.error or now - result.ts > ENGINE_FRESH_S:
        return None
    return result


def _runtime_words(d: Mapping[str, Any], intent: str) -> str:
    """A runtime difference (drift.runtime_difference) in words; intent: "the inventory", "version 3"."""
    if d["field"] == "row":
        return f"{d['where']} is {d['runtime']} at runtime, {intent} says {d['intended']}"
    if d["field"] == "value":  # a global variable
        return f"{d['where']} is {d['runtime']}, {intent} says {d['intended']}"
    return f"{d['where']} {d['field']} is {d['runtime']}, {intent} says {d['intended']}"


# {(node pk, layer): (what was compared, its result)}: a node's polled rows and the inventory stay the same from one
# poll to the next, so the drift engine runs when either changed, not at every poll (it was ~40 % of a poll's CPU in a
# fleet with drift: docs/benchmarks.md, issue 40).
_compared: dict[tuple[int, str], tuple[tuple[object, ...], "Compared"]] = {}
Compared = tuple[list["LayerDifference"], list["LayerFinding"]]  # layers_drift.compare_node()'s answer


def _compare_polled(c: ClusterCtx, n: NodeCtx, layer: str, rows: list[dict[str, Any]]) -> Compared:
    """layers_drift.compare_polled() of one node's polled layer, again only when its rows or the intent changed."""
    key = (
        n.name,
        c.intended_fingerprint,
        tuple(sorted(c.hostgroups)),
        c.writer_hostgroup,
        tuple(sorted(c.managed)),
        json.dumps(rows, sort_keys=True, default=str),
    )
    last = _compared.get((n.pk, layer))
    if last is not None and last[0] == key:
        return last[1]
    result: Compared = layers_drift.compare_polled(
        n.name, c.intended, {layer: rows}, c.hostgroups, c.writer_hostgroup, managed=c.managed
    )
    _compared[(n.pk, layer)] = (key, result)
    return result


def node_observations(c: ClusterCtx, n: NodeCtx, doc: Doc | None, now: float, settings: Settings) -> list[Observation]:
    """Rules on one ProxySQL node's latest-state document."""
    if doc is None:
        return []  # never polled yet: the overview says so; nothing to alert on
    out: list[Observation] = []
    target, subject = f"n{n.pk}", f"n{n.pk}"
    label = node_label(n)

    def obs(rule: str, summary: str, **kw: Any) -> None:
        out.append(
            Observation(rule, kw.pop("subject", subject), target, kw.pop("label", label), summary, node=n.pk, **kw)
        )

    def node_wide(rule: str, summary: str, **kw: Any) -> None:
        """A rule about the whole ProxySQL: on one that serves several clusters, each cluster's row alerts
        (each its own routing and silences) and says which other clusters lose the same ProxySQL."""
        if n.also_serves:
            summary += f" (node-wide: this ProxySQL also serves cluster {', '.join(n.also_serves)})"
            kw["details"] = {**kw.get("details", {}), "also_serves": n.also_serves}
        obs(rule, summary, **kw)

    if _stale(doc, c, now):
        if _on(settings, "proxysql_unreachable"):
            node_wide(
                "proxysql_unreachable",
                f"no poll of {n.name} for {duration(_age(doc, now), parts=1)} (polled every "
                f"{c.interval:g} s): its state is stale",
                value=_age(doc, now),
                started=doc["ts"],
                details={"last_poll": doc["ts"], "last_error": doc.get("error")},
            )
        return out
    if not doc.get("ok", True):
        if doc.get("error_kind") == "auth":
            if _on(settings, "proxysql_auth"):
                node_wide(
                    "proxysql_auth",
                    f"{n.name} refuses the stored admin credentials: {doc.get('error')}",
                    started=doc.get("error_since"),
                    details={"error": doc.get("error")},
                )
        elif _on(settings, "proxysql_unreachable"):
            node_wide(
                "proxysql_unreachable",
                f"{n.name} does not answer ({doc.get('error_kind')}): {doc.get('error')}",
                started=doc.get("error_since"),
                details={"error": doc.get("error"), "error_kind": doc.get("error_kind"), "last_ok": doc.get("last_ok")},
            )
        return out

    figures = doc.get("figures") or {}
    s = settings["poll_latency"]
    ms, usual = doc.get("poll_ms"), doc.get("poll_ms_usual")
    if s.enabled and ms is not None and usual and ms > s.params["factor"] * usual and ms > s.params["floor_ms"]:
        node_wide(
            "poll_latency",
            f"a poll of {n.name} took {ms:.0f} ms, {ms / usual:.0f}× its usual {usual:.0f} ms",
            value=ms,
            details={"poll_ms": ms, "usual_ms": usual},
        )
    s = settings["mirror_queue"]
    verdict = status.mirror(figures)
    ratio = verdict.queue_ratio
    if s.enabled and ratio is not None and ratio * 100 >= s.params["percent"]:
        node_wide(
            "mirror_queue",
            f"mirror queue {verdict.queue} of {verdict.queue_limit} ({ratio:.0%}; "
            f"{verdict.per_thread_limit} per thread × {verdict.threads} threads): mirrored queries are being dropped",
            value=ratio * 100,
            details={"queue": verdict.queue, "limit": verdict.queue_limit},
        )
    s = settings["conn_errors"]
    err = figures.get("conn_err_ps")
    if s.enabled and err is not None and err > s.params["per_second"]:
        worst = max(
            (r for r in doc.get("pool") or [] if r.get("conn_err_ps")), key=lambda r: r["conn_err_ps"], default=None
        )
        where = f"; most to {worst['key'][1]}:{worst['key'][2]} in hostgroup {worst['key'][0]}" if worst else ""
        obs(
            "conn_errors",
            f"{err:.1f} backend connection errors/s on {n.name}{where}",
            value=err,
            details={"conn_err_ps": err},
        )

    runtime = doc.get("runtime_servers") or []
    mine = [r for r in runtime if r["hostgroup_id"] in c.hostgroups]
    # mysql_servers are judged on the polled layers (seconds after a change); every other table and the
    # variables on the drift watcher's last result (the configuration's engine, every 30 s), never read here.
    engine = _engine_result(doc, now)
    if _on(settings, "drift"):
        said: list[str] = []
        if frozenset(c.row_tuple(r) for r in mine) != c.intended_fingerprint:
            diffs, _ = _compare_polled(c, n, "runtime", mine)
            said = [_runtime_words(layers_drift.runtime_difference(d), "the inventory") for d in diffs]
        if engine is not None:
            said += [
                _runtime_words(d, f"version {engine.version}") for d in engine.runtime if d["table"] != "mysql_servers"
            ]
        if said:
            more = f" and {len(said) - 1} more" if len(said) > 1 else ""
            obs("drift", f"{n.name}: {said[0]}{more}", value=len(said), details={"differences": said[:20]})
    disk = status.polled_layer(doc, "disk")
    if _on(settings, "restart_drift"):
        findings: list[str] = []
        if (
            disk is not None
            and frozenset(c.row_tuple(r) for r in disk if r["hostgroup_id"] in c.hostgroups) != c.intended_fingerprint
        ):
            _, polled = _compare_polled(c, n, "disk", disk)
            findings = [f.words for f in polled]  # the writer first: where a restart would send writes
        findings += [
            f["words"]
            for f in (engine.findings if engine else [])
            if f["layer"] == "disk" and f["table"] != "mysql_servers"
        ]
        if findings:
            more = f" and {len(findings) - 1} more" if len(findings) > 1 else ""
            obs(
                "restart_drift",
                f"{findings[0]}{more}",
                value=len(findings),
                details={
                    "findings": findings[:20],
                    "disk_read_at": doc.get("layers_ts"),
                    "all_tables_read_at": engine.ts if engine else None,
                },
            )
    if _on(settings, "backend_shunned"):
        shunned: dict[tuple[str, int], list[int]] = {}
        for r in mine:
            if r["status"] == "SHUNNED":
                shunned.setdefault((r["hostname"], r["port"]), []).append(r["hostgroup_id"])
        for (host, port), hgs in sorted(shunned.items()):
            obs(
                "backend_shunned",
                f"{host}:{port} is SHUNNED on {n.name} (hostgroup {', '.join(map(str, hgs))})",
                subject=f"{subject}:{host}:{port}",
                label=f"{host}:{port} on {n.name}",
                server=c.server_at(host, port),
                details={"hostgroups": hgs},
            )
    s = settings["backend_flapping"]
    if s.enabled and doc.get("status_changes"):
        window = s.params["minutes"] * 60
        counts: dict[tuple[str, int], int] = {}
        for key, stamps in doc["status_changes"].items():
            hg, host, port = key.split(":", 2)
            if int(hg) not in c.hostgroups:
                continue
            recent = sum(1 for t in stamps if t > now - window)
            endpoint = (host, int(port))
            counts[endpoint] = max(counts.get(endpoint, 0), recent)
        for (host, port), count in sorted(counts.items()):
            if count >= s.params["changes"]:
                obs(
                    "backend_flapping",
                    f"{host}:{port} changed status {count} times on {n.name} in the last {s.params['minutes']:g} min",
                    subject=f"{subject}:{host}:{port}",
                    label=f"{host}:{port} on {n.name}",
                    value=count,
                    server=c.server_at(host, port),
                    details={"changes": count},
                )
    part = doc.get("proxysql_cluster")
    if _on(settings, "proxysql_cluster_diff_growing") and proxysql_cluster.configured(part):
        grows = proxysql_cluster.growing(part, n.admin_host, n.admin_port)
        if grows:
            peer, module, diff, version, epoch = max(grows, key=lambda g: g[2])
            what, action = proxysql_cluster.why_growing(part, module, version, epoch, status.polled_version(n, doc))
            more = f" (and {len(grows) - 1} more)" if len(grows) > 1 else ""
            obs(
                "proxysql_cluster_diff_growing",
                f"{n.name}: diff_check {diff} for {module} of peer {peer}{more}: {what}. To clear it: {action}",
                value=diff,
                details={"growing": [f"{g[0]} {g[1]} diff_check {g[2]}" for g in grows]},
            )
    return out


# -- one backend -------------------------------------------------------------------------------------
def backend_observations(
    c: ClusterCtx, srv: ServerCtx, doc: Doc | None, now: float, settings: Settings
) -> list[Observation]:
    if doc is None:
        return []
    out: list[Observation] = []
    target = f"s{srv.pk}"
    label = f"backend {srv.hostname}:{srv.port}"

    def obs(rule: str, summary: str, **kw: Any) -> None:
        out.append(Observation(rule, target, target, label, summary, server=srv.pk, **kw))

    stale = _stale(doc, c, now, backend=True)
    if stale or not doc.get("ok", True):
        if _on(settings, "backend_unreachable"):
            if stale:
                obs(
                    "backend_unreachable",
                    f"no poll of {srv} for {duration(_age(doc, now), parts=1)}: its state is stale",
                    value=_age(doc, now),
                    started=doc["ts"],
                )
            else:
                obs(
                    "backend_unreachable",
                    f"{srv} does not answer the monitor user ({doc.get('error_kind')}): {doc.get('error')}",
                    started=doc.get("error_since"),
                    details={"error": doc.get("error")},
                )
        return out
    st = doc.get("state") or {}
    if st.get("wsrep_on"):
        if _on(settings, "galera_non_primary") and st.get("cluster_status") != "Primary":
            obs("galera_non_primary", f"{srv}: wsrep_cluster_status {st.get('cluster_status')}")
        if _on(settings, "galera_not_ready") and st.get("ready") is False:
            obs("galera_not_ready", f"{srv}: wsrep_ready OFF ({st.get('local_state_comment')})")
        if _on(settings, "galera_desynced") and st.get("local_state") == 2:
            obs(
                "galera_desynced",
                f"{srv}: Donor/Desynced (wsrep_desync {'ON' if st.get('desync') else 'OFF'}, "
                f"recv queue {st.get('local_recv_queue')})",
            )
        s = settings["galera_recv_queue"]
        queue = st.get("local_recv_queue")
        if s.enabled and queue is not None and queue > s.params["threshold"]:
            obs(
                "galera_recv_queue",
                f"{srv}: wsrep_local_recv_queue {queue} above {s.params['threshold']:g}",
                value=queue,
                details={"recv_queue": queue, "threshold": s.params["threshold"]},
            )
        s = settings["galera_flow_control"]
        share = fc_share(doc.get("fc_marks") or [], s.params["window_s"])
        if s.enabled and share is not None and share * 100 > s.params["percent"]:
            obs(
                "galera_flow_control",
                f"{srv}: replication paused by flow control {share:.0%} of the last "
                f"{s.params['window_s']:g} s (flow-control messages this node sent: {st.get('flow_control_sent')})",
                value=share * 100,
                details={"paused_share": share, "fc_sent": st.get("flow_control_sent")},
            )
    else:
        s = settings["replica_lag"]
        lag = doc.get("lag_seconds")
        if s.enabled and lag is not None and lag > s.params["seconds"]:
            obs("replica_lag", f"{srv}: replica lag {lag} s above {s.params['seconds']:g} s", value=lag)
        replica = doc.get("replica")
        if (
            _on(settings, "replication_stopped")
            and replica
            and (replica.get("io") != "Yes" or replica.get("sql") != "Yes")
        ):
            error = f": {replica['error']}" if replica.get("error") else ""
            obs(
                "replication_stopped",
                f"{srv}: replica IO thread {replica.get('io')}, SQL thread {replica.get('sql')}{error}",
                details=replica,
            )
    return out


def fc_share(marks: list[list[float]], window_s: float) -> float | None:
    """Share of the last window_s that replication was paused by flow control, from the document's
    [[epoch, paused ns], ...] readings (the newest last); None without two readings."""
    if len(marks) < 2:
        return None
    end_ts, end_ns = marks[-1]
    start = next((m for m in reversed(marks[:-1]) if end_ts - m[0] >= window_s), marks[0])
    span = end_ts - start[0]
    if span <= 0:
        return None
    return max(0.0, min(1.0, (end_ns - start[1]) / (span * 1e9)))


# -- the cluster ------------------------------------------------------------------------------------
def usable(doc: Doc | None, c: ClusterCtx, now: float, as_writer: bool) -> tuple[bool, str, float | None]:
    """(usable, why not, since when not) of a backend for a ProxySQL row pointing at it. No fresh document
    (not polled, no monitor credentials) means unknown, taken as usable: the staleness rules say the rest."""
    ok, why = _usable(doc, c, now, as_writer)
    if ok or doc is None:  # no document is usable (unknown): never None here when not ok
        return ok, why, None
    return ok, why, doc.get("error_since") or doc["ts"]


def _usable(doc: Doc | None, c: ClusterCtx, now: float, as_writer: bool) -> tuple[bool, str]:
    if doc is None or _stale(doc, c, now, backend=True):
        return True, "unknown"
    if not doc.get("ok", True):
        return False, f"unreachable ({doc.get('error_kind')})"
    st = doc.get("state") or {}
    if st.get("wsrep_on"):
        if st.get("cluster_status") != "Primary":
            return False, f"wsrep_cluster_status {st.get('cluster_status')}"
        if st.get("ready") is False:
            return False, "wsrep_ready OFF"
        if st.get("local_state") not in (2, 4):
            return False, f"wsrep state {st.get('local_state_comment') or st.get('local_state')}"
    if (st.get("reject_queries") or "NONE").upper() != "NONE":
        return False, f"wsrep_reject_queries {st.get('reject_queries')}"
    if as_writer and st.get("read_only"):
        return False, "read_only ON"
    return True, ""


def cluster_observations(
    c: ClusterCtx,
    node_docs: Mapping[int, Doc | None],
    server_docs: Mapping[int, Doc | None],
    now: float,
    settings: Settings,
    operations: Iterable[OperationAlert],
) -> list[Observation]:
    """Rules that need the whole cluster: each node's writer and reader hostgroups against the backends'
    health, the nodes against each other, the Galera cluster's size, and its operations."""
    out: list[Observation] = []
    target = f"c{c.pk}"
    W, R = c.writer_hostgroup, c.reader_hostgroup
    health: dict[tuple[int | None, bool], tuple[bool, str, float | None]] = {}

    def backend_health(host: str, port: int, as_writer: bool) -> tuple[bool, str, float | None]:
        pk = c.server_at(host, port)
        key = (pk, as_writer)
        if key not in health:
            health[key] = usable(server_docs.get(pk) if pk else None, c, now, as_writer)
        return health[key]

    writers_by_node: dict[str, tuple[str, ...]] = {}
    for n in c.nodes.values():
        doc = node_docs.get(n.pk)
        if doc is None or _stale(doc, c, now) or not doc.get("ok", True):
            continue  # its own alert says it is unreachable; its routing is unknown
        rows = doc.get("runtime_servers") or []
        online_w = [r for r in rows if r["hostgroup_id"] == W and r["status"] == "ONLINE"]
        writers_by_node[n.name] = tuple(sorted(f"{r['hostname']}:{r['port']}" for r in online_w))
        hg_subject, hg_label = f"n{n.pk}:hg{W}", f"writer hostgroup {W} on {n.name}"
        if _on(settings, "writer_none"):
            good = [r for r in online_w if backend_health(r["hostname"], r["port"], True)[0]]
            if not good:
                why = (
                    "; ".join(
                        f"{r['hostname']}:{r['port']} {backend_health(r['hostname'], r['port'], True)[1]}"
                        for r in online_w
                    )
                    or "no ONLINE row"
                )
                # ProxySQL's own SHUNNED (or an OFFLINE row) says what the node did; the backend's poll says why.
                others = sorted(
                    {
                        f"{r['hostname']}:{r['port']} {r['status']}"
                        + (
                            ""
                            if backend_health(r["hostname"], r["port"], True)[0]
                            else f", {backend_health(r['hostname'], r['port'], True)[1]}"
                        )
                        for r in rows
                        if r["hostgroup_id"] == W and r["status"] != "ONLINE"
                    }
                )
                extra = f" (also in the hostgroup: {', '.join(others)})" if others else ""
                # Since the last ONLINE writer became unusable, as its polls say (for a node with no ONLINE
                # writer row, since this evaluation first saw it).
                unusable_since = (backend_health(r["hostname"], r["port"], True)[2] for r in online_w)
                since = max((t for t in unusable_since if t is not None), default=None)
                out.append(
                    Observation(
                        "writer_none",
                        hg_subject,
                        target,
                        hg_label,
                        f"no usable ONLINE writer on {n.name}: {why}{extra}",
                        node=n.pk,
                        hostgroup=W,
                        value=0,
                        details={
                            "rows": [
                                f"{r['hostname']}:{r['port']} {r['status']}" for r in rows if r["hostgroup_id"] == W
                            ]
                        },
                        server=_single_server(c, online_w or [r for r in rows if r["hostgroup_id"] == W]),
                        started=since,
                    )
                )
        if _on(settings, "writer_many") and len(online_w) > 1:
            out.append(
                Observation(
                    "writer_many",
                    hg_subject,
                    target,
                    hg_label,
                    f"{len(online_w)} ONLINE writers on {n.name}: {', '.join(writers_by_node[n.name])}",
                    node=n.pk,
                    hostgroup=W,
                    value=len(online_w),
                )
            )
        s = settings["readers_low"]
        minimum = s.params["minimum"] or 0
        if s.enabled and minimum > 0 and any(r["hostgroup_id"] == R for r in rows):
            readers = [r for r in rows if r["hostgroup_id"] == R and r["status"] == "ONLINE"]
            good = [r for r in readers if backend_health(r["hostname"], r["port"], False)[0]]
            if len(good) < minimum:
                out.append(
                    Observation(
                        "readers_low",
                        f"n{n.pk}:hg{R}",
                        target,
                        f"reader hostgroup {R} on {n.name}",
                        f"{len(good)} usable ONLINE reader(s) on {n.name}, fewer than the minimum of "
                        f"{minimum:g}"
                        + (f" ({len(readers)} ONLINE, the others not usable)" if len(readers) > len(good) else ""),
                        node=n.pk,
                        hostgroup=R,
                        value=len(good),
                    )
                )
    if _on(settings, "writer_disagree") and len(set(writers_by_node.values())) > 1:
        views = "; ".join(f"{name}: {', '.join(w) or 'none'}" for name, w in sorted(writers_by_node.items()))
        out.append(
            Observation(
                "writer_disagree",
                f"c{c.pk}:hg{W}",
                target,
                f"writer hostgroup {W} of {c.name}",
                f"the ProxySQL nodes send writes to different backends: {views}",
                hostgroup=W,
                details={"writers": {k: list(v) for k, v in writers_by_node.items()}},
            )
        )
    s = settings["galera_cluster_size"]
    if s.enabled and c.kind == "galera":
        sizes = [
            d["state"].get("cluster_size")
            for d in server_docs.values()
            if d
            and d.get("ok", True)
            and not _stale(d, c, now, backend=True)
            and (d.get("state") or {}).get("wsrep_on")
        ]
        sizes = [x for x in sizes if x is not None]
        expected = s.params["expected"] or (len(c.servers) - sum(1 for x in c.servers.values() if x.maintenance))
        if sizes and max(sizes) < expected:
            out.append(
                Observation(
                    "galera_cluster_size",
                    target,
                    target,
                    f"Galera cluster {c.name}",
                    f"wsrep_cluster_size {max(sizes)}, expected {expected:g}",
                    value=max(sizes),
                    details={"sizes": sizes, "expected": expected},
                )
            )
    if _on(settings, "proxysql_cluster_diverged"):
        parts: dict[str, proxysql_cluster.Part] = {}  # the answering nodes' configured ProxySQL Cluster parts
        for n in c.nodes.values():
            doc = node_docs.get(n.pk)
            if doc and doc.get("ok", True) and not _stale(doc, c, now):
                part = doc.get("proxysql_cluster")
                if proxysql_cluster.configured(part):
                    parts[n.name] = part
        apart: list[str] = []
        for module in proxysql_cluster.MODULES:
            sums: dict[str, list[str]] = {}
            for name, part in sorted(parts.items()):
                own = (part.get("checksums") or {}).get(module)
                if own:
                    sums.setdefault(own[2], []).append(name)
            if len(sums) > 1 and any(
                proxysql_cluster.sync_on(parts[name], module) for names in sums.values() for name in names
            ):
                apart.append(f"{module} ({'; '.join(', '.join(names) for names in sums.values())})")
        if apart:
            out.append(
                Observation(
                    "proxysql_cluster_diverged",
                    target,
                    target,
                    f"ProxySQL Cluster of {c.name}",
                    f"the ProxySQL nodes hold different checksums of {', '.join(apart)}: native sync has "
                    "not made them converge",
                    value=len(apart),
                    details={"modules": apart},
                )
            )
    for op in operations:
        if op.rule == "operation_failed" and now - (op.ended or now) > settings[op.rule].params["window_min"] * 60:
            continue
        if _on(settings, op.rule):
            out.append(
                Observation(
                    op.rule,
                    f"o{op.pk}",
                    target,
                    f"operation #{op.pk} {op.title}"[:300],
                    op.summary,
                    operation=op.pk,
                    started=op.started,
                    details={"error": op.error},
                )
            )
    return out


def _single_server(c: ClusterCtx, rows: Iterable[Mapping[str, Any]]) -> int | None:
    """The backend a writer alert is about, when there is exactly one (its chart is the evidence): the ONLINE
    writer that is unusable or, with no ONLINE row, the one the hostgroup still holds (a dead writer that
    ProxySQL shunned before the backend's poll saw it down is the same alert about the same backend)."""
    pks = {c.server_at(r["hostname"], r["port"]) for r in rows} - {None}
    return pks.pop() if len(pks) == 1 else None


# -- one DR channel ------------------------------------------------------------------------------------
def channel_observations(
    c: ClusterCtx, ch: ChannelCtx, doc: Doc | None, now: float, settings: Settings
) -> list[Observation]:
    """Rules on one channel's latest-state document; c is its replica cluster (polled at its backend interval)."""
    if doc is None:
        return []
    out: list[Observation] = []
    target = f"ch{ch.pk}"
    label = f"DR channel {ch.name}"

    def obs(rule: str, summary: str, **kw: Any) -> None:
        out.append(Observation(rule, target, target, label, summary, server=ch.replica_server, **kw))

    if _stale(doc, c, now, backend=True):
        if _on(settings, "channel_stopped"):
            obs(
                "channel_stopped",
                f"no poll of channel {ch.name} for {duration(_age(doc, now), parts=1)}: its state is stale",
                value=_age(doc, now),
                started=doc["ts"],
                details={"last_poll": doc["ts"]},
            )
        return out
    replica = doc.get("replica") or {}
    state = doc.get("state")
    if state != ChannelState.RUNNING and _on(settings, "channel_stopped"):
        if not replica.get("ok", True):
            why = f"the replica node does not answer: {replica.get('error')}"
        else:
            error = replica.get("last_io_error") or replica.get("last_sql_error")
            why = f"IO thread {replica.get('io_running') or 'No'}, SQL thread {replica.get('sql_running') or 'No'}" + (
                f": {error}" if error else ""
            )
        obs(
            "channel_stopped",
            f"channel {ch.name} {state}: {why}",
            details={
                "state": state,
                "io_running": replica.get("io_running"),
                "sql_running": replica.get("sql_running"),
                "last_io_error": replica.get("last_io_error"),
                "last_sql_error": replica.get("last_sql_error"),
                "error": replica.get("error"),
            },
        )
    s = settings["channel_lag"]
    lag = doc.get("lag_seconds")
    threshold = s.params["seconds"] or ch.max_lag_s
    if s.enabled and lag is not None and lag > threshold:
        obs(
            "channel_lag",
            f"channel {ch.name}: {lag:g} s behind its source, above {threshold:g} s",
            value=lag,
            details={"lag_seconds": lag, "threshold": threshold, "behind_trx": doc.get("behind_trx")},
        )
    return out


def rule_level(rule: str) -> str:
    if rule in NODE_RULES:
        return "node"
    if rule in SERVER_RULES:
        return "server"
    if rule in CLUSTER_RULES:
        return "cluster"
    if rule in CHANNEL_RULES:
        return "channel"
    return BY_KEY[rule].after
