"""The fleet overview's read: every node's latest state judged in one pass, the attention list for the whole
fleet, and the clusters of one page.

Built to stay under 150 ms of server time at 1,000 ProxySQL nodes and thousands of backends:
- four flat queries (clusters, nodes, servers, memberships; no join, no per-node query) and one MGET per
  kind of latest-state documents;
- the documents are decoded with msgspec into only the fields the overview reads (the pool rows and
  counters, most of a ProxySQL document, are skipped by the decoder, not parsed into dicts);
- drift: each node's runtime rows are first compared as a set of tuples with the inventory's (and with
  the other nodes' of its cluster); only a node that differs goes through apps.fleet.drift.compare for
  the field-by-field description; and one MGET of the drift watcher's stored results (every table and
  variable against the configuration version, all three layers: apps/configuration/drift.py), shown for a node
  whose polled runtime did not already say drift;
- chips are built only for the clusters of the page shown; the attention list always covers the fleet.
"""

import gc
import time
from collections import defaultdict
from operator import itemgetter
from typing import Any

import msgspec
import msgspec.structs
import redis

from apps.clients.proxysql import SERVER_FIELDS
from apps.fleet import drift, native, tags
from apps.fleet import selectors as fleet_selectors
from apps.fleet.models import HostgroupMembership, ProxySQLNode, Server

from . import live, status
from .formatting import duration
from .selectors import _ts, _url_maker

PAGE_SIZE = 25
ATTENTION_SHOWN = 200
ROW_FIELDS = ("hostgroup_id", "hostname", "port") + SERVER_FIELDS


class ProxySQLDoc(msgspec.Struct):
    """The part of pollers.py's ProxySQL document that the overview reads."""

    ts: float
    ok: bool = True
    error: Any = None
    error_kind: Any = None
    error_since: Any = None
    figures: dict = {}
    runtime_servers: msgspec.Raw = msgspec.Raw()  # decoded on demand, see runtime_of()


class WsrepState(msgspec.Struct):
    """The part of a backend's state that the overview judges and shows (and /metrics exports)."""

    wsrep_on: Any = None
    local_state: Any = None
    local_state_comment: Any = None
    cluster_status: Any = None
    ready: Any = None
    local_recv_queue: Any = None
    read_only: Any = None
    pxc_maint_mode: Any = None
    flow_control_paused: Any = None


class BackendDoc(msgspec.Struct):
    ts: float
    ok: bool = True
    error: Any = None
    error_kind: Any = None
    error_since: Any = None
    state: WsrepState | None = None
    lag_seconds: Any = None
    poll_s: Any = None

    def as_dict(self):
        """The shape status.py reads (pollers.py's document)."""
        return {"state": msgspec.structs.asdict(self.state) if self.state else {}, "lag_seconds": self.lag_seconds}

    def clean(self, max_lag):
        """True when status.backend_problems() would find nothing: the common case, decided without building
        the document's dict (thousands of backends per refresh). Anything else goes through backend_problems."""
        s = self.state
        if s is None:
            return self.lag_seconds is None or self.lag_seconds <= max_lag
        if s.wsrep_on and not (
            s.local_state == 4
            and s.cluster_status == "Primary"
            and s.ready is not False
            and (s.local_recv_queue is None or s.local_recv_queue <= max_lag)
        ):
            return False
        if self.lag_seconds is not None and self.lag_seconds > max_lag:
            return False
        return not s.pxc_maint_mode or s.pxc_maint_mode.upper() == "DISABLED"


class DriftDoc(msgspec.Struct):
    """The part of the drift watcher's stored result (apps/configuration/drift.py) that the overview shows."""

    ts: float = 0.0
    error: Any = ""
    findings: list = []


_decoders = {
    live.PROXYSQL: msgspec.json.Decoder(ProxySQLDoc),
    live.BACKEND: msgspec.json.Decoder(BackendDoc),
    live.DRIFT: msgspec.json.Decoder(DriftDoc),
}
DRIFT_FRESH_S = 120  # the watcher runs every 30 s: an older result is not shown


class Unreadable:
    """Stands for a document that could not be decoded: the node shows "no data" and why."""

    def __init__(self, error):
        self.error = error


def read_docs(kind, pks, decoder=None):
    """{pk: doc struct, Unreadable or absent} with one MGET; raises LiveUnavailable when Redis does not
    answer. A document that cannot be decoded never breaks the page. `decoder`: a msgspec decoder of the
    fields the caller reads (the overview's by default; /metrics has its own)."""
    if not pks:
        return {}
    try:
        values = live.client().mget([live.key(kind, pk) for pk in pks])
    except redis.RedisError as exc:
        raise live.LiveUnavailable(str(exc)) from None
    decode = (decoder or _decoders[kind]).decode
    out = {}
    for pk, raw in zip(pks, values):
        if raw:
            try:
                out[pk] = decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                out[pk] = Unreadable(str(exc))
    return out


def _intended(servers):
    """{cluster_id: [(hg, host, port, *SERVER_FIELDS)]}: the inventory's mysql_servers rows, in one query
    (the servers are already in hand, so no join)."""
    where = {pk: (cluster_id, hostname, port) for pk, cluster_id, hostname, port in servers}
    intended = defaultdict(list)
    for server_id, hg, *values in HostgroupMembership.objects.values_list("server_id", "hostgroup_id", *SERVER_FIELDS):
        if server_id not in where:  # a cluster the tag filter leaves out
            continue
        cluster_id, hostname, port = where[server_id]
        intended[cluster_id].append((hg, hostname, port, *values))
    return intended


_row_tuple = itemgetter(*ROW_FIELDS)


def _fingerprint(rows, hostgroups):
    """A runtime table as a frozenset of full rows (ROW_FIELDS order), restricted to the cluster's hostgroups."""
    return frozenset(_row_tuple(r) for r in rows if r["hostgroup_id"] in hostgroups)


_runtime_cache = {}
RUNTIME_CACHE_MAX = 20_000
_decode_rows = msgspec.json.Decoder(list[dict]).decode


def runtime_of(cluster_id, raw, hostgroups):
    """(rows, fingerprint) of a document's runtime_servers. runtime_mysql_servers rarely changes, and the
    nodes of a cluster carry the same table: the same JSON bytes are decoded once per process, not once per
    node and refresh."""
    key = (cluster_id, bytes(raw))
    hit = _runtime_cache.get(key)
    if hit is None or hit[2] != hostgroups:
        if len(_runtime_cache) >= RUNTIME_CACHE_MAX:
            _runtime_cache.clear()
        rows = _decode_rows(key[1])
        hit = _runtime_cache[key] = (rows, _fingerprint(rows, hostgroups), hostgroups)
    return hit[0], hit[1]


def _as_compare_input(rows):
    """The inventory rows in the shape drift.compare() takes: {(hg, host, port): {field: value}}."""
    return {row[:3]: dict(zip(SERVER_FIELDS, row[3:])) for row in rows}


def fleet_overview(*, page=1, only_attention=False, now=None, tag=None):
    """What the overview shows: fleet totals, the attention list (whole fleet, most severe first), and the
    clusters of one page with a chip per node and backend. `tag` (key, value): only the clusters with that tag."""
    # Tens of thousands of short-lived containers are made here: a cyclic-GC pass in the middle (it scans
    # every live object of the process) would cost more than the work. None of them form cycles.
    paused = gc.isenabled()
    gc.disable()
    try:
        return _fleet_overview(page, only_attention, now or time.time(), tag)
    finally:
        if paused:
            gc.enable()


def _fleet_overview(page, only_attention, now, tag=None):
    chosen = fleet_selectors.clusters(tag=tag)  # the API's cluster list narrows the same way
    nodes, servers = ProxySQLNode.objects.all(), Server.objects.all()
    if tag:  # the same number of queries: the tag narrows each of them
        nodes, servers = nodes.filter(cluster__in=chosen), servers.filter(cluster__in=chosen)
    clusters = list(
        tags.with_tags(chosen)
        .order_by("name")
        .values(
            "id",
            "name",
            "tags_text",
            "poll_interval_s",
            "backend_poll_interval_s",
            "max_replication_lag",
            "writer_hostgroup",
            "reader_hostgroup",
            "backup_writer_hostgroup",
            "offline_hostgroup",
            "native_manager",
        )
    )
    by_id = {c["id"]: c for c in clusters}
    nodes = list(nodes.order_by("name").values_list("id", "cluster_id", "name"))
    servers = list(
        servers.order_by("hostname", "port").values_list(
            "id", "cluster_id", "hostname", "port", "maintenance", "maintenance_note"
        )
    )
    # a drained backend's trouble is planned: said so, not red; and its being drained is said, never hidden
    in_maintenance = {s[0]: s[5] for s in servers if s[4]}
    servers = [s[:4] for s in servers]
    intended = _intended(servers)

    unavailable = ""
    try:
        px_docs = read_docs(live.PROXYSQL, [n[0] for n in nodes])
        be_docs = read_docs(live.BACKEND, [s[0] for s in servers])
        layer_docs = read_docs(live.DRIFT, [n[0] for n in nodes])
    except live.LiveUnavailable as exc:
        unavailable, px_docs, be_docs, layer_docs = str(exc) or "Redis unavailable", {}, {}, {}

    node_url, server_url, cluster_url = (
        _url_maker("pages:proxysql_node"),
        _url_maker("pages:server"),
        _url_maker("pages:cluster"),
    )
    for c in clusters:
        c.update(url=cluster_url(c["id"]), px=[], be=[], attention=0, px_colour={})
        hgs = {c["writer_hostgroup"], c["reader_hostgroup"]}
        hgs |= {c[k] for k in ("backup_writer_hostgroup", "offline_hostgroup") if c[k] is not None}
        rows = intended.get(c["id"], ())
        c["hostgroups"] = hgs | {r[0] for r in rows}
        c["intended_fp"] = frozenset(rows)
        # natively managed: Monitor places the servers of the role hostgroups, folded back before comparing
        c["managed"] = hgs if c["native_manager"] else set()
        c["writers"] = {f"{r[1]}:{r[2]}" for r in rows if r[0] == c["writer_hostgroup"]}  # as the chips name them
        c["runtime"] = {}  # node name -> (fingerprint, rows) of its answering nodes
    attention = []
    totals = {
        "nodes": len(nodes),
        "nodes_ok": 0,
        "servers": len(servers),
        "servers_ok": 0,
        "questions_ps": 0.0,
        "in_maintenance": len(in_maintenance),
    }

    def attend(colour, what, c, name, url, detail, since=None, maintenance=False):
        if maintenance:
            colour, what, detail = "grey", "in maintenance", f"planned maintenance; {what}: {detail}"
        c["attention"] += 1
        attention.append((colour, what, c, name, url, detail, since))

    for pk, cluster_id, name in nodes:
        c = by_id[cluster_id]
        doc = px_docs.get(pk)
        if isinstance(doc, Unreadable):
            attend("grey", "no data", c, name, node_url(pk), f"latest state unreadable: {doc.error}")
            doc = None
        state, age = status.freshness_of(doc.ts, doc.ok, c["poll_interval_s"], now) if doc else (status.NODATA, None)
        colour = status.COLOURS[state]
        c["px"].append((pk, name, state, age, doc))
        if state == status.NODATA and not unavailable and pk not in px_docs:
            attend("grey", "no data", c, name, node_url(pk), "never polled: are the Celery worker and beat running?")
        elif state == status.UNREACHABLE:
            attend("red", "unreachable", c, name, node_url(pk), f"{doc.error_kind}: {doc.error}", _ts(doc.error_since))
        elif state == status.STALE:
            last = f"; last poll failed: {doc.error}" if not doc.ok else ""
            attend("grey", "stale", c, name, node_url(pk), f"no poll for {duration(age, parts=1)}{last}", _ts(doc.ts))
        elif state == status.OK:
            totals["nodes_ok"] += 1
            totals["questions_ps"] += doc.figures.get("questions_ps") or 0
            verdict = status.mirror(doc.figures)
            if verdict.saturated:
                colour = "amber"
                attend("amber", "mirror", c, name, node_url(pk), verdict.summary())
            diffs = []
            if doc.runtime_servers and bytes(doc.runtime_servers) != b"null":
                try:
                    rows, fp = runtime_of(cluster_id, doc.runtime_servers, c["hostgroups"])
                except (msgspec.DecodeError, msgspec.ValidationError, KeyError, TypeError):
                    rows = fp = None  # a document of another shape: say so rather than guess
                    attend("amber", "drift", c, name, node_url(pk), "runtime_mysql_servers in an unexpected shape")
                if fp is not None and c["managed"]:
                    rows = native.fold(
                        rows,
                        [
                            {"hostgroup_id": r[0], "hostname": r[1], "port": r[2], **dict(zip(SERVER_FIELDS, r[3:]))}
                            for r in intended.get(cluster_id, ())
                        ],
                        c["managed"],
                        columns=SERVER_FIELDS,
                    )
                if fp is not None:
                    c["runtime"][name] = (fp, rows)
                if fp is not None and fp != c["intended_fp"]:
                    diffs = drift.compare(_as_compare_input(intended.get(cluster_id, ())), rows, c["hostgroups"])
                    if diffs:
                        colour = "amber"
                        d = diffs[0]
                        more = f" and {len(diffs) - 1} more" if len(diffs) > 1 else ""
                        attend(
                            "amber",
                            "drift",
                            c,
                            name,
                            c["url"] + "#drift-section",
                            f"hg {d.hostgroup_id} {d.hostname}:{d.port} {d.field}: intended {d.intended}, "
                            f"runtime {d.runtime}{more}",
                        )
            layers = layer_docs.get(pk)
            if (
                not diffs
                and isinstance(layers, DriftDoc)
                and layers.findings
                and not layers.error
                and now - layers.ts <= DRIFT_FRESH_S
            ):
                colour = "amber"
                more = f" and {len(layers.findings) - 1} more" if len(layers.findings) > 1 else ""
                attend("amber", "drift", c, name, c["url"] + "#drift-section", layers.findings[0]["words"] + more)
        c["px_colour"][pk] = colour

    for c in clusters:
        runtime = c["runtime"]
        if len(runtime) > 1 and len({fp for fp, _ in runtime.values()}) > 1:
            between = drift.between_nodes({n: rows for n, (_, rows) in runtime.items()}, c["hostgroups"])
            if between:
                d = between[0]
                values = ", ".join(f"{n}: {v}" for n, v in d["values"].items())
                more = f" and {len(between) - 1} more" if len(between) > 1 else ""
                attend(
                    "amber",
                    "drift",
                    c,
                    "ProxySQL nodes disagree",
                    c["url"] + "#drift-section",
                    f"hg {d['key'][0]} {d['key'][1]}:{d['key'][2]} {d['field']} ({values}){more}",
                )

    for pk, cluster_id, hostname, port in servers:
        c = by_id[cluster_id]
        doc = be_docs.get(pk)
        name = f"{hostname}:{port}"
        maint = pk in in_maintenance
        said = len(attention)
        if isinstance(doc, Unreadable):
            attend("grey", "no data", c, name, server_url(pk), f"latest state unreadable: {doc.error}")
            doc = None
        state, age = (
            status.freshness_of(doc.ts, doc.ok, c["backend_poll_interval_s"], now) if doc else (status.NODATA, None)
        )
        if state != status.OK or doc.clean(c["max_replication_lag"]):
            problems = ()
        else:
            problems = status.backend_problems(doc.as_dict(), c["max_replication_lag"])
        c["be"].append((pk, name, state, age, doc, problems, maint))
        if state == status.NODATA and not unavailable and pk not in be_docs:
            attend("grey", "no data", c, name, server_url(pk), "never polled: are the Celery worker and beat running?")
        elif state == status.UNREACHABLE:
            attend(
                "red",
                "unreachable",
                c,
                name,
                server_url(pk),
                f"{doc.error_kind}: {doc.error}",
                _ts(doc.error_since),
                maintenance=maint,
            )
        elif state == status.STALE:
            attend("grey", "stale", c, name, server_url(pk), f"no poll for {duration(age, parts=1)}", _ts(doc.ts))
        elif state == status.OK:
            for colour, what, text in problems:
                attend(colour, what, c, name, server_url(pk), text, maintenance=maint)
            if not problems:
                totals["servers_ok"] += 1
        if maint and not any(a[1] == "in maintenance" for a in attention[said:]):  # whatever the poll says
            note = in_maintenance[pk]
            attend(
                "grey",
                "in maintenance",
                c,
                name,
                server_url(pk),
                "drained for planned maintenance: no traffic, automatic rules leave it alone"
                + (f" ({note})" if note else ""),
            )

    order = {"red": 0, "amber": 1, "grey": 2}
    attention.sort(key=lambda a: (order[a[0]], a[2]["name"], a[3]))
    listed = [c for c in clusters if c["attention"]] if only_attention else clusters
    pages = max(1, -(-len(listed) // PAGE_SIZE))
    page = min(max(1, page), pages)
    shown = [_cluster_view(c, node_url, server_url) for c in listed[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]]
    return {
        "clusters": shown,
        "cluster_count": len(clusters),
        "listed_count": len(listed),
        "page": page,
        "pages": pages,
        "only_attention": only_attention,
        "attention_count": len(attention),
        "totals": totals,
        "attention": [
            {
                "colour": a[0],
                "what": a[1],
                "cluster": a[2]["name"],
                "cluster_url": a[2]["url"],
                "name": a[3],
                "url": a[4],
                "detail": a[5],
                "since": a[6],
            }
            for a in attention[:ATTENTION_SHOWN]
        ],
        "unavailable": unavailable,
        "now": _ts(now),
    }


def _cluster_view(c, node_url, server_url):
    """Chips of one shown cluster: name, colour, one figure, the figure's age."""
    nodes = []
    for pk, name, state, age, doc in c["px"]:
        nodes.append(
            {
                "name": name,
                "url": node_url(pk),
                "state": state,
                "colour": c["px_colour"][pk],
                "age": age,
                "questions_ps": doc.figures.get("questions_ps") if doc else None,
            }
        )
    backends = []
    for pk, name, state, age, doc, problems, maint in c["be"]:
        wsrep = msgspec.structs.asdict(doc.state) if doc and doc.state else {}
        colour = status.backend_colour(state, problems)
        backends.append(
            {
                "name": name,
                "url": server_url(pk),
                "state": state,
                "age": age,
                "writer": name in c["writers"],
                "colour": "grey" if maint and colour == "green" else colour,
                "maintenance": maint,
                "label": status.wsrep_label_of(wsrep),
                "recv_queue": wsrep.get("local_recv_queue"),
            }
        )
    return {
        "name": c["name"],
        "url": c["url"],
        "attention": c["attention"],
        "nodes": nodes,
        "servers": backends,
        "tags": tags.from_text(c["tags_text"]),
    }
