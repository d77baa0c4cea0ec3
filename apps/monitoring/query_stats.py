"""The query tools' figures in a ProxySQL node's latest-state document: per-user frontend connections against
their max_connections (stats_mysql_users), sessions by command (stats_mysql_processlist, counted by ProxySQL),
the most frequent backend errors (stats_mysql_errors) and the command counters (stats_mysql_commands_counters).

Read every MONITOR_QUERY_STATS_INTERVAL_S (30 s), not at every fast poll: four small reads more per node, and the
document carries the last reading in between (its own `ts`). Bounded whatever the traffic: the processlist is
counted on the node (GROUP BY command, a few rows), errors are the ERRORS_KEPT most frequent rows (and the totals
by hostgroup and errno, summed on the node, for /metrics), users at most
USERS_KEPT (the busiest), commands only those seen at least once.
"""

from django.conf import settings

from apps.clients.wire import Rejected

ERRORS_KEPT = 20
USERS_KEPT = 50  # the busiest: a node with thousands of users keeps its document small
ERROR_TEXT_KEPT = 200


def wanted(prevs, ts):
    """Whether this poll reads them: none of the node's previous documents has a reading young enough."""
    for prev in prevs:
        last = ((prev or {}).get("query_stats") or {}).get("ts")
        if last is not None and ts is not None and ts - last < settings.MONITOR_QUERY_STATS_INTERVAL_S:
            return False
    return True


def read(admin, ts):
    """One reading as plain data (the document's `query_stats`); a table the node refuses is noted, not fatal."""
    try:
        users = sorted(admin.user_connections(), key=lambda u: (-u.frontend_connections, u.username))[:USERS_KEPT]
        errors, error_totals = admin.backend_errors(ERRORS_KEPT), admin.error_totals()
        commands = admin.command_counters()
        sessions = admin.session_counts()
    except Rejected as exc:
        return {"ts": ts, "error": exc.message}
    return {
        "ts": ts,
        "error": None,
        "users": [[u.username, u.frontend_connections, u.frontend_max_connections] for u in users],
        "sessions": {command: list(v) for command, v in sorted(sessions.items())},
        "errors": [
            [
                e.hostgroup,
                e.hostname,
                e.port,
                e.username,
                e.schemaname,
                e.errno,
                e.count_star,
                e.first_seen,
                e.last_seen,
                e.last_error[:ERROR_TEXT_KEPT],
            ]
            for e in errors
        ],
        "error_totals": [list(t) for t in error_totals],
        "commands": {c.Command: [c.Total_cnt, c.Total_Time_us] for c in commands},
    }


def document(prev, reading, scope=None):
    """The document's `query_stats`: this poll's reading, else the previous one. A ProxySQL serving several
    clusters: the errors of this cluster's hostgroups only (users, sessions and commands are node-wide)."""
    if reading is None:
        return (prev or {}).get("query_stats")
    if scope is not None and "errors" in reading:
        reading = {
            **reading,
            "errors": [e for e in reading["errors"] if scope.keeps(e[0])],
            "error_totals": [t for t in reading["error_totals"] if scope.keeps(t[0])],
        }
    return reading
