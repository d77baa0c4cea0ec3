"""Client sessions of one ProxySQL node, read from it now (stats_mysql_processlist), and the guarded kill of one:
`KILL CONNECTION <SessionID>` on the node's admin interface, as ProxySQL 2.7 takes it.

The kill is an operator's, after a confirmation that names the session; it is refused when the session id now
belongs to another client (ids are reused after a restart) and audited with who killed what."""

from collections.abc import Callable, Mapping, Sequence
from typing import NotRequired, TypedDict, cast

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.proxysql import MIRROR_CLIENT, ProxySQLAdmin
from apps.clients.wire import ClientError
from apps.fleet.models import ProxySQLNode

SHOWN = 200  # the longest-running sessions; a busy node has thousands


# Why a mirror copy offers no kill: it is ProxySQL's, its client keeps running, and the next match copies again.
MIRROR_REFUSAL = (
    "no client is behind it, and the rule copies the next matching query again; to stop the copies, "
    "change the rule's mirror_hostgroup"
)


class KillRefused(Exception):
    pass


class SessionRow(TypedDict):
    """A stats_mysql_processlist row as ProxySQLAdmin.processlist() reads it: the columns read here and on the
    pages (the row holds every column; its numbers are ints, NULL or '' None)."""

    SessionID: int | None
    user: str | None
    db: str | None
    cli_host: str | None
    cli_port: int | None
    hostgroup: int | None
    srv_host: str | None
    srv_port: int | None
    command: str | None
    time_ms: int | None
    info: str | None


class ShownSession(SessionRow):
    mirror_copy: bool  # a mirror rule's copy, run by ProxySQL itself (mark_mirror_copies)
    mirror_of: NotRequired[int | None]  # a copy's: the client session running the same text now


class Sessions(TypedDict):
    rows: list[ShownSession]
    total: int
    mirror_copies: int
    matching: int
    error: str | None


def _read(admin: ProxySQLAdmin, session_id: int | None = None) -> list[SessionRow]:
    # processlist()'s rows are dicts of every column: these columns, typed as it converts them
    return cast(list[SessionRow], admin.processlist(session_id))


# The processlist's orders a DBA asks for: its value -> (label, key). Time: the longest running first.
SORTS: dict[str, tuple[str, Callable[[ShownSession], tuple[object, ...]]]] = {
    "time": ("time, longest first", lambda r: (-(r["time_ms"] or 0), r["SessionID"])),
    "user": ("user", lambda r: (r["user"] or "", -(r["time_ms"] or 0))),
    "hostgroup": ("hostgroup", lambda r: (r["hostgroup"] is None, r["hostgroup"] or 0, -(r["time_ms"] or 0))),
    "command": ("command", lambda r: (r["command"] or "", -(r["time_ms"] or 0))),
    "client": ("client", lambda r: (r["cli_host"] or "", r["cli_port"] or 0)),
}
FILTERED = ("user", "cli_host", "db", "command", "info", "srv_host")


def is_mirror_copy(row: Mapping[str, object]) -> bool:
    """A mirror rule's copy of a query, run by ProxySQL itself: no client's session, nothing to kill."""
    return row.get("cli_host") == MIRROR_CLIENT


def mark_mirror_copies(rows: Sequence[SessionRow]) -> list[ShownSession]:
    """Each mirror copy gets "mirror_of": the client session running the same text now (the copy starts beside its
    original), else None."""
    running = {
        r["info"]: r["SessionID"]
        for r in rows
        if r.get("info") and not is_mirror_copy(r) and r["command"] in ("Query", "Execute")
    }
    return [
        {**r, "mirror_copy": True, "mirror_of": running.get(r.get("info"))}
        if is_mirror_copy(r)
        else {**r, "mirror_copy": False}
        for r in rows
    ]


def live_sessions(
    node: ProxySQLNode,
    sort: str = "time",
    text: str = "",
    hide_sleep: bool = False,
    query_text: Callable[[str | None], str | None] | None = None,
) -> Sessions:
    """{"rows": the SHOWN first sessions in `sort` order, "total" (client sessions), "mirror_copies", "matching",
    "error"}: read from the node now; mirror copies are listed, marked (mark_mirror_copies), never counted as clients;
    `text` keeps the sessions whose user, client, schema, command, query or backend contains it (any case);
    `hide_sleep` leaves out the idle (Sleep) ones; `query_text`: how a query is shown (a viewer's digest form),
    applied before the filter, so that a filter never matches what is not shown."""
    try:
        with ProxySQLAdmin.for_node(node) as admin:
            read = _read(admin)
    except ClientError as exc:
        return {"rows": [], "total": 0, "mirror_copies": 0, "matching": 0, "error": str(exc)}
    rows = mark_mirror_copies(read)
    if query_text is not None:
        rows = [{**r, "info": query_text(r.get("info"))} for r in rows]
    copies = sum(1 for r in rows if r["mirror_copy"])
    total = len(rows) - copies
    if hide_sleep:
        rows = [r for r in rows if r["command"] != "Sleep"]
    if text:
        needle = text.lower()
        rows = [r for r in rows if any(needle in str(r.get(f) or "").lower() for f in FILTERED)]
    rows.sort(key=SORTS.get(sort, SORTS["time"])[1])
    return {"rows": rows[:SHOWN], "total": total, "mirror_copies": copies, "matching": len(rows), "error": None}


def read_session(node: ProxySQLNode, session_id: int) -> SessionRow | None:
    """The session's processlist row, or None when it is not open (any more). Session ids start at 1: no other
    id is read (the client reads every session for id 0, whose first row is another session)."""
    if int(session_id) < 1:
        return None
    with ProxySQLAdmin.for_node(node) as admin:
        rows = _read(admin, session_id)
    return next((row for row in rows if row["SessionID"] == int(session_id)), None)


def describe(row: SessionRow) -> str:
    where = f" in hostgroup {row['hostgroup']}" if row.get("hostgroup") is not None else ""
    return (
        f"session {row['SessionID']} of user {row['user']} from {row['cli_host']}:{row['cli_port']}, "
        f"{row['command']} for {(row['time_ms'] or 0) / 1000:.1f} s{where}"
    )


def fingerprint(row: SessionRow) -> dict[str, str]:
    """What the confirmation showed, to tell it is still the same client: user, client host and port."""
    return {"user": row["user"] or "", "cli_host": row["cli_host"] or "", "cli_port": str(row["cli_port"] or "")}


def kill_session(
    node: ProxySQLNode,
    session_id: int,
    expected: Mapping[str, str],
    *,
    actor: Actor,
    as_digest: Callable[[str | None], str | None],
) -> tuple[SessionRow, bool]:
    """Close one client session of `node`. `expected`: the fingerprint() the operator confirmed. Returns the
    row killed and whether it was gone after; raises KillRefused (audited) when it is not the confirmed one.
    `as_digest`: the session's SQL as the audit log keeps it (viewers read it: its digest, no literal)."""
    target = f"ProxySQL {node.name} session {session_id}"
    row = read_session(node, session_id)
    if row is None or is_mirror_copy(row) or fingerprint(row) != expected:
        why = (
            "it is not open any more"
            if row is None
            else f"it is a mirror rule's copy of a query, run by ProxySQL itself: {MIRROR_REFUSAL}"
            if is_mirror_copy(row)
            else f"the id now belongs to another client ({describe(row)})"
        )
        record(
            "proxysql.kill_session",
            outcome="refused",
            actor=actor,
            cluster=node.cluster,
            target=target,
            details={"node": node.name, "session_id": session_id, "confirmed": expected, "reason": why},
        )
        raise KillRefused(f"Session {session_id} was not killed: {why}.")
    try:
        with ProxySQLAdmin.for_node(node) as admin:
            admin.kill_connection(session_id)
            gone = not admin.processlist(session_id)
    except ClientError as exc:
        record(
            "proxysql.kill_session",
            outcome="failure",
            actor=actor,
            cluster=node.cluster,
            target=target,
            details={"node": node.name, "session_id": session_id, "error": str(exc)},
        )
        raise KillRefused(f"Session {session_id}: the node did not take the kill: {exc}") from None
    record(
        "proxysql.kill_session",
        actor=actor,
        cluster=node.cluster,
        target=target,
        details={
            "node": node.name,
            "session_id": session_id,
            "statement": f"KILL CONNECTION {int(session_id)}",
            "user": row["user"],
            "client": f"{row['cli_host']}:{row['cli_port']}",
            "db": row.get("db"),
            "hostgroup": row.get("hostgroup"),
            "command": row["command"],
            "time_ms": row["time_ms"],
            "info": (as_digest(row.get("info")) or "")[:500],
            "gone_after": gone,
        },
    )
    return row, gone
