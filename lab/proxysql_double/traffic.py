"""Traffic model of the ProxySQL admin double (lab double, not ProxySQL).

The stats tables of the double are computed when read, from this small model that tests and the demo
drive: client sessions per hostgroup with a query rate, pinning (auto_increment token, user variables,
temporary tables, locks...), drains of servers that go OFFLINE_SOFT, cuts on OFFLINE_HARD or removal,
held queries when a hostgroup has no ONLINE server, mirror traffic and its queue, query digests, and
SHUNNED: the backends that sessions use are really connected to (backends.py), and a failing one is
shunned on this endpoint only, then recovers lazily, as ProxySQL 2.7.1 does (samples/shunned.jsonl).

Nothing of the model runs in the background: every read advances it lazily to "now" (per-session
timelines), so an idle endpoint costs nothing and thousands of endpoints fit in one process (only the
backend probes of hostgroups in use run on a few threads shared by the process, see backends.py).
Figures are shaped after the reference samples (sysbench oltp_read_write through ProxySQL 2.7.1).
"""

import json
import math
import random
import time

from .backends import PROBER

# Query shapes, after samples/digest.json and samples/commands_counters.json. Per template: digest
# text ({t} = table number), share of the role's queries, mean/min/max time (us), rows sent and
# affected per query, command counter name. "write" sessions run the writer half of an OLTP
# transaction (BEGIN, 2 UPDATE, DELETE, INSERT, COMMIT), "read" sessions the 14 SELECTs.
WRITE_GLOBAL = [
    ("BEGIN", 1.0, 128, 14, 2912, 0, 0, "BEGIN"),
    ("COMMIT", 1.0, 908, 193, 6874, 0, 0, "COMMIT"),
]
WRITE_PER_TABLE = [
    ("UPDATE sbtest{t} SET k=k+? WHERE id=?", 1.0, 211, 55, 5041, 0, 1, "UPDATE"),
    ("UPDATE sbtest{t} SET c=? WHERE id=?", 1.0, 203, 28, 7900, 0, 1, "UPDATE"),
    ("DELETE FROM sbtest{t} WHERE id=?", 1.0, 179, 26, 3487, 0, 1, "DELETE"),
    ("INSERT INTO sbtest{t} (id,k,c,pad) VALUES (?,?,?,?)", 1.0, 162, 25, 5222, 0, 1, "INSERT"),
]
READ_GLOBAL = []
READ_PER_TABLE = [
    ("SELECT c FROM sbtest{t} WHERE id=?", 10.0, 165, 18, 5465, 1, 0, "SELECT"),
    ("SELECT c FROM sbtest{t} WHERE id BETWEEN ? AND ?", 1.0, 220, 57, 3609, 100, 0, "SELECT"),
    ("SELECT SUM(k) FROM sbtest{t} WHERE id BETWEEN ? AND ?", 1.0, 230, 52, 3664, 1, 0, "SELECT"),
    ("SELECT c FROM sbtest{t} WHERE id BETWEEN ? AND ? ORDER BY c", 1.0, 258, 76, 2938, 100, 0, "SELECT"),
    ("SELECT DISTINCT c FROM sbtest{t} WHERE id BETWEEN ? AND ? ORDER BY c", 1.0, 331, 102, 6047, 100, 0, "SELECT"),
]
ROLES = {"write": (WRITE_GLOBAL, WRITE_PER_TABLE), "read": (READ_GLOBAL, READ_PER_TABLE)}

# Per-role defaults after samples/pool.jsonl: ~3,400 q/s on the writer from 4 sessions (always in a
# transaction), ~8,000 q/s on the readers from 4 sessions (a connection in use ~25% of the time).
ROLE_DEFAULTS = {
    "write": {"rate": 840.0, "busy": 0.97, "bytes_sent": 72.0, "bytes_recv": 11.0},
    "read": {"rate": 2000.0, "busy": 0.25, "bytes_sent": 27.0, "bytes_recv": 2650.0},
}

# Command counters: latency buckets (share of count per bucket) after samples/commands_counters.json.
BUCKETS = [
    "cnt_100us",
    "cnt_500us",
    "cnt_1ms",
    "cnt_5ms",
    "cnt_10ms",
    "cnt_50ms",
    "cnt_100ms",
    "cnt_500ms",
    "cnt_1s",
    "cnt_5s",
    "cnt_10s",
    "cnt_INFs",
]
COMMAND_SHAPES = {  # mean us per query, bucket shares
    "BEGIN": (151.7, [0.5585, 0.4135, 0.0254, 0.0023, 0.00003, 0.00003, 0.0003, 0, 0, 0, 0, 0]),
    "COMMIT": (931.3, [0.0085, 0.114, 0.552, 0.323, 0.0018, 0.0007, 0, 0, 0, 0, 0, 0]),
    "DELETE": (172.1, [0.43, 0.52, 0.04, 0.009, 0.0005, 0.0005, 0, 0, 0, 0, 0, 0]),
    "INSERT": (160.4, [0.45, 0.50, 0.04, 0.009, 0.0005, 0.0005, 0, 0, 0, 0, 0, 0]),
    "SELECT": (158.5, [0.46, 0.49, 0.04, 0.009, 0.0005, 0.0005, 0, 0, 0, 0, 0, 0]),
    "UPDATE": (246.6, [0.30, 0.60, 0.08, 0.018, 0.001, 0.001, 0, 0, 0, 0, 0, 0]),
}
# The command names ProxySQL 2.7 lists in stats_mysql_commands_counters.
COMMANDS = [
    "ALTER_TABLE",
    "ALTER_VIEW",
    "ANALYZE_TABLE",
    "BEGIN",
    "CALL",
    "CHANGE_MASTER",
    "COMMIT",
    "CREATE_DATABASE",
    "CREATE_INDEX",
    "CREATE_TABLE",
    "CREATE_TEMPORARY",
    "CREATE_TRIGGER",
    "CREATE_USER",
    "CREATE_VIEW",
    "DEALLOCATE",
    "DELETE",
    "DESCRIBE",
    "DROP_DATABASE",
    "DROP_INDEX",
    "DROP_TABLE",
    "DROP_TRIGGER",
    "DROP_USER",
    "DROP_VIEW",
    "GRANT",
    "EXECUTE",
    "EXPLAIN",
    "FLUSH",
    "INSERT",
    "KILL",
    "LOAD",
    "LOCK_TABLE",
    "OPTIMIZE",
    "PREPARE",
    "PURGE",
    "RELEASE_SAVEPOINT",
    "RENAME_TABLE",
    "RESET_MASTER",
    "RESET_SLAVE",
    "REPLACE",
    "REVOKE",
    "ROLLBACK",
    "ROLLBACK_SAVEPOINT",
    "SAVEPOINT",
    "SELECT",
    "SELECT_FOR_UPDATE",
    "SET",
    "SHOW_TABLE_STATUS",
    "START_TRANSACTION",
    "TRUNCATE_TABLE",
    "UNLOCK_TABLES",
    "UPDATE",
    "USE",
    "SHOW",
    "UNKNOWN",
]

PIN_REASONS = (
    "auto_increment",
    "user_variable",
    "temporary_table",
    "lock_tables",
    "get_lock",
    "prepared_statement",
    "transaction",
    "no_multiplex",
)
MOVE_DELAY_MS = (18.0, 24.0)  # an unpinned session leaves a draining server after its transaction
MIRROR_LATENCY_MS = 5.0  # service time of one mirrored query on the mirror hostgroup


def role_templates(role):
    glob, per_table = ROLES[role]
    return glob + per_table


def all_slots(role):
    """The digest-view mask holding every template of a role."""
    return (1 << len(role_templates(role))) - 1


def digest_weight_sum(role, m, mask=None):
    """Sum of the relative weights of the first m digests of a role (see the digest view in engine),
    counting only the templates whose slot bit is set in `mask` (all of them by default)."""
    glob, per_table = ROLES[role]
    g = len(glob)
    mask = all_slots(role) if mask is None else mask

    def w(slot, t):
        return t[1] if (mask >> slot) & 1 else 0.0

    total = sum(w(i, t) for i, t in enumerate(glob[: min(m, g)]))
    m -= g
    if m <= 0:
        return total
    p = len(per_table)
    full, rest = divmod(m, p)
    # table k weighs 1 / (1 + k//2): tables 1,2 weigh 1, tables 3,4 weigh 1/2, ...
    z = 2.0 * _harmonic(full // 2) + (full % 2) / (1 + full // 2)
    total += z * sum(w(g + i, t) for i, t in enumerate(per_table))
    total += sum(w(g + i, t) for i, t in enumerate(per_table[:rest])) / (1 + full // 2)
    return total


def _harmonic(n):
    if n < 64:
        return sum(1.0 / h for h in range(1, n + 1))
    return math.log(n) + 0.5772156649015329 + 1 / (2 * n) - 1 / (12 * n * n)


def _mirror_counters():
    return {"arrived": 0.0, "executed": 0.0, "dropped": 0.0, "skipped_prepared": 0.0}


class Server:
    """One runtime (hostgroup, host, port) and its pool figures.

    `configured` is the status loaded from mysql_servers; `status` is what ProxySQL shows: SHUNNED while
    its own verdict after connection errors stands (see TrafficModel._check_backends)."""

    __slots__ = (
        "key",
        "configured",
        "row",
        "shunned",
        "last_error",
        "probe_seen",
        "weight",
        "max_connections",
        "latency_us",
        "pool",
        "conn_ok",
        "conn_err",
        "max_used",
        "queries",
        "bytes_sent",
        "bytes_recv",
        "forced",
    )

    def __init__(self, key, latency_us, now):
        self.key = key
        self.configured = "ONLINE"
        self.row = None  # the loaded mysql_servers row: a LOAD that changes it resets SHUNNED
        self.shunned = False
        self.last_error = 0.0  # monotonic time of the last connection error that counted
        self.probe_seen = now  # probe results older than this were already taken into account
        self.weight = 1
        self.max_connections = 1000
        self.latency_us = latency_us
        self.pool = 0  # backend connections alive (used + free)
        self.conn_ok = 0
        self.conn_err = 0
        self.max_used = 0
        self.queries = 0.0
        self.bytes_sent = 0.0
        self.bytes_recv = 0.0
        self.forced = {}

    @property
    def status(self):
        return "SHUNNED" if self.shunned else self.configured


class Workload:
    """The client sessions of one hostgroup and how they behave."""

    def __init__(self, hostgroup):
        self.hostgroup = hostgroup
        self.kind = "read"
        self.rate = ROLE_DEFAULTS["read"]["rate"]
        self.busy = ROLE_DEFAULTS["read"]["busy"]
        self.pinned_fraction = 0.0
        self.pinned_reason = None
        self.prepared_fraction = 0.0
        self.user = "app"
        self.schema = "sbtest"
        self.reconnect = True
        self.idle_since = None
        self.sessions = []
        self.mirror_fraction = 0.0  # share of its queries that a mirror rule matches (cached)


class Session:
    __slots__ = (
        "id",
        "wl",
        "server",
        "reason",
        "t",
        "move_at",
        "held_since",
        "created",
        "cli_port",
        "l_port",
        "queries",
        "token",
    )

    def __init__(self, sid, wl, reason, now):
        self.id = sid
        self.wl = wl
        self.server = None
        self.reason = reason
        self.t = now
        self.move_at = None
        self.held_since = None
        self.created = now
        self.cli_port = 40000 + (sid * 7919) % 20000
        self.l_port = 33000 + (sid * 104729) % 20000
        self.queries = 0.0
        self.token = 0


class TrafficModel:
    """Per-endpoint model. All public methods are thread-safe through the endpoint's lock.

    Python API (the same names are reachable over the wire as `LAB <NAME> {json}`):
      set_sessions(hostgroup, count, rate=None, kind=None, pinned_fraction=None, pinned_reason=None,
                   busy=None, prepared_fraction=None, user=None, schema=None, reconnect=None)
      clear_sessions(hostgroup=None)
      cut_sessions(hostgroup=None, hostname=None, port=None)
      set_server(hostgroup, hostname, port, conn_used=, conn_free=, conn_ok=, conn_err=,
                 max_conn_used=, queries=, bytes_sent=, bytes_recv=, latency_us=)  (None clears)
      set_mirror(latency_ms=None, extra_rate=None)
      set_digests(count=None, queries=None)
      set_global(name, value)        force a stats_mysql_global value (None clears)
      take_holds(hostgroup=None)     the holds that ended since the last call (ms each, oldest first)
      status()                       counters and state as a dict
      shun_state()                   per server: configured/shown status, ConnERR, recovery, last probe
    """

    def __init__(self, lock, seed=None):
        self.lock = lock
        self.rng = random.Random(seed)
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.last = self.started
        self.servers = {}  # (hg, host, port) -> Server, in runtime order
        self.workloads = {}  # hg -> Workload
        self.next_sid = 1
        self._mirror_sids = []  # the SessionIDs of the mirror copies' sessions, one per slot (kept across reads)
        self.vars = {}  # runtime mysql-* variables (strings)
        self.rules = []  # runtime query rules (dicts)
        self.questions = 0.0
        self.commands = {}  # command -> count
        self.digest_q = {}  # (hg, role) -> queries since last digest reset
        self.digest_first = {}  # (hg, role) -> wall time of first query since reset
        self.digest_count = 20
        self.digest_reset_at = time.time()
        # A factor on the time every query of a digest takes from now (a slower plan or backend): its rows' sum_time
        # grows by it, and a group's time since the reset is kept (digest_time), so a change shows in the deltas.
        self.digest_latency = 1.0
        self.digest_time = {}  # (hg, role) -> queries x their latency factor since the last digest reset
        self.rule_hits = {}  # rule_id -> hits
        self.mirror_latency_ms = MIRROR_LATENCY_MS
        self.mirror_extra_rate = 0.0
        self.mirror_queue = 0.0
        self.mirror_arrived = 0.0
        self.mirror_executed = 0.0
        self.mirror_dropped = 0.0
        self.mirror_skipped_ps = 0.0
        # Per mirror route (rule, mirror hg, origin hg, role, template mask, user, schema): queries arrived
        # in the current step, waiting in the queue, and per rule what became of them.
        self._mirror_step = {}
        self.mirror_queue_by_route = {}
        self.mirror_by_rule = {}
        # (mirror hg, role, user, schema) -> mirrored executions since the last digest reset and the
        # templates they copy (a mask of slots): the mirror hostgroup's rows of stats_mysql_query_digest.
        self.mirror_digest_q = {}
        self.mirror_digest_first = {}
        self.mirror_digest_mask = {}
        self.prepared_executed = 0.0  # Com_frontend_stmt_execute: prepared executions, never mirrored
        self.global_overrides = {}
        self.counters = {
            "sessions_created": 0,
            "sessions_closed": 0,
            "sessions_cut": 0,
            "client_errors": 0,
            "held_timeouts": 0,
            "moved_sessions": 0,
            "sessions_killed": 0,
        }
        self.servers_table_version = 0  # the start's own load makes it 1, as on a real node (lab/conformance.py)
        self._rule_fracs = {}  # hg -> [(rule_id, share of its queries the rule matches)]
        self._mirror_routes = {}  # hg -> [(rule_id, share, mirror hg, template mask)]
        self._shares_key = None  # the digest table's shape the shares above were computed for
        self.no_multiplex_hgs = set()
        self.holds = []  # (hostgroup, ms) of every hold that ended, oldest first
        # stats_mysql_errors: (hg, host, port, user, schema, errno) -> [count, first_seen, last_seen, message]
        self.errors = {}

    # ------------------------------------------------------------------ runtime inputs (engine)
    def set_runtime_servers(self, rows):
        """rows: dicts of runtime_mysql_servers. Keeps figures of servers that stay."""
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            new = {}
            for r in rows:
                key = (int(r["hostgroup_id"]), str(r["hostname"]), int(r["port"]))
                row = tuple(sorted((k, str(v)) for k, v in r.items()))
                srv = self.servers.get(key)
                if srv is None:
                    srv = Server(key, self.rng.randint(150, 360), now)
                elif srv.row != row and srv.shunned:
                    # a LOAD that changes the row resets ProxySQL's verdict; an unchanged row keeps it
                    srv.shunned = False
                    srv.last_error = 0.0
                    srv.probe_seen = now
                srv.row = row
                srv.configured = str(r["status"]).upper()
                srv.weight = int(r["weight"])
                srv.max_connections = int(r["max_connections"])
                new[key] = srv
            self.servers = new
            self.servers_table_version += 1
            self._reconcile(now)

    def set_runtime_hostgroup_attributes(self, rows):
        """runtime_mysql_hostgroup_attributes: multiplex=0 keeps every session of the hostgroup on
        its backend connection."""
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            self.no_multiplex_hgs = {int(r["hostgroup_id"]) for r in rows if str(r.get("multiplex")) == "0"}
            self._reconcile(now)

    def set_runtime_variables(self, values):
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            self.vars = dict(values)
            self._reconcile(now)

    def set_runtime_rules(self, rules):
        with self.lock:
            self._advance(time.monotonic())
            self.rules = [r for r in rules if str(r.get("active")) == "1"]
            # LOAD MYSQL QUERY RULES TO RUNTIME builds new rules: every hit counter starts at 0.
            self.rule_hits = {}
            self._refresh_mirror_fractions()

    # ------------------------------------------------------------------ variables
    def _var_int(self, name, default):
        try:
            return int(self.vars.get(name, default))
        except (TypeError, ValueError):
            return default

    def _var_bool(self, name, default):
        v = str(self.vars.get(name, default)).lower()
        return v in ("true", "1")

    # ------------------------------------------------------------------ public knobs
    def set_sessions(
        self,
        hostgroup,
        count,
        rate=None,
        kind=None,
        pinned_fraction=None,
        pinned_reason=None,
        busy=None,
        prepared_fraction=None,
        user=None,
        schema=None,
        reconnect=None,
    ):
        """Set the client sessions of one hostgroup: their number and behaviour.

        kind: "write" (OLTP writer half: BEGIN/UPDATE/DELETE/INSERT/COMMIT) or "read" (SELECTs);
        default "write" when pinned_reason is auto_increment, else "read" (or the previous kind).
        rate: queries per second per session. pinned_reason (one of PIN_REASONS) applies to
        round(count * pinned_fraction) sessions (pinned_fraction defaults to 1 when a reason is
        given). busy: share of time an unpinned session holds a backend connection.
        """
        hostgroup = int(hostgroup)
        count = int(count)
        if pinned_reason is not None and pinned_reason not in PIN_REASONS:
            raise ValueError(f"pinned_reason must be one of {PIN_REASONS}")
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            wl = self.workloads.get(hostgroup)
            if wl is None:
                wl = self.workloads[hostgroup] = Workload(hostgroup)
                if kind is None:
                    kind = "write" if pinned_reason == "auto_increment" else "read"
            if kind is not None:
                if kind not in ROLES:
                    raise ValueError("kind must be 'write' or 'read'")
                if kind != wl.kind:
                    wl.kind = kind
                    if rate is None:
                        wl.rate = ROLE_DEFAULTS[kind]["rate"]
                    if busy is None:
                        wl.busy = ROLE_DEFAULTS[kind]["busy"]
            if rate is not None:
                wl.rate = float(rate)
                wl.idle_since = now if wl.rate <= 0 else None
            if busy is not None:
                wl.busy = min(1.0, max(0.0, float(busy)))
            if pinned_reason is not None:
                wl.pinned_reason = pinned_reason
                wl.pinned_fraction = 1.0 if pinned_fraction is None else float(pinned_fraction)
            elif pinned_fraction is not None:
                wl.pinned_fraction = float(pinned_fraction)
                if wl.pinned_fraction == 0:
                    wl.pinned_reason = None
            if prepared_fraction is not None:
                wl.prepared_fraction = min(1.0, max(0.0, float(prepared_fraction)))
            if user is not None:
                wl.user = str(user)
            if schema is not None:
                wl.schema = str(schema)
            if reconnect is not None:
                wl.reconnect = bool(reconnect)
            while len(wl.sessions) > count:  # clean close of the newest sessions
                s = wl.sessions.pop()
                self._release(s, now)
                self.counters["sessions_closed"] += 1
            while len(wl.sessions) < count:
                self._new_session(wl, now)
            n_pinned = round(count * wl.pinned_fraction) if wl.pinned_reason else 0
            for i, s in enumerate(wl.sessions):
                s.reason = wl.pinned_reason if i < n_pinned else None
            self._refresh_mirror_fractions()
            self._reconcile(now)
            return self._workload_status(wl, now)

    def clear_sessions(self, hostgroup=None):
        with self.lock:
            for hg in list(self.workloads):
                if hostgroup is None or int(hostgroup) == hg:
                    self.set_sessions(hg, 0)
                    del self.workloads[hg]
            return True

    def cut_sessions(self, hostgroup=None, hostname=None, port=None):
        """Cut client sessions now (like a crash of their backend); returns how many."""
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            n = 0
            for wl in list(self.workloads.values()):
                for s in list(wl.sessions):
                    if hostgroup is not None and wl.hostgroup != int(hostgroup):
                        continue
                    if hostname is not None or port is not None:
                        if s.server is None:
                            continue
                        if hostname is not None and s.server[1] != hostname:
                            continue
                        if port is not None and s.server[2] != int(port):
                            continue
                    self._cut(s, now)
                    n += 1
            self._reconcile(now)
            return n

    def set_server(self, hostgroup, hostname, port, **figures):
        """Force figures of one pool row (conn_used, conn_free, conn_ok, conn_err, max_conn_used,
        queries, bytes_sent, bytes_recv, latency_us). A None value returns it to the model."""
        allowed = {
            "conn_used",
            "conn_free",
            "conn_ok",
            "conn_err",
            "max_conn_used",
            "queries",
            "bytes_sent",
            "bytes_recv",
            "latency_us",
        }
        with self.lock:
            key = (int(hostgroup), str(hostname), int(port))
            srv = self.servers.get(key)
            if srv is None:
                raise KeyError(f"no runtime server {key}: LOAD MYSQL SERVERS TO RUNTIME first")
            for k, v in figures.items():
                if k not in allowed:
                    raise ValueError(f"unknown figure {k}; use {sorted(allowed)}")
                if k == "latency_us" and v is not None:
                    srv.latency_us = int(v)
                elif v is None:
                    srv.forced.pop(k, None)
                else:
                    srv.forced[k] = int(v)
            return {"server": list(key), "forced": dict(srv.forced), "latency_us": srv.latency_us}

    def set_mirror(self, latency_ms=None, extra_rate=None):
        """Mirror service time per query (ms) and an extra mirrored arrival rate (q/s)."""
        with self.lock:
            self._advance(time.monotonic())
            if latency_ms is not None:
                self.mirror_latency_ms = max(0.01, float(latency_ms))
            if extra_rate is not None:
                self.mirror_extra_rate = max(0.0, float(extra_rate))
            return self._mirror_status()

    def set_digests(self, count=None, queries=None, latency=None):
        """Number of distinct digests per endpoint (spread over the active hostgroups), and extra
        queries added to every active hostgroup's digest counters (history, e.g. to show all of
        100,000 digests at once); `latency`: a factor on every digest's time per query from now (1.0
        as modelled, 3.0 three times slower)."""
        with self.lock:
            self._advance(time.monotonic())
            if latency is not None:
                self.digest_latency = max(0.01, float(latency))
            if count is not None:
                self.digest_count = max(0, int(count))
            if queries is not None:
                groups = self._digest_groups() or [(hg, wl.kind) for hg, wl in self.workloads.items()]
                for g in groups:
                    self.digest_q[g] = self.digest_q.get(g, 0.0) + float(queries)
                    self.digest_time[g] = self.digest_time.get(g, 0.0) + float(queries) * self.digest_latency
                    self.digest_first.setdefault(g, time.time())
            return {"count": self.digest_count, "groups": len(self._digest_groups())}

    def set_global(self, name, value):
        with self.lock:
            if value is None:
                self.global_overrides.pop(name, None)
            else:
                self.global_overrides[name] = str(value)
            return dict(self.global_overrides)

    def take_holds(self, hostgroup=None):
        """How long each held query waited for a usable server in its hostgroup (ms), for the holds that
        ended since the last call; forgets them. What a client would see as extra latency."""
        with self.lock:
            self._advance(time.monotonic())
            taken = [round(ms, 2) for hg, ms in self.holds if hostgroup is None or hg == int(hostgroup)]
            self.holds = [h for h in self.holds if hostgroup is not None and h[0] != int(hostgroup)]
            return taken

    def status(self):
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            return {
                "uptime_s": round(now - self.started, 3),
                "questions": int(self.questions),
                "counters": dict(self.counters),
                "workloads": [self._workload_status(wl, now) for wl in self.workloads.values()],
                "servers": [self._server_status(s) for s in self.servers.values()],
                "mirror": self._mirror_status(),
                "digests": {"count": self.digest_count, "queries_since_reset": int(sum(self.digest_q.values()))},
            }

    # ------------------------------------------------------------------ internals
    def _workload_status(self, wl, now):
        held = sum(1 for s in wl.sessions if s.server is None)
        pinned = sum(1 for s in wl.sessions if self._pinned(s, now))
        return {
            "hostgroup": wl.hostgroup,
            "kind": wl.kind,
            "sessions": len(wl.sessions),
            "rate": wl.rate,
            "busy": wl.busy,
            "pinned": pinned,
            "pinned_reason": wl.pinned_reason,
            "held": held,
            "prepared_fraction": wl.prepared_fraction,
            "on_servers": sorted({"%s:%d" % (s.server[1], s.server[2]) for s in wl.sessions if s.server}),
        }

    def _server_status(self, srv):
        return {
            "hostgroup": srv.key[0],
            "hostname": srv.key[1],
            "port": srv.key[2],
            "status": srv.status,
            "configured_status": srv.configured,
            "sessions": self._sessions_on(srv.key),
            "queries": int(srv.queries),
            "forced": dict(srv.forced),
        }

    def _sessions_on(self, key):
        return sum(1 for wl in self.workloads.values() for s in wl.sessions if s.server == key)

    def _new_session(self, wl, now):
        s = Session(self.next_sid, wl, None, now)
        self.next_sid += 1
        wl.sessions.append(s)
        self.counters["sessions_created"] += 1
        self._place(s, now)
        return s

    def _pinned(self, s, now):
        """Whether a session keeps its backend connection (multiplexing disabled for it)."""
        if not self._var_bool("mysql-multiplexing", "true") or s.wl.hostgroup in self.no_multiplex_hgs:
            return True
        if s.reason is None:
            return False
        if s.reason == "auto_increment":
            # The token is renewed by each insert: with a delay > 0 and a continuous insert load the
            # session never gets back to multiplexing; with 0 it releases at once. Without load it
            # releases after auto_increment_delay_multiplex_timeout_ms.
            if self._var_int("mysql-auto_increment_delay_multiplex", 5) <= 0:
                return False
            if s.wl.rate <= 0 and s.wl.idle_since is not None:
                timeout = self._var_int("mysql-auto_increment_delay_multiplex_timeout_ms", 10000)
                return now - s.wl.idle_since < timeout / 1000.0
            return True
        return True

    def _usable(self, hg):
        out = []
        for srv in self.servers.values():
            if srv.key[0] == hg and srv.status == "ONLINE" and srv.weight > 0:
                if self._sessions_on(srv.key) < srv.max_connections:
                    out.append(srv)
        return out

    def _place(self, s, now):
        """Give a session a backend in its hostgroup, or hold it (no ONLINE server)."""
        cands = self._usable(s.wl.hostgroup)
        if not cands:
            if s.held_since is None:
                s.held_since = now
            s.server = None
            return
        total = sum(c.weight for c in cands)
        pick = self.rng.uniform(0, total)
        for srv in cands:
            pick -= srv.weight
            if pick <= 0:
                break
        s.server = srv.key
        if s.held_since is not None:  # the query it held waited this long for a usable server
            self.holds.append((s.wl.hostgroup, (now - s.held_since) * 1000.0))
            del self.holds[:-10000]
        s.held_since = None
        if self._sessions_on(srv.key) > srv.pool:
            srv.pool += 1
            srv.conn_ok += 1

    def _release(self, s, now):
        """Session leaves its server: the connection goes back to the pool, or is destroyed when
        the server is not ONLINE any more."""
        if s.server is not None:
            srv = self.servers.get(s.server)
            if srv is not None and srv.status != "ONLINE":
                srv.pool = max(0, srv.pool - 1)
        s.server = None
        s.move_at = None

    def _cut(self, s, now, killed=False):
        wl = s.wl
        if s.server is not None:
            srv = self.servers.get(s.server)
            if srv is not None:
                srv.pool = max(0, srv.pool - 1)
                if not killed and srv.status != "ONLINE":  # its backend connection died under it
                    self._error(srv.key, 2013, "Lost connection to MySQL server during query", user_of=wl)
        s.server = None
        if s in wl.sessions:
            wl.sessions.remove(s)
        self.counters["sessions_killed" if killed else "sessions_cut"] += 1
        if not killed:
            self.counters["client_errors"] += 1
        if wl.reconnect:  # the application opens a new connection at once
            new = self._new_session(wl, now)
            new.reason = s.reason

    def _reconcile(self, now):
        """Apply the runtime state to every session: cut, schedule moves, place held ones."""
        lo, hi = MOVE_DELAY_MS
        for wl in list(self.workloads.values()):
            for s in list(wl.sessions):
                if s.server is not None:
                    srv = self.servers.get(s.server)
                    if srv is None or srv.status == "OFFLINE_HARD":
                        self._cut(s, now)
                    elif srv.status != "ONLINE":
                        if self._pinned(s, now):
                            s.move_at = None
                        elif s.move_at is None:
                            s.move_at = now + self.rng.uniform(lo, hi) / 1000.0
                    else:
                        s.move_at = None
                else:
                    self._place(s, now)

    def _advance(self, now):
        """Bring the model to `now`: accrue queries per session, apply scheduled moves, count held
        timeouts, run the mirror queue."""
        dt = now - self.last
        if dt < 0:
            return
        self._check_backends(now)
        if self.rules and self._shares_key != (self.digest_count, frozenset(self._digest_groups_now())):
            self._refresh_mirror_fractions()  # the digest table's shape changed: so did the rules' shares
        timeout = self._var_int("mysql-connect_timeout_server_max", 10000) / 1000.0
        for wl in list(self.workloads.values()):
            for s in list(wl.sessions):
                if s.move_at is not None and s.move_at <= now:
                    t = max(s.move_at, s.t)
                    self._accrue(s, t - s.t, t)
                    s.t = t
                    srv = self.servers.get(s.server) if s.server else None
                    self._release(s, t)
                    if srv is not None:
                        self.counters["moved_sessions"] += 1
                    self._place(s, t)
                if s.server is None and s.held_since is not None and timeout > 0:
                    # held query: ProxySQL gives up after connect_timeout_server_max; the client
                    # gets an error (9001) and retries.
                    while now - s.held_since >= timeout:
                        s.held_since += timeout
                        self.counters["held_timeouts"] += 1
                        self.counters["client_errors"] += 1
                self._accrue(s, now - s.t, now)
                s.t = now
        # re-check pins that expire by themselves (idle auto_increment sessions)
        if any(
            s.server
            and self._pinned(s, now) is False
            and s.move_at is None
            and self.servers.get(s.server) is not None
            and self.servers[s.server].status not in ("ONLINE", "OFFLINE_HARD")
            for wl in self.workloads.values()
            for s in wl.sessions
        ):
            self._reconcile(now)
        self._run_mirror_queue(dt)
        self.last = now

    def _run_mirror_queue(self, dt):
        """This step's mirrored arrivals join the queue; mirror_max_concurrency slots serve it; what
        exceeds mysql-mirror_max_queue_length (per thread, so x mysql-threads in total) is dropped.
        Served and dropped queries are taken from every route in proportion to what it has queued."""
        routes = dict(self.mirror_queue_by_route)
        for key, n in self._mirror_step.items():
            routes[key] = routes.get(key, 0.0) + n
        self._mirror_step = {}
        if self.mirror_extra_rate > 0:
            routes[None] = routes.get(None, 0.0) + self.mirror_extra_rate * dt
            self.mirror_arrived += self.mirror_extra_rate * dt
        backlog = sum(routes.values())
        cap = max(1, self._var_int("mysql-mirror_max_concurrency", 16))
        capacity = cap * 1000.0 / self.mirror_latency_ms * dt
        qmax = self._var_int("mysql-mirror_max_queue_length", 32000) * max(1, self._var_int("mysql-threads", 4))
        served = min(backlog, capacity)
        kept = 1.0
        if backlog - served > qmax:
            kept = qmax / (backlog - served)
        served_share = served / backlog if backlog > 0 else 0.0
        for key, n in list(routes.items()):
            executed = n * served_share
            waiting = (n - executed) * kept
            dropped = n - executed - waiting
            routes[key] = waiting
            if key is not None:
                rule = self.mirror_by_rule.setdefault(key[0], _mirror_counters())
                rule["executed"] += executed
                rule["dropped"] += dropped
                self._mirror_executed(key, executed)
            self.mirror_dropped += dropped
        self.mirror_queue_by_route = {k: v for k, v in routes.items() if v > 1e-9}
        # A full queue holds exactly its cap: the routes' kept shares can sum to 99.99999999999999 (read as 99).
        self.mirror_queue = float(qmax) if kept < 1.0 else sum(self.mirror_queue_by_route.values())
        self.mirror_executed += served
        # A mirror session runs the COM_QUERY path like a client's: it counts in Questions.
        self.questions += served

    def _mirror_executed(self, key, n):
        """n queries of one mirror route ran on its mirror hostgroup: its servers' Queries and the
        mirror hostgroup's digest rows (same digests as the originals: a copy of the query)."""
        if n <= 0:
            return
        _rule, mirror_hg, _origin, role, mask, user, schema = key
        group = (mirror_hg, role, user, schema)
        if not self.mirror_digest_q.get(group):
            self.mirror_digest_first[group] = time.time()
        self.mirror_digest_q[group] = self.mirror_digest_q.get(group, 0.0) + n
        self.mirror_digest_mask[group] = self.mirror_digest_mask.get(group, 0) | mask
        targets = [srv for srv in self.servers.values() if srv.key[0] == mirror_hg and srv.status == "ONLINE"]
        for srv in targets:
            srv.queries += n / len(targets)

    # ------------------------------------------------------------------ shunning (ProxySQL's own verdict)
    def _used_hostgroups(self):
        """Hostgroups whose sessions keep needing backend connections (queries flowing, mirrored too)."""
        used = {wl.hostgroup for wl in self.workloads.values() if wl.sessions and wl.rate > 0}
        if self.mirror_extra_rate > 0 or any(wl.mirror_fraction for wl in self.workloads.values() if wl.sessions):
            used.update(self._mirror_hostgroups())
        return used

    def _check_backends(self, now):
        """Connection errors as ProxySQL 2.7 meets them, on this endpoint only: a server of a hostgroup
        that its sessions use is shunned when a connection to it fails (mysql-shun_on_failures errors
        within a second, as a session's connect retries make them), and recovers lazily: only when a
        session needs the hostgroup again after the recovery wait and the backend answers. Servers of
        hostgroups nobody uses are never tried, so never shunned (and never recovered)."""
        used = self._used_hostgroups()
        if not used:
            return
        user = self.vars.get("mysql-monitor_username", "monitor")
        password = self.vars.get("mysql-monitor_password", "monitor")
        for srv in list(self.servers.values()):
            hg, host, port = srv.key
            if hg not in used or srv.configured != "ONLINE" or srv.weight <= 0:
                continue
            if srv.shunned:
                wait = self._recovery_wait(desperate=not self._usable(hg))
                if wait is None or now - srv.last_error <= wait:
                    continue  # not tried again before the wait is over
                res = PROBER.latest(host, port, user, password, now)
                if res is None or res.at - srv.last_error <= wait or res.at <= srv.probe_seen:
                    continue  # no connection attempt since the wait ended yet
                srv.probe_seen = res.at
                if res.ok:
                    self._unshun(srv, now)
                else:
                    srv.last_error = res.at
                    srv.conn_err += self._failures_to_shun()
            else:
                res = PROBER.latest(host, port, user, password, now)
                if res is not None and res.at > srv.probe_seen:
                    srv.probe_seen = res.at
                    if not res.ok:
                        self._shun(srv, res.at, now)

    def _failures_to_shun(self):
        # MySrvC::connect_error: min(shun_on_failures, connect_retries_on_failure + 1) errors in one second
        return max(
            1,
            min(self._var_int("mysql-shun_on_failures", 5), self._var_int("mysql-connect_retries_on_failure", 10) + 1),
        )

    def _recovery_wait(self, desperate=False):
        """Seconds a shunned server waits before it is tried again (MyHGC::get_random_MySrvC): capped
        below connect_timeout_server_max, a tenth of it when the hostgroup has nothing else; None when
        mysql-shun_recovery_time_sec=0 turns recovery off."""
        rec = self._var_int("mysql-shun_recovery_time_sec", 10)
        ct_max = self._var_int("mysql-connect_timeout_server_max", 10000)
        if desperate:
            wait = ct_max // 10000 - 1 if rec * 1000 >= ct_max else rec // 10
        elif rec == 0:
            return None
        else:
            wait = ct_max // 1000 - 1 if rec * 1000 >= ct_max else rec
        return max(1, wait)

    def _error(self, key, errno, message, user_of=None):
        """One backend error as stats_mysql_errors counts it, for each workload of the hostgroup (its user and
        schema), or only for `user_of`'s."""
        hg, host, port = key
        wall = int(time.time())
        for wl in [user_of] if user_of else [w for w in self.workloads.values() if w.hostgroup == hg and w.sessions]:
            entry = self.errors.setdefault((hg, host, port, wl.user, wl.schema, errno), [0, wall, wall, message])
            entry[0] += 1
            entry[2], entry[3] = wall, message

    def error_rows(self):
        with self.lock:
            return [
                (hg, host, port, user, "", schema, errno, n, first, last, message)
                for (hg, host, port, user, schema, errno), (n, first, last, message) in sorted(self.errors.items())
            ]

    def kill(self, session_id):
        """KILL CONNECTION: the client session is closed (its application reconnects, as after a cut); True
        when there was such a session."""
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            for wl in self.workloads.values():
                for s in wl.sessions:
                    if s.id == session_id:
                        self._cut(s, now, killed=True)
                        return True
            return False

    def _shun(self, srv, error_at, now):
        srv.shunned = True
        srv.last_error = error_at
        srv.conn_err += self._failures_to_shun()
        self._error(srv.key, 2003, f"Can't connect to MySQL server on '{srv.key[1]}' (111)")
        for wl in self.workloads.values():
            for s in list(wl.sessions):
                if s.server != srv.key:
                    continue
                if self._pinned(s, now):
                    self._cut(s, now)  # its backend connection died with the backend
                else:
                    self._release(s, now)  # the next query goes to another server (or waits)
                    self._place(s, now)
        srv.pool = 0

    def _unshun(self, srv, now):
        srv.shunned = False
        srv.last_error = 0.0
        # unpinned sessions spread over the hostgroup again by weight; held ones get a server
        for wl in self.workloads.values():
            if wl.hostgroup != srv.key[0]:
                continue
            for s in wl.sessions:
                if s.server is not None and not self._pinned(s, now) and s.move_at is None:
                    self._release(s, now)
                    self._place(s, now)
        self._reconcile(now)

    def server_statuses(self):
        """{(hostgroup, hostname, port): status shown}, for runtime_mysql_servers."""
        with self.lock:
            self._advance(time.monotonic())
            return {key: srv.status for key, srv in self.servers.items()}

    def shun_state(self):
        """Per runtime server: configured and shown status, ConnERR, the last error and the recovery
        wait, and the latest probe of its backend (shared by the process)."""
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            used = self._used_hostgroups()
            out = []
            for srv in self.servers.values():
                res = PROBER.peek(srv.key[1], srv.key[2])
                out.append(
                    {
                        "hostgroup": srv.key[0],
                        "hostname": srv.key[1],
                        "port": srv.key[2],
                        "configured_status": srv.configured,
                        "status": srv.status,
                        "conn_err": srv.conn_err,
                        "hostgroup_used": srv.key[0] in used,
                        "error_age_s": round(now - srv.last_error, 3) if srv.shunned else None,
                        "recovery_wait_s": self._recovery_wait(desperate=not self._usable(srv.key[0]))
                        if srv.shunned
                        else None,
                        "probe": res.as_dict(now) if res else None,
                    }
                )
            return out

    def _accrue(self, s, dt, now):
        if dt <= 0 or s.server is None:
            return
        wl = s.wl
        q = wl.rate * dt
        if q <= 0:
            return
        srv = self.servers.get(s.server)
        if srv is None:
            return
        d = ROLE_DEFAULTS[wl.kind]
        srv.queries += q
        srv.bytes_sent += q * d["bytes_sent"]
        srv.bytes_recv += q * d["bytes_recv"]
        s.queries += q
        self.questions += q
        key = (wl.hostgroup, wl.kind)
        if key not in self.digest_q or self.digest_q[key] == 0:
            self.digest_first[key] = time.time()
        self.digest_q[key] = self.digest_q.get(key, 0.0) + q
        self.digest_time[key] = self.digest_time.get(key, 0.0) + q * self.digest_latency
        tpl = role_templates(wl.kind)
        wsum = sum(t[1] for t in tpl)
        for t in tpl:
            self.commands[t[7]] = self.commands.get(t[7], 0.0) + q * t[1] / wsum
        self.prepared_executed += q * wl.prepared_fraction
        for rid, share, mirror_hg, mask in self._mirror_routes.get(wl.hostgroup, ()):
            # Every matching query hits the rule; only text-protocol queries are mirrored.
            mirrored = q * share * (1 - wl.prepared_fraction)
            key = (rid, mirror_hg, wl.hostgroup, wl.kind, mask, wl.user, wl.schema)
            self._mirror_step[key] = self._mirror_step.get(key, 0.0) + mirrored
            rule = self.mirror_by_rule.setdefault(rid, _mirror_counters())
            rule["arrived"] += mirrored
            rule["skipped_prepared"] += q * share * wl.prepared_fraction
            self.mirror_arrived += mirrored
            self.mirror_skipped_ps += q * share * wl.prepared_fraction
        for rid, frac in self._rule_fracs.get(wl.hostgroup, ()):
            self.rule_hits[rid] = self.rule_hits.get(rid, 0.0) + q * frac
        s.token = self._var_int("mysql-auto_increment_delay_multiplex", 5) if s.reason == "auto_increment" else 0

    def _digest_groups_now(self):
        """(hostgroup, role) groups of the digest table: those with queries since the last reset, and the
        workloads with sessions (whose queries are about to show)."""
        return set(self._digest_groups()) | {(hg, wl.kind) for hg, wl in self.workloads.items() if wl.sessions}

    def _digest_sizes(self, groups):
        """{role: digests per group of that role}: digest_count spread over the roles and their groups."""
        roles = sorted({r for _, r in groups})
        share = {"write": 4.0, "read": 5.0}
        sizes = {}
        for role in roles:
            n_role = self.digest_count * share[role] / sum(share[r] for r in roles)
            if len(roles) == 2 and role == "write":
                n_role = min(self.digest_count, 2 + round((self.digest_count - 2) * 4 / 9))
            elif len(roles) == 2:
                n_role = self.digest_count - min(self.digest_count, 2 + round((self.digest_count - 2) * 4 / 9))
            sizes[role] = max(1, int(n_role // max(1, sum(1 for _, r in groups if r == role))))
        return sizes

    def _refresh_mirror_fractions(self):
        """Which share of each workload's queries the active runtime rules match (by digest text). The
        shares are those of the digest table (its templates spread over tables), so a rule's hits equal
        the executions of the digests it matches, as on a real ProxySQL."""
        import re

        self._rule_fracs = {}
        self._mirror_routes = {}
        groups = self._digest_groups_now()
        self._shares_key = (self.digest_count, frozenset(groups))
        sizes = self._digest_sizes(groups)
        for wl in self.workloads.values():
            tpl = role_templates(wl.kind)
            n = sizes.get(wl.kind, 1)
            wsum = digest_weight_sum(wl.kind, n)

            def weight(ts, tpl=tpl, n=n, role=wl.kind):
                return digest_weight_sum(role, n, sum(1 << tpl.index(t) for t in ts))

            remaining = list(tpl)
            mirror = 0.0
            fracs = []
            routes = []
            for r in sorted(self.rules, key=lambda r: int(r.get("rule_id") or 0)):
                if (
                    r.get("destination_hostgroup") not in (None, "")
                    and int(r["destination_hostgroup"]) != wl.hostgroup
                    and r.get("mirror_hostgroup") in (None, "")
                ):
                    continue
                if r.get("username") not in (None, "") and r["username"] != wl.user:
                    continue
                pattern = r.get("match_digest") or r.get("match_pattern")
                try:
                    rx = re.compile(pattern, re.I) if pattern else None
                except re.error:
                    continue
                negate = str(r.get("negate_match_pattern") or "0") == "1"
                matched = [t for t in remaining if rx is None or (bool(rx.search(t[0].replace("{t}", "1"))) != negate)]
                share = weight(matched) / wsum if wsum else 0.0
                if share <= 0:
                    continue
                fracs.append((int(r["rule_id"]), share))
                if r.get("mirror_hostgroup") not in (None, ""):
                    mirror += share
                    mask = sum(1 << tpl.index(t) for t in matched)
                    routes.append((int(r["rule_id"]), share, int(r["mirror_hostgroup"]), mask))
                if str(r.get("apply")) == "1":
                    remaining = [t for t in remaining if t not in matched]
            wl.mirror_fraction = min(1.0, mirror)
            self._rule_fracs[wl.hostgroup] = fracs
            self._mirror_routes[wl.hostgroup] = routes

    def _mirror_hostgroups(self):
        return sorted({int(r["mirror_hostgroup"]) for r in self.rules if r.get("mirror_hostgroup") not in (None, "")})

    def mirror_rate_now(self):
        rate = self.mirror_extra_rate
        for wl in self.workloads.values():
            active = sum(1 for s in wl.sessions if s.server is not None)
            rate += active * wl.rate * wl.mirror_fraction * (1 - wl.prepared_fraction)
        return rate

    def mirror_figures(self):
        """(Mirror_concurrency, Mirror_queue_length) as ProxySQL reports them: the queue is the
        total over mysql-threads worker threads, each bounded by mirror_max_queue_length."""
        cap = max(1, self._var_int("mysql-mirror_max_concurrency", 16))
        lam = self.mirror_rate_now()
        if self.mirror_queue >= 1:
            conc = cap
            # the queue is sampled while threads pop and push: it jitters a little under the cap
            q = self.mirror_queue
            if self.rng.random() < 0.25:  # samples/mirror.jsonl: 7 of 29 readings under the cap
                q -= self.rng.choice((1, 1, 1, 3, 9, 11)) * q / 100.0
            queue = int(q + 1e-6)  # whole queries: a float a hair under n is n
        else:
            conc = min(cap, int(round(lam * self.mirror_latency_ms / 1000.0)))
            queue = 0
        return conc, queue

    def _mirror_status(self):
        conc, queue = self.mirror_figures()
        return {
            "latency_ms": self.mirror_latency_ms,
            "extra_rate": self.mirror_extra_rate,
            "rate": round(self.mirror_rate_now(), 1),
            "concurrency": conc,
            "queue": queue,
            "arrived": int(self.mirror_arrived),
            "executed": int(self.mirror_executed),
            "dropped": int(self.mirror_dropped),
            "skipped_prepared": int(self.mirror_skipped_ps),
            "mirror_hostgroups": self._mirror_hostgroups(),
            "by_rule": {str(rid): {k: round(v, 1) for k, v in c.items()} for rid, c in self.mirror_by_rule.items()},
        }

    # ------------------------------------------------------------------ stats rows (engine)
    def conn_used(self, srv, now):
        if "conn_used" in srv.forced:
            return srv.forced["conn_used"]
        used = 0
        for wl in self.workloads.values():
            for s in wl.sessions:
                if s.server == srv.key:
                    if self._pinned(s, now) or self.rng.random() < wl.busy:
                        used += 1
        return used

    def pool_rows(self, reset=False):
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            rows = []
            for srv in self.servers.values():
                used = self.conn_used(srv, now)
                if srv.status != "ONLINE":
                    srv.pool = min(srv.pool, self._sessions_on(srv.key))
                free = max(0, srv.pool - used) if srv.status == "ONLINE" else 0
                srv.max_used = max(srv.max_used, used)
                f = srv.forced
                rows.append(
                    (
                        srv.key[0],
                        srv.key[1],
                        srv.key[2],
                        srv.status,
                        used,
                        f.get("conn_free", free),
                        f.get("conn_ok", srv.conn_ok),
                        f.get("conn_err", srv.conn_err),
                        f.get("max_conn_used", srv.max_used),
                        f.get("queries", int(srv.queries)),
                        0,
                        f.get("bytes_sent", int(srv.bytes_sent)),
                        f.get("bytes_recv", int(srv.bytes_recv)),
                        srv.latency_us,
                    )
                )
            if reset:
                for srv in self.servers.values():
                    srv.conn_ok = srv.conn_err = srv.max_used = 0
                    srv.queries = srv.bytes_sent = srv.bytes_recv = 0.0
            return rows

    def free_connection_rows(self):
        with self.lock:
            rows = []
            fd = 30
            for hg, host, port, status, used, free, *_rest in self.pool_rows():
                for _ in range(int(free)):
                    stats = json.dumps(
                        {
                            "address": "0x7f0000%06x" % fd,
                            "bytes_recv": 0,
                            "bytes_sent": 0,
                            "myconnpoll_get": 1,
                            "myconnpoll_put": 1,
                            "questions": 0,
                        }
                    )
                    info = json.dumps(
                        {
                            "host": host,
                            "port": port,
                            "server_version": "10.11.0-MariaDB",
                            "thread_id": fd * 3,
                            "user": "app",
                            "db": "sbtest",
                        }
                    )
                    rows.append(
                        (
                            fd,
                            hg,
                            host,
                            port,
                            "app",
                            "sbtest",
                            "",
                            "SYSTEM",
                            "",
                            "1",
                            self.rng.randint(0, 900),
                            stats,
                            info,
                        )
                    )
                    fd += 1
            return rows

    def processlist_rows(self, extended):
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            threads = max(1, self._var_int("mysql-threads", 4))
            rows = []
            for wl in self.workloads.values():
                tpl = role_templates(wl.kind)
                for s in wl.sessions:
                    pinned = self._pinned(s, now)
                    busy = pinned or (s.server is not None and self.rng.random() < wl.busy)
                    t = tpl[self.rng.randrange(len(tpl))]
                    prepared = self.rng.random() < wl.prepared_fraction
                    info = t[0].replace("{t}", str(1 + s.id % 2))
                    if not prepared:
                        info = info.replace("?", str(self.rng.randint(1, 10000)))
                    if s.server is None:
                        # held: waiting for a usable server in its hostgroup
                        row = [
                            threads and s.id % threads,
                            s.id,
                            wl.user,
                            wl.schema,
                            "127.0.0.1",
                            s.cli_port,
                            wl.hostgroup,
                            None,
                            None,
                            None,
                            None,
                            "Execute" if prepared else "Query",
                            int((now - (s.held_since or now)) * 1000),
                            info,
                            0,
                        ]
                    elif busy:
                        row = [
                            s.id % threads,
                            s.id,
                            wl.user,
                            wl.schema,
                            "127.0.0.1",
                            s.cli_port,
                            wl.hostgroup,
                            "127.0.0.1",
                            s.l_port,
                            s.server[1],
                            s.server[2],
                            "Execute" if prepared else "Query",
                            self.rng.randint(0, 2),
                            info,
                            0,
                        ]
                    else:
                        row = [
                            s.id % threads,
                            s.id,
                            wl.user,
                            wl.schema,
                            "127.0.0.1",
                            s.cli_port,
                            wl.hostgroup,
                            None,
                            None,
                            None,
                            None,
                            "Sleep",
                            0,
                            None,
                            None,
                        ]
                    ext = None
                    if extended:
                        ext = self._extended_info(s, now, pinned, busy, extended)
                    rows.append(tuple(row) + (ext,))
            return rows + self._mirror_session_rows(threads)

    def _mirror_session_rows(self, threads):
        """The mirror copies running now, as a real 2.7.1 lists them (lab/tests/test_real_mirror_processlist.py):
        a session of its own per copy in the mirror hostgroup, with the application's user, schema and query text,
        its client 'mirror_internal' with no port. As many as Mirror_concurrency says run (the copies of
        set_mirror(extra_rate=) copy no known query: not listed), spread over the mirror routes by their rate."""
        running, _queue = self.mirror_figures()
        routes = []  # (rate, workload, mirror hostgroup, template mask)
        for wl in self.workloads.values():
            active = sum(1 for s in wl.sessions if s.server is not None)
            for _rid, share, mirror_hg, mask in self._mirror_routes.get(wl.hostgroup, ()):
                rate = active * wl.rate * share * (1 - wl.prepared_fraction)
                if rate > 0:
                    routes.append((rate, wl, mirror_hg, mask))
        known = sum(r[0] for r in routes)
        if not routes or running <= 0:
            return []
        count = int(round(running * known / (known + self.mirror_extra_rate)))
        while len(self._mirror_sids) < count:
            self._mirror_sids.append(self.next_sid)
            self.next_sid += 1
        rows = []
        for sid in self._mirror_sids[:count]:
            _rate, wl, mirror_hg, mask = self.rng.choices(routes, weights=[r[0] for r in routes])[0]
            tpl = [t for i, t in enumerate(role_templates(wl.kind)) if mask >> i & 1]
            t = self.rng.choices(tpl, weights=[t[1] for t in tpl])[0]
            info = t[0].replace("{t}", str(1 + sid % 2)).replace("?", str(self.rng.randint(1, 10000)))
            online = sorted(k for k, srv in self.servers.items() if k[0] == mirror_hg and srv.status == "ONLINE")
            server = self.rng.choice(online) if online else None
            rows.append(
                (
                    sid % threads,
                    sid,
                    wl.user,
                    wl.schema,
                    "mirror_internal",
                    None,
                    mirror_hg,
                    "127.0.0.1" if server else None,
                    33000 + (sid * 104729) % 20000 if server else None,
                    server[1] if server else None,
                    server[2] if server else None,
                    "Query",
                    self.rng.randint(0, int(self.mirror_latency_ms)),
                    info,
                    0,
                    None,
                )
            )
        return rows

    def _extended_info(self, s, now, pinned, busy, mode):
        """JSON shaped like samples/processlist.json extended_info (a subset of its keys)."""
        wl = s.wl
        flags = {
            k: False
            for k in (
                "compression",
                "found_rows",
                "get_lock",
                "has_savepoint",
                "has_warnings",
                "lock_tables",
                "no_multiplex",
                "no_multiplex_HG",
                "prepared_statement",
                "temporary_table",
                "user_variable",
            )
        }
        reason = s.reason if pinned else None
        no_mux = not self._var_bool("mysql-multiplexing", "true") or wl.hostgroup in self.no_multiplex_hgs
        if not self._var_bool("mysql-multiplexing", "true"):
            flags["no_multiplex"] = True
        if wl.hostgroup in self.no_multiplex_hgs:
            flags["no_multiplex_HG"] = True
        if reason in flags:
            flags[reason] = True
        token = 0
        if reason == "auto_increment":
            token = max(1, min(s.token or 5, self._var_int("mysql-auto_increment_delay_multiplex", 5)))
        backends = []
        if s.server is not None and (pinned or busy):
            host, port = s.server[1], s.server[2]
            backends.append(
                {
                    "conn": {
                        "MultiplexDisabled": bool(pinned and (no_mux or reason not in (None, "transaction"))),
                        "MultiplexDisabled_ext": bool(pinned and (no_mux or reason not in (None, "transaction"))),
                        "action": "",
                        "address": "0x7fe7d9c%05x" % (s.id * 64),
                        "auto_increment_delay_token": token,
                        "autocommit": "ON",
                        "bytes_recv": int(s.queries * ROLE_DEFAULTS[wl.kind]["bytes_recv"]),
                        "bytes_sent": int(s.queries * ROLE_DEFAULTS[wl.kind]["bytes_sent"]),
                        "charset": "45",
                        "init_connect": "",
                        "last_set_autocommit": -1,
                        "myconnpoll_get": int(s.queries / 6) + 1,
                        "myconnpoll_put": int(s.queries / 6),
                        "mysql": {
                            "affected_rows": 0,
                            "db": wl.schema,
                            "host": host,
                            "host_info": f"{host} via TCP/IP",
                            "insert_id": 0,
                            "port": port,
                            "server_status": 3,
                            "server_version": "10.11.0-MariaDB",
                            "thread_id": 100 + s.id,
                            "user": wl.user,
                        },
                        "questions": 0,
                        "status": flags,
                        "warning_count": 0,
                    },
                    "gtid": "",
                    "hostgroup_id": wl.hostgroup,
                    "stream": {
                        "DSS": 26,
                        "bytes_recv": 0,
                        "bytes_sent": int(s.queries * 40),
                        "myconnpoll_get": 1,
                        "myconnpoll_put": 0,
                        "questions": 0,
                    },
                }
            )
        else:
            backends.append(
                {
                    "gtid": "",
                    "hostgroup_id": wl.hostgroup,
                    "stream": {
                        "DSS": 0,
                        "bytes_recv": 0,
                        "bytes_sent": 0,
                        "myconnpoll_get": 0,
                        "myconnpoll_put": 0,
                        "questions": 0,
                    },
                }
            )
        doc = {
            "active_transactions": 1 if (busy and wl.kind == "write") or reason == "transaction" else 0,
            "address": "0x7fe7d9cf%04x" % s.id,
            "age_ms": int((now - s.created) * 1000),
            "autocommit": True,
            "autocommit_on_hostgroup": -1,
            "backends": backends,
            "client": {
                "client_addr": {"address": "127.0.0.1", "port": s.cli_port},
                "encrypted": False,
                "prot": {"auth_plugin": "mysql_native_password"},
                "userinfo": {"schemaname": wl.schema, "username": wl.user},
            },
            "current_hostgroup": wl.hostgroup,
            "default_hostgroup": wl.hostgroup,
            "default_schema": "",
            "gtid": {"hid": -1, "last": ""},
            "last_HG_affected_rows": wl.hostgroup,
            "last_insert_id": 4997 if reason == "auto_increment" else 0,
            "locked_on_hostgroup": -1,
            "qpo": {"destination_hostgroup": wl.hostgroup, "multiplex": -1, "sticky_conn": -1},
            "status": 4 if s.server is None else (1 if busy else 0),
            "thread_session_id": s.id,
            "transaction_persistent": False,
            "transaction_time_ms": int((now - s.created) * 1000) % 4000 if busy and wl.kind == "write" else 0,
            "user_attributes": "",
            "warning_in_hg": -1,
        }
        if mode == 2:
            return json.dumps(doc, indent=4, sort_keys=True)
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    def commands_rows(self):
        with self.lock:
            self._advance(time.monotonic())
            rows = []
            for cmd in COMMANDS:
                cnt = int(self.commands.get(cmd, 0))
                if cnt and cmd in COMMAND_SHAPES:
                    mean, shares = COMMAND_SHAPES[cmd]
                    buckets = [int(cnt * sh) for sh in shares]
                    buckets[1] += cnt - sum(buckets)
                    rows.append((cmd, int(cnt * mean), cnt, *buckets))
                else:
                    rows.append((cmd, 0, 0) + (0,) * len(BUCKETS))
            return rows

    def rule_rows(self):
        with self.lock:
            self._advance(time.monotonic())
            return [(int(r["rule_id"]), int(self.rule_hits.get(int(r["rule_id"]), 0))) for r in self.rules]

    def _digest_groups(self):
        return sorted(k for k, v in self.digest_q.items() if v > 0)

    def digest_params(self):
        """Rows for the digest view's parameter table: one per (hostgroup, role, user, schema) with
        queries: the group's own queries (every template of its role) and the mirrored copies that ran
        in that hostgroup (only the templates their rules matched, `mmask`)."""
        with self.lock:
            self._advance(time.monotonic())
            groups = self._digest_groups()
            if (not groups and not self.mirror_digest_q) or self.digest_count <= 0:
                return []
            sizes = self._digest_sizes(set(groups))  # mirrored copies are no group of their own
            now_wall = int(time.time())
            rows = {}  # (hg, role, user, schema) -> [n, q, first, mq, mmask]
            for g in groups:
                wl = self.workloads.get(g[0])
                key = (g[0], g[1], wl.user if wl else "app", wl.schema if wl else "sbtest")
                rows[key] = [
                    sizes[g[1]],
                    self.digest_q[g],
                    int(self.digest_first.get(g, now_wall)),
                    0.0,
                    0,
                    self.digest_time.get(g, self.digest_q[g]) / self.digest_q[g],
                ]
            for (hg, role, user, schema), q in self.mirror_digest_q.items():
                if q <= 0:
                    continue
                key = (hg, role, user, schema)
                n = sizes.get(role) or self._digest_sizes({(hg, role)})[role]
                row = rows.setdefault(key, [n, 0.0, int(self.mirror_digest_first.get(key, now_wall)), 0.0, 0, 1.0])
                row[3] += q
                row[4] |= self.mirror_digest_mask.get(key, 0)
            out = []
            for (hg, role, user, schema), (n, q, first, mq, mmask, lat) in sorted(rows.items()):
                # A mirror-only row spans every digest of its role (the view keeps its rule's, and shows one once a
                # whole copy of it ran): its first int(mq) digests of the role were BEGIN, COMMIT... and an INSERT
                # rule's copies showed only after 6 of them had run.
                m = n if q <= 0 else int(min(n, max(q, mq)))
                if m <= 0 or (q <= 0 and mq < 1 - 1e-6):
                    continue
                # m, not n: the view lists the digests of whole queries, those the weights are summed over
                out.append(
                    (
                        hg,
                        role,
                        m,
                        len(ROLES[role][0]),
                        len(ROLES[role][1]),
                        q,
                        digest_weight_sum(role, m),
                        first,
                        now_wall,
                        lat,
                        user,
                        schema,
                        mq,
                        mmask,
                        digest_weight_sum(role, m, mmask) if mq else 0.0,
                    )
                )
            return out

    def digest_reset(self):
        with self.lock:
            self.digest_q = {}
            self.digest_time = {}
            self.digest_first = {}
            self.mirror_digest_q = {}
            self.mirror_digest_first = {}
            self.digest_reset_at = time.time()

    def global_values(self):
        """Live values of stats_mysql_global variables that the model drives."""
        with self.lock:
            now = time.monotonic()
            self._advance(now)
            sessions = [s for wl in self.workloads.values() for s in wl.sessions]
            used_total = 0
            pool_total = 0
            for srv in self.servers.values():
                u = self.conn_used(srv, now)
                used_total += u
                pool_total += max(srv.pool, u)
            q = self.questions
            prepared = sum(wl.rate * len(wl.sessions) * wl.prepared_fraction for wl in self.workloads.values())
            allrate = sum(wl.rate * len(wl.sessions) for wl in self.workloads.values()) or 1.0
            ps_share = prepared / allrate
            busy = [
                s
                for wl in self.workloads.values()
                for s in wl.sessions
                if s.server is None or self._pinned(s, now) or self.rng.random() < wl.busy
            ]
            writers_busy = sum(1 for s in busy if s.wl.kind == "write" and s.server is not None)
            bsent = sum(s.bytes_sent for s in self.servers.values())
            brecv = sum(s.bytes_recv for s in self.servers.values())
            conc, queue = self.mirror_figures()
            c = self.counters
            v = {
                "ProxySQL_Uptime": int(now - self.started),
                "Active_Transactions": writers_busy,
                "Client_Connections_aborted": c["sessions_cut"],
                "Client_Connections_connected": len(sessions),
                "Client_Connections_created": c["sessions_created"],
                "Server_Connections_connected": pool_total,
                "Server_Connections_created": sum(s.conn_ok for s in self.servers.values()),
                "Server_Connections_aborted": c["sessions_cut"],
                "Client_Connections_non_idle": len(busy),
                "mysql_backend_buffers_bytes": 35456 * used_total,
                "mysql_frontend_buffers_bytes": 65536 * len(sessions),
                "mysql_session_internal_bytes": 5120 + 6856 * len(sessions),
                "Com_commit": int(self.commands.get("COMMIT", 0)),
                "Com_backend_stmt_prepare": int(20 * ps_share * len(sessions)),
                "Com_backend_stmt_execute": int(self.prepared_executed),
                "Com_frontend_stmt_prepare": int(20 * ps_share * len(sessions)),
                "Com_frontend_stmt_execute": int(self.prepared_executed),
                "Questions": int(q),
                "Slow_queries": int(q * 2.5e-6),
                "Queries_backends_bytes_recv": int(brecv),
                "Queries_backends_bytes_sent": int(bsent),
                "Queries_frontends_bytes_recv": int(bsent * 1.006),
                "Queries_frontends_bytes_sent": int(brecv * 1.03),
                "ConnPool_get_conn_immediate": int(q * 0.05),
                "ConnPool_get_conn_success": int(q * 0.7),
                "MyHGM_myconnpoll_get": int(q * 0.65),
                "MyHGM_myconnpoll_get_ok": int(q * 0.65),
                "MyHGM_myconnpoll_push": int(q * 0.65),
                "MyHGM_myconnpoll_destroy": c["sessions_cut"] + c["moved_sessions"],
                "backend_offline_during_query": c["moved_sessions"],
                "max_connect_timeouts": c["held_timeouts"],
                "generated_error_packets": c["held_timeouts"],
                "Mirror_concurrency": conc,
                "Mirror_queue_length": queue,
                "Servers_table_version": self.servers_table_version,
                "MySQL_Thread_Workers": max(1, self._var_int("mysql-threads", 4)),
                "ConnPool_memory_bytes": 1440 + 2760 * pool_total,
                "Stmt_Client_Active_Total": int(20 * len(sessions) * ps_share),
                "Stmt_Client_Active_Unique": 20 if ps_share else 0,
                "Stmt_Server_Active_Total": int(20 * pool_total * ps_share),
                "Stmt_Server_Active_Unique": 20 if ps_share else 0,
                "Stmt_Max_Stmt_id": 21 if ps_share else 1,
                "Stmt_Cached": 20 if ps_share else 0,
            }
            return v
