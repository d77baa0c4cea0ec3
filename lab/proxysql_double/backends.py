"""Whether the backends behind the ProxySQL admin double answer (lab double, not ProxySQL).

A real ProxySQL learns that a backend is down only when a client session needs a connection to it and
the connect fails; it then shuns the server on that ProxySQL alone (traffic.TrafficModel models the
shunning). The double does not proxy, so it asks here: one real connection to the backend's
host:port (TCP connect, the MySQL greeting, authentication with the monitor credentials, COM_QUIT),
bounded by short timeouts. A refused connect, a greeting that never comes (a paused server) or an error
packet instead of a greeting (a Galera node still joining) is a failure; an authentication refusal is
not (ProxySQL does not count access-denied errors towards shunning, and the backend did answer).

Cheap at a thousand endpoints in one process: only the traffic model of an endpoint whose sessions use
a hostgroup asks (an endpoint without sessions never probes); probes run on a few daemon threads,
never on the event loop and never under the endpoints' lock; each result is shared by every endpoint of
the process and a new probe of the same backend is asked for only once the last one is FRESH_S old.
"""

import queue
import threading
import time

FRESH_S = 0.5  # a result younger than this is reused as it is
CONNECT_TIMEOUT_S = 1  # mysqlclient takes whole seconds (connect and greeting)
READ_TIMEOUT_S = 1
WORKERS = 4
# Errors ProxySQL counts in ConnERR but never shuns for (MySrvC::connect_error): the backend answered.
NOT_SHUNNING = {1044, 1045, 1120, 1203, 1226, 3118}


class Probe:
    __slots__ = ("ok", "at", "error", "started")

    def __init__(self, ok, at, error=""):
        self.ok = ok  # True: the backend answers; False: a connection to it fails
        self.at = at  # time.monotonic() when the probe finished
        self.error = error
        self.started = at  # when it was asked of the backend (Prober._work sets it): what it read is from then on

    def as_dict(self, now):
        return {"ok": self.ok, "age_s": round(now - self.at, 3), "error": self.error}


class Prober:
    """Process-wide probe results per (host, port), refreshed on demand by daemon threads."""

    def __init__(self, workers=WORKERS, probe_fn=None):
        self.probe_fn = probe_fn or probe
        self.lock = threading.Lock()
        self.results = {}  # (host, port) -> Probe
        self.pending = set()
        self.queue = queue.Queue()
        self.workers = workers
        self.threads = []
        self.probes_done = 0

    def latest(self, host, port, user="monitor", password="monitor", now=None, fresh_s=FRESH_S):
        """The newest result for a backend (None before the first one), asking for a new probe when it
        is older than fresh_s (a Monitor check's interval). Never blocks on the network."""
        key = (host, int(port))
        now = time.monotonic() if now is None else now
        with self.lock:
            res = self.results.get(key)
            if (res is None or now - res.at >= fresh_s) and key not in self.pending:
                self.pending.add(key)
                self.queue.put((key, user, password))
                if len(self.threads) < self.workers:
                    t = threading.Thread(target=self._work, name=f"double-probe-{len(self.threads)}", daemon=True)
                    self.threads.append(t)
                    t.start()
        return res

    def peek(self, host, port):
        with self.lock:
            return self.results.get((host, int(port)))

    def _work(self):
        while True:
            key, user, password = self.queue.get()
            started = time.monotonic()
            try:
                res = self.probe_fn(key[0], key[1], user, password)
            except Exception as e:  # a bug here must not stop the worker
                res = Probe(False, time.monotonic(), f"probe error {e!r}")
            res.started = started
            with self.lock:
                self.results[key] = res
                self.pending.discard(key)
                self.probes_done += 1


def probe(host, port, user, password):
    """One connection attempt to a MySQL/MariaDB server, as ProxySQL's connection pool makes it."""
    import MySQLdb

    try:
        conn = MySQLdb.connect(
            host=host,
            port=int(port),
            user=user,
            passwd=password,
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
        )
    except MySQLdb.MySQLError as e:
        code = e.args[0] if e.args else 0
        message = f"{code} {e.args[1] if len(e.args) > 1 else ''}".strip()
        return Probe(code in NOT_SHUNNING, time.monotonic(), message)
    conn.close()
    return Probe(True, time.monotonic())


def galera_probe(host, port, user, password):
    """What Monitor's galera healthcheck reads of a backend (galera_monitor.BackendState), as the Probe's `ok`
    field; a connection or query that fails: an unreachable backend."""
    import MySQLdb

    from .galera_monitor import BackendState

    try:
        conn = MySQLdb.connect(
            host=host,
            port=int(port),
            user=user,
            passwd=password,
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
        )
        try:
            cur = conn.cursor()
            cur.execute(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'wsrep_desync', 'wsrep_reject_queries')"
            )
            v = dict(cur.fetchall())
            cur.execute("SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state', 'wsrep_cluster_status')")
            s = dict(cur.fetchall())
        finally:
            conn.close()
    except MySQLdb.MySQLError as e:
        return Probe(BackendState(reachable=False), time.monotonic(), str(e))
    state = BackendState(
        read_only=v.get("read_only") == "ON",
        desync=v.get("wsrep_desync") == "ON",
        reject_queries=v.get("wsrep_reject_queries", "NONE") != "NONE",
        local_state=int(s.get("wsrep_local_state") or 0),
        primary=s.get("wsrep_cluster_status") == "Primary",
    )
    return Probe(state, time.monotonic())


def read_only_probe(host, port, user, password):
    """What Monitor's read_only check reads of a backend (replication_monitor.ReadOnlyState), as the Probe's `ok`
    field; a variable the server lacks (MariaDB: super_read_only) is None; a failure: an unreachable backend."""
    import MySQLdb

    from .replication_monitor import ReadOnlyState

    try:
        conn = MySQLdb.connect(
            host=host,
            port=int(port),
            user=user,
            passwd=password,
            connect_timeout=CONNECT_TIMEOUT_S,
            read_timeout=READ_TIMEOUT_S,
        )
        try:
            cur = conn.cursor()
            cur.execute(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'innodb_read_only', 'super_read_only')"
            )
            v = {name: value == "ON" for name, value in cur.fetchall()}
        finally:
            conn.close()
    except MySQLdb.MySQLError as e:
        return Probe(ReadOnlyState(reachable=False), time.monotonic(), str(e))
    return Probe(
        ReadOnlyState(
            read_only=v.get("read_only", False),
            innodb_read_only=v.get("innodb_read_only"),
            super_read_only=v.get("super_read_only"),
        ),
        time.monotonic(),
    )


PROBER = Prober()
# The galera healthcheck's reads (engine.AdminEngine._galera_monitor): Probe.ok holds the BackendState.
GALERA_PROBER = Prober(probe_fn=galera_probe)
# The read_only check's reads (engine.AdminEngine._replication_monitor): Probe.ok holds the ReadOnlyState.
READ_ONLY_PROBER = Prober(probe_fn=read_only_probe)
