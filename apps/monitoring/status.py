"""What the latest-state documents mean for an operator: freshness, colours, the mirror verdict, and the
"attention" items of the overview. Pure functions over the documents pollers.py writes (no I/O), so
pages, reports and tests share one reading of them.

A document is "stale" when it is older than STALE_FACTOR x its cluster's poll interval: the figures
shown are then old, whatever they say. "unreachable" is a fresh document whose last poll failed; it
keeps the last good figures beside the error, and error_since says since when it has been failing.
"""

from dataclasses import dataclass
from typing import Any, Protocol

from django.conf import settings

STALE_FACTOR = 3
MIRROR_QUEUE_WARN = 0.8  # of the total limit (per-thread limit x mysql-threads)
PREPARED_SHARE_NOTE = 0.5

OK, UNREACHABLE, STALE, NODATA = "ok", "unreachable", "stale", "nodata"
# state -> status colour (css class .st-<colour>)
COLOURS = {OK: "green", UNREACHABLE: "red", STALE: "grey", NODATA: "grey"}

# Looked up with a document's local_state, None when the server did not say.
WSREP_STATES: dict[int | None, str] = {1: "Joining", 2: "Donor/Desynced", 3: "Joined", 4: "Synced"}

Problem = tuple[str, str, str]  # (colour, what, text)


class PolledDoc(Protocol):
    """What freshness() and figures_age() read of a document: a reader's struct (live_doc.Polled and its kin)."""

    @property
    def ts(self) -> float: ...
    @property
    def ok(self) -> bool: ...
    @property
    def last_ok(self) -> float | None: ...


# The one place that says how often a cluster's nodes are polled and when a document is stale: every page,
# rule, report and export reads these (apps/tests/test_boundaries.py keeps it so).
def polled_version(node: object, doc: object) -> str | None:
    """The node's ProxySQL version as its last poll read it (admin-version), else as adopted (the inventory's, when
    `node` carries one). doc: a page's typed document (selectors.NodeDoc) or a whole one (the alert rules' dict)."""
    variables = (doc.get("variables") if isinstance(doc, dict) else getattr(doc, "variables", None)) or {}
    return variables.get("admin-version") or getattr(node, "version", None)


def interval_of(cluster_interval: float | None) -> float:
    """A poll interval as configured, or the default when there is none."""
    return cluster_interval or settings.MONITOR_DEFAULT_INTERVAL_S


def proxysql_interval(cluster: Any) -> float:
    """Seconds between two polls of each ProxySQL node of this cluster."""
    return interval_of(cluster.poll_interval_s)


def backend_interval(cluster: Any) -> float:
    """Seconds between two polls of each backend of this cluster."""
    return interval_of(cluster.backend_poll_interval_s)


def stale_after(interval: float | None) -> float:
    """Seconds after which a document of a poll made every `interval` seconds is stale: its figures are old."""
    return STALE_FACTOR * interval_of(interval)


def freshness(doc: PolledDoc | None, interval: float | None, now: float) -> tuple[str, float | None]:
    """(state, age in seconds or None) of one latest-state document, as a reader's struct with ts and ok
    (selectors.NodeDoc, BackendDoc), or None."""
    if doc is None:
        return NODATA, None
    return freshness_of(doc.ts, doc.ok, interval, now)


def figures_age(doc: PolledDoc | None, age: float | None, now: float) -> float | None:
    """Seconds since the poll whose figures the document holds (a reader's struct with last_ok, or None): a failed
    poll keeps the last good poll's figures beside its error, so they are as old as last_ok, not as the failed poll
    (`age`, which stands in when no poll ever succeeded)."""
    last_ok = doc.last_ok if doc is not None else None
    return age if not last_ok else max(0.0, now - last_ok)


# What a failing poll means to whoever is on call, and what to do, by the client's error kind (apps/clients/wire.py).
_GUARDED = " A switchover, drain or restore on this cluster is refused until every ProxySQL node answers."
PROXYSQL_ADVICE = {
    "timeout": "The admin port takes the connection but ProxySQL does not answer in time: the process is hung, stopped "
    "or overloaded, and its clients are likely stalled too. Check the proxysql process on its host." + _GUARDED,
    "unreachable": "Nothing answers on the admin port: ProxySQL is down (or the host or address is wrong), so no client "
    "gets through it. Start it, or send its clients to the other ProxySQL nodes." + _GUARDED,
    "auth": "ProxySQL answers but refuses the admin credentials the console uses: correct them in the inventory or "
    "in admin-admin_credentials on the node.",
}
BACKEND_ADVICE = {
    "timeout": "The server takes the connection but does not answer in time: it is hung, overloaded or stalled "
    "(a Galera flow-control pause stalls the whole cluster).",
    "unreachable": "The server does not accept connections: the database is stopped or crashed (or the host is "
    "unreachable). ProxySQL shuns it and sends its queries to the other servers. Start it again, or "
    "drain it for maintenance: its alerts are then held.",
    "auth": "The server refuses the monitor user: correct its password in the inventory, or its grants.",
}


def advice(kind: str, error_kind: str | None) -> str:
    """What to do about a node (kind "proxysql") or backend whose latest poll failed with `error_kind`; "" if nothing
    more is known than the error itself."""
    return (PROXYSQL_ADVICE if kind == "proxysql" else BACKEND_ADVICE).get(error_kind or "", "")


def freshness_of(ts: float, ok: bool, interval: float | None, now: float) -> tuple[str, float]:
    age = now - ts
    if age < 0:
        age = 0.0  # the page's clock behind the poller's by a little
    if age > stale_after(interval):
        return STALE, age
    return (OK if ok else UNREACHABLE), age


# -- mirror ----------------------------------------------------------------------------------------
@dataclass
class Mirror:
    queue: int | None
    queue_limit: int | None  # total: mysql-mirror_max_queue_length x mysql-threads
    per_thread_limit: int | None
    threads: int | None
    concurrency: int | None
    concurrency_limit: int | None
    prepared_share: float | None

    @property
    def queue_ratio(self) -> float | None:
        if self.queue is None or not self.queue_limit:
            return None
        return self.queue / self.queue_limit

    @property
    def queue_near_limit(self) -> bool:
        ratio = self.queue_ratio
        return ratio is not None and ratio >= MIRROR_QUEUE_WARN

    @property
    def concurrency_at_limit(self) -> bool:
        limit = self.concurrency_limit
        if self.concurrency is None or not limit:
            return False
        return self.concurrency >= limit

    @property
    def saturated(self) -> bool:
        return self.queue_near_limit or self.concurrency_at_limit

    @property
    def mostly_prepared(self) -> bool:
        return self.prepared_share is not None and self.prepared_share > PREPARED_SHARE_NOTE

    def summary(self) -> str:
        """One line for the attention list."""
        parts = []
        if self.queue_near_limit:
            parts.append(
                f"queue {self.queue} of {self.queue_limit} ({self.queue_ratio:.0%}; "
                f"{self.per_thread_limit} per thread x {self.threads} threads)"
            )
        if self.concurrency_at_limit:
            parts.append(f"concurrency {self.concurrency} at its limit {self.concurrency_limit}")
        return "; ".join(parts) + ": mirrored queries are being dropped" if parts else ""


def mirror(figures: dict[str, Any] | None) -> Mirror:
    """The mirror verdict from a ProxySQL document's (or sample's) figures."""
    f = figures or {}
    per_thread, threads = f.get("mirror_max_queue_length"), f.get("mysql_threads")
    # The queue figure is a total over mysql-threads worker threads; the limit applies per thread. An
    # unknown thread count is taken as 1: the smallest total limit, so a warning comes early, not late.
    limit = per_thread * (threads or 1) if per_thread is not None else None
    questions, prepared = f.get("questions_ps"), f.get("prepared_ps")
    share = prepared / questions if questions and prepared is not None else None
    return Mirror(
        queue=f.get("mirror_queue_length"),
        queue_limit=limit,
        per_thread_limit=per_thread,
        threads=threads,
        concurrency=f.get("mirror_concurrency"),
        concurrency_limit=f.get("mirror_max_concurrency"),
        prepared_share=share,
    )


# -- backends --------------------------------------------------------------------------------------
def backend_problems(doc: dict[str, Any] | None, max_replication_lag: float) -> list[Problem]:
    """[(colour, what, text)] of a reachable backend's state (empty when it is Synced, Primary and in bounds), from
    a document's shape as a dict (the overview's BackendDoc.as_dict())."""
    return backend_problems_of((doc or {}).get("state"), (doc or {}).get("lag_seconds"), max_replication_lag)


def backend_problems_of(state: dict[str, Any] | None, lag: float | None, max_replication_lag: float) -> list[Problem]:
    """backend_problems() from a document's state (NodeState's fields as a dict, or None) and lag_seconds."""
    state = state or {}
    out = []
    if state.get("wsrep_on"):
        local = state.get("local_state")
        if local != 4:
            name = state.get("local_state_comment") or WSREP_STATES.get(local, "unknown")
            out.append(("amber" if local == 2 else "red", "not synced", f"wsrep_local_state {local} {name}"))
        if state.get("cluster_status") != "Primary":
            out.append(("red", "not primary", f"wsrep_cluster_status {state.get('cluster_status')}"))
        if state.get("ready") is False:
            out.append(("red", "not ready", "wsrep_ready OFF"))
        queue = state.get("local_recv_queue")
        if queue is not None and queue > max_replication_lag:
            out.append(
                (
                    "amber",
                    "recv queue",
                    f"recv queue {queue} over the cluster's max_replication_lag {max_replication_lag}",
                )
            )
    if lag is not None and lag > max_replication_lag:
        out.append(
            (
                "amber",
                "replica lag",
                f"replica lag {lag} s over the cluster's max_replication_lag {max_replication_lag}",
            )
        )
    maint = state.get("pxc_maint_mode")
    if maint and maint.upper() != "DISABLED":
        out.append(("amber", "maintenance", f"pxc_maint_mode {maint}"))
    return out


def backend_colour(state: str, problems: list[Problem]) -> str:
    if state != OK:
        return COLOURS[state]
    if any(p[0] == "red" for p in problems):
        return "red"
    return "amber" if problems else "green"


def wsrep_label_of(state: dict[str, Any] | None) -> str:
    """A backend's wsrep state in a word or two (state: a document's `state`, NodeState's fields, or None)."""
    state = state or {}
    if not state:
        return ""
    if not state.get("wsrep_on"):
        return "not Galera" + (" · read_only" if state.get("read_only") else "")
    local = state.get("local_state")
    return state.get("local_state_comment") or WSREP_STATES.get(local, str(local))


def polled_layer(doc: dict[str, Any], layer: str) -> Any:
    """One layer's mysql_servers rows in a ProxySQL node's latest-state document (pollers.py), None when not polled
    yet. "runtime" in the document: the layer held the runtime's configuration when it was read."""
    if layer == "runtime":
        return doc.get("runtime_servers")
    rows = doc.get(f"{layer}_servers")
    return doc.get("runtime_servers") if rows == "runtime" else rows
