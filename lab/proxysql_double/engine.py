"""The admin SQL engine of the ProxySQL admin double (a lab double of ProxySQL 2.7.1, port 6032).

One `AdminEngine` is one independent ProxySQL: an in-memory SQLite with the real table definitions
(schema/*.sql, copied from the reference captured on ProxySQL 2.7.1), the memory / runtime / disk
layers, LOAD/SAVE commands with their aliases, `SET mysql-x=v`, the SHOW statements, stats tables
computed when read from the traffic model, and the `LAB ...` control statements that the product
never sends.

Memory per endpoint is kept small: page_size 512, the `monitor` schema is attached only when first used,
stats are materialised only when read. The `disk` schema is there from the start and, as ProxySQL writes its
database at the first start, holds the starting configuration (every variable) until a SAVE changes it.
"""

import collections
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from pathlib import Path

from . import galera_monitor, replication_monitor
from . import traffic as traffic_mod
from .backends import GALERA_PROBER, READ_ONLY_PROBER
from . import versions as versions_mod

SCHEMA_DIR = Path(__file__).with_name("schema")
DOUBLE_VERSION = "2.7.1-lab-double"
ERR_CODE = 1045
ERR_STATE = "28000"
ON_RESUME = "on_resume"  # LAB FAIL_STATEMENTS {"pause": "on_resume"}: the statement runs when the endpoint resumes
# No prepared-statement cache: 128 cached statements per connection doubled the memory of an
# endpoint (1.2 MB -> 0.6 MB without), and re-preparing an admin query costs microseconds.
CACHED = 0

# One lock for every endpoint of the process: statements run on the event loop thread, the Python
# API from test threads; a single lock keeps cross-endpoint reads (cluster checksums) deadlock-free.
GLOBAL_LOCK = threading.RLock()
# (host, port) -> AdminEngine, for cluster peers served by the same process.
REGISTRY = {}
# Engines whose cluster thread runs (peers in runtime_proxysql_servers and admin-cluster_username set).
SYNCING = set()


class Result:
    __slots__ = ("columns", "rows", "affected", "error", "info")

    def __init__(self, columns=None, rows=None, affected=0, error=None, info=""):
        self.info = info  # the OK packet's message
        self.columns = columns
        self.rows = rows
        self.affected = affected
        self.error = error  # (code, message) or None


def _read_text(name):
    return (SCHEMA_DIR / name).read_text(encoding="utf-8")


class _Schema:
    """The reference schema, read once per process from the package's copy."""

    def __init__(self):
        self.ddl = {}
        for f in sorted(SCHEMA_DIR.glob("*.sql")):
            schema, table = f.stem.split(".", 1)
            self.ddl[(schema, table)] = f.read_text(encoding="utf-8").strip()
        self.tables = {s: _read_text(f"tables.{s}.txt").split() for s in ("main", "stats", "monitor")}
        self.variables = []
        for line in _read_text("global_variables.tsv").splitlines()[1:]:
            name, _, value = line.partition("\t")
            self.variables.append((name, value))
        self.stats_global = []
        for line in _read_text("stats_mysql_global.tsv").splitlines()[1:]:
            name, _, value = line.partition("\t")
            self.stats_global.append((name, value))
        self.defaults = dict(self.variables)


SCHEMA = _Schema()

MODULES = {
    "MYSQL SERVERS": [
        "mysql_servers",
        "mysql_replication_hostgroups",
        "mysql_group_replication_hostgroups",
        "mysql_galera_hostgroups",
        "mysql_aws_aurora_hostgroups",
        "mysql_hostgroup_attributes",
        "mysql_servers_ssl_params",
    ],
    "MYSQL USERS": ["mysql_users"],
    "MYSQL QUERY RULES": ["mysql_query_rules", "mysql_query_rules_fast_routing"],
    "MYSQL VARIABLES": "mysql-",
    "ADMIN VARIABLES": "admin-",
    "SCHEDULER": ["scheduler"],
    "PROXYSQL SERVERS": ["proxysql_servers"],
    "MYSQL FIREWALL": [
        "mysql_firewall_whitelist_rules",
        "mysql_firewall_whitelist_users",
        "mysql_firewall_whitelist_sqli_fingerprints",
    ],
    "RESTAPI": ["restapi_routes"],
    "COREDUMP": ["coredump_filters"],
}
CHECKSUM_NAMES = [
    "admin_variables",
    "mysql_query_rules",
    "mysql_servers",
    "mysql_servers_v2",
    "mysql_users",
    "mysql_variables",
    "proxysql_servers",
]
# ProxySQL Cluster: the modules a peer pulls, by checksum name -> LOAD/SAVE module. A node pulls a module
# from a peer whose checksum it has seen differ admin-cluster_<name>_diffs_before_sync checks in a row, when
# that peer's version is above 1 and its epoch newer than its own (or its own version is 1), then saves it
# to disk when admin-cluster_<name>_save_to_disk (../shared/proxysql-reference: cluster-sync.jsonl; three nodes,
# every module, restarts and holds: lab/reference/). The cluster_* admin variables travel with admin_variables.
SYNC_MODULES = {
    "mysql_servers": "MYSQL SERVERS",
    "mysql_users": "MYSQL USERS",
    "mysql_query_rules": "MYSQL QUERY RULES",
    "mysql_variables": "MYSQL VARIABLES",
    "admin_variables": "ADMIN VARIABLES",
    "proxysql_servers": "PROXYSQL SERVERS",
}
# Variables that say who a node is: neither in the variables' checksums nor pulled from a peer.
NODE_VARIABLES = (
    "admin-version",
    "admin-mysql_ifaces",
    "admin-admin_credentials",
    "admin-cluster_username",
    "admin-cluster_password",
    "admin-restapi_port",
    "admin-web_port",
    "mysql-interfaces",
    "mysql-threads",
)
MODULE_CHECKSUMS = {
    "MYSQL SERVERS": ["mysql_servers", "mysql_servers_v2"],
    "MYSQL USERS": ["mysql_users"],
    "MYSQL QUERY RULES": ["mysql_query_rules"],
    "MYSQL VARIABLES": ["mysql_variables"],
    "ADMIN VARIABLES": ["admin_variables"],
    "PROXYSQL SERVERS": ["proxysql_servers"],
}

# LOAD/SAVE direction aliases, as ProxySQL's admin accepts them.
DIRECTIONS = {
    ("LOAD", "TO RUNTIME"): "mem2run",
    ("LOAD", "TO RUN"): "mem2run",
    ("LOAD", "FROM MEMORY"): "mem2run",
    ("LOAD", "FROM MEM"): "mem2run",
    ("LOAD", "FROM DISK"): "disk2mem",
    ("LOAD", "TO MEMORY"): "disk2mem",
    ("LOAD", "TO MEM"): "disk2mem",
    ("LOAD", "FROM CONFIG"): "config",
    ("SAVE", "TO MEMORY"): "run2mem",
    ("SAVE", "TO MEM"): "run2mem",
    ("SAVE", "FROM RUNTIME"): "run2mem",
    ("SAVE", "FROM RUN"): "run2mem",
    ("SAVE", "TO DISK"): "mem2disk",
    ("SAVE", "FROM MEMORY"): "mem2disk",
    ("SAVE", "FROM MEM"): "mem2disk",
}
LOADSAVE_RE = re.compile(r"^(LOAD|SAVE)\s+(.+?)\s+(TO|FROM)\s+(RUNTIME|RUN|MEMORY|MEM|DISK|CONFIG)$", re.I)
# ProxySQL_Admin.cpp (admin_handler_command_kill_connection): only the "KILL CONNECTION " prefix is an admin command
# (KILL QUERY goes on to SQLite: a syntax error); the id is read with atoi(); an id no session has is refused.
KILL_RE = re.compile(r"^KILL CONNECTION (\d*)", re.I)
SET_VAR_RE = re.compile(
    r"^SET\s+((?:mysql|admin|ldap|sqliteserver)-[A-Za-z0-9_]+)\s*(?:=|\s+TO\s+)\s*(.*?)$", re.I | re.S
)
DML_TARGET_RE = re.compile(
    r"^\s*(?:(?:INSERT|REPLACE)(?:\s+OR\s+\w+)?\s+INTO|UPDATE(?:\s+OR\s+\w+)?|DELETE\s+FROM)\s+([\w.`\"]+)", re.I
)
LAB_RE = re.compile(r"^\s*LAB\b", re.I)
IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
SELECT_VARS_RE = re.compile(r"^SELECT\s+(@@[\w.]+(?:\s*,\s*@@[\w.]+)*)(?:\s+LIMIT\s+\d+)?$", re.I)

# Variables the running ProxySQL refuses to change (only read at start).
RUNTIME_READ_ONLY = {"mysql-threads", "mysql-stacksize", "admin-version"}
INT_RANGES = {
    "mysql-mirror_max_concurrency": (1, 8192),
    "mysql-mirror_max_queue_length": (0, 1000000),
    "mysql-connect_timeout_server_max": (100, 3600000),
    "mysql-auto_increment_delay_multiplex": (0, 1000000),
    "mysql-show_processlist_extended": (0, 2),
    "mysql-threads": (1, 255),
    "mysql-max_connections": (1, 1000000),
    "mysql-auto_increment_delay_multiplex_timeout_ms": (0, 3600000),
}

# Stats tables whose rows come from the traffic model when a statement reads them.
DYNAMIC = {
    "stats_mysql_connection_pool",
    "stats_mysql_connection_pool_reset",
    "stats_mysql_global",
    "stats_mysql_processlist",
    "stats_mysql_commands_counters",
    "stats_mysql_free_connections",
    "stats_mysql_query_rules",
    "stats_mysql_users",
    "stats_mysql_query_digest",
    "stats_mysql_query_digest_reset",
    "stats_proxysql_servers_checksums",
    "stats_proxysql_servers_metrics",
    "stats_proxysql_servers_status",
    "stats_memory_metrics",
    "runtime_checksums_values",
    "runtime_mysql_servers",  # its status column shows ProxySQL's own SHUNNED verdict
    "stats_mysql_errors",
    "stats_mysql_errors_reset",
}
STATS_TABLES = set(SCHEMA.tables["stats"])
MAIN_TABLES = set(SCHEMA.tables["main"])
MONITOR_TABLES = set(SCHEMA.tables["monitor"])
DIGEST_VIEWS = ("stats_mysql_query_digest", "stats_mysql_query_digest_reset")

# The digest tables are views computing up to 100,000 rows inside SQLite from two small tables:
# _lab_dg (one row per hostgroup/role/user/schema with its query count since reset) and _lab_dt (templates).
# Digest i of a role: slot = template, k = table number; digest i appears once i < m, the row's whole queries (m
# from traffic.digest_params, the same number its weights wsum / mwsum are summed over: a view that compared i with
# the float count showed one digest more than the weights held, and read NULL where they summed to 0). A row's
# mirrored copies (mq queries of the templates in mmask) add to the same digests, as ProxySQL counts
# a mirrored query in the mirror hostgroup under the original's digest. A mirror-only row (q = 0) lists a digest
# once a whole copy of it ran (count_star 1 from the first copy); a row with queries of its own shows each of its m.
DIGEST_VIEW_SQL = """
CREATE VIEW stats.{name} AS
WITH RECURSIVE seq(i) AS (
  SELECT 0 WHERE (SELECT max(m) FROM _lab_dg) >= 1
  UNION ALL SELECT i + 1 FROM seq WHERE i + 1 < (SELECT max(m) FROM _lab_dg)
),
x AS (
  SELECT g.hostgroup AS hostgroup, g.role AS role, g.q AS q, g.wsum AS wsum, g.first_seen AS first_seen,
         g.last_seen AS last_seen, g.lat AS lat, g.username AS username, g.schemaname AS schemaname,
         g.mq AS mq, g.mmask AS mmask, g.mwsum AS mwsum,
         seq.i AS i,
         CASE WHEN seq.i < g.globals THEN seq.i ELSE g.globals + (seq.i - g.globals) % g.per_table END AS slot,
         CASE WHEN seq.i < g.globals THEN 0 ELSE (seq.i - g.globals) / g.per_table END AS k
  FROM _lab_dg g JOIN seq ON seq.i < g.m
),
y AS (
  SELECT x.*, t.text AS text, t.avg_us AS avg_us, t.min_us AS min_us, t.max_us AS max_us,
         t.sent AS sent, t.aff AS aff, t.h1 AS h1, t.h2 AS h2,
         ((CASE WHEN x.q > 0 THEN x.q * t.w / x.wsum ELSE 0 END)
          + (CASE WHEN (x.mmask >> t.slot) & 1 THEN x.mq * t.w / x.mwsum ELSE 0 END)) / (1.0 + x.k / 2) AS share
  FROM x JOIN _lab_dt t ON t.role = x.role AND t.slot = x.slot
  WHERE x.q > 0 OR (x.mmask >> t.slot) & 1
),
z AS (
  -- Whole queries per digest that add up to the group's whole count, as on a real ProxySQL (every query counted
  -- once, so a hostgroup's digests add up to what Questions counted): each row its share's whole part, and the
  -- queries left over go one each to the rows with the largest fractions (the earlier digest on a tie, so a
  -- digest never counts less than one with a smaller share). Truncating each share instead lost up to one query
  -- a row (about 12 over 24 digests), more than the tests' tolerance between Questions and the digests' sum.
  SELECT y.*,
         row_number() OVER (PARTITION BY hostgroup, role, username, schemaname
                            ORDER BY share - CAST(share AS INTEGER) DESC, i) AS rank_by_fraction,
         CAST(sum(share) OVER grp + 1e-6 AS INTEGER) - sum(CAST(share AS INTEGER)) OVER grp AS left_over
  FROM y
  WINDOW grp AS (PARTITION BY hostgroup, role, username, schemaname)
),
counted AS (
  SELECT z.*, CASE WHEN q > 0 THEN max(1, CAST(share AS INTEGER) + (rank_by_fraction <= left_over))
                   ELSE CAST(share AS INTEGER) + (rank_by_fraction <= left_over) END AS cnt FROM z
)
SELECT hostgroup AS hostgroup, schemaname AS schemaname, username AS username, '' AS client_address,
       printf('0x%08X%08X', (h1 + k * 2654435761) % 4294967296, (h2 + k * 40503 + k * k * 97) % 4294967296) AS digest,
       replace(text, '{{t}}', k + 1) AS digest_text,
       cnt AS count_star,
       first_seen AS first_seen,
       last_seen AS last_seen,
       CAST(cnt * avg_us * lat AS INTEGER) AS sum_time,
       min_us AS min_time,
       max_us + (k * 37) % 400 AS max_time,
       cnt * aff AS sum_rows_affected,
       cnt * sent AS sum_rows_sent
FROM counted WHERE cnt > 0
"""


def _runtime_password(password, hashing):
    """The password runtime_mysql_users holds for a configured one, as ProxySQL's LOAD MYSQL USERS TO RUNTIME puts
    it there: NULL becomes ''; with admin-hash_passwords=true (2.5) a cleartext one becomes '*' + the upper-case hex
    of SHA1(SHA1(password)) and one starting with '*' is kept (v2.5.5 lib/ProxySQL_Admin.cpp; both measured on real
    2.5.5 and 2.7.1 nodes: lab/reference/versions/proxysql-2.5.5-captured.json, "hash_passwords")."""
    if not password:
        return ""
    if not hashing or password.startswith("*"):
        return password
    return "*" + hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()


class AdminEngine:
    """One ProxySQL admin endpoint: state, SQL, traffic model. Thread-safe via GLOBAL_LOCK."""

    def __init__(
        self,
        port=0,
        user="admin",
        password="admin",
        host="127.0.0.1",
        datadir=None,
        variables=None,
        seed=None,
        version=None,
    ):
        self.lock = GLOBAL_LOCK
        self.profile = versions_mod.Profile(version, SCHEMA)  # the ProxySQL version it answers as
        self.main_tables = set(self.profile.main_tables)
        self.checksum_names = [
            n for n in CHECKSUM_NAMES if n != "mysql_servers_v2" or self.profile.has_mysql_servers_v2
        ]
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.datadir = str(datadir) if datadir else None
        self.initial_variables = dict(variables or {})
        self.seed = seed
        self.log = collections.deque(maxlen=10000)
        self.log_seq = 0
        self.mode = "normal"  # normal | hang | refuse (driven by the server)
        # [(text, message, pause)]: statements containing text fail with message, or (pause) run and then the
        # endpoint stops answering, as a ProxySQL paused mid-change (LAB FAIL_STATEMENTS)
        self.failing = []
        self.latency_ms = 0.0
        self.listener_paused = False
        self.mode_listeners = []  # callbacks(engine) when mode changes (set by the server)
        self.next_check = None  # when this node's cluster thread checks its peers next
        self.sync_history = collections.deque(maxlen=1000)  # (time, checksum name, peer host, peer port)
        # Every runtime_mysql_servers this node served, from a LOAD or a pull (not ProxySQL's own SHUNNED):
        # (time, [(hostgroup_id, hostname, port, status, weight), ...]) - what tests read to tell that no peer
        # ever served a half-applied state of an operation.
        self.servers_history = collections.deque(maxlen=1000)
        self.loaded_servers = None  # runtime_mysql_servers as last LOADed, before Monitor's galera placement
        self.loaded_at = 0.0  # when (time.monotonic()): the replication manager places it on checks made after
        self.galera_placed = None
        self.replication_placed = None  # runtime_mysql_servers as the replication manager last left it
        self._open()

    # ------------------------------------------------------------------ setup
    def _open(self):
        with self.lock:
            self.started_wall = time.time()
            self.traffic = traffic_mod.TrafficModel(self.lock, seed=self.seed)
            db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False, cached_statements=CACHED)
            db.execute("PRAGMA page_size=512")
            self.db = db
            self.has_disk = False
            self.has_monitor = False
            for (schema, table), ddl in self.profile.ddl.items():
                if schema == "main":
                    db.execute(ddl)
            db.execute("ATTACH DATABASE ':memory:' AS stats")
            db.execute("PRAGMA stats.page_size=512")
            for (schema, table), ddl in SCHEMA.ddl.items():
                if schema == "stats" and table not in DIGEST_VIEWS:
                    db.execute(_qualify(ddl, "stats"))
            self._create_other_tables("stats")
            db.execute(
                "CREATE TABLE stats._lab_dg (hostgroup INT, role VARCHAR, m INT, globals INT, per_table INT,"
                " q REAL, wsum REAL, first_seen INT, last_seen INT, lat REAL, username VARCHAR,"
                " schemaname VARCHAR, mq REAL, mmask INT, mwsum REAL)"
            )
            db.execute(
                "CREATE TABLE stats._lab_dt (role VARCHAR, slot INT, text VARCHAR, w REAL, avg_us INT,"
                " min_us INT, max_us INT, sent INT, aff INT, h1 INT, h2 INT)"
            )
            for role in traffic_mod.ROLES:
                for slot, t in enumerate(traffic_mod.role_templates(role)):
                    h = hashlib.sha1(t[0].encode()).digest()
                    db.execute(
                        "INSERT INTO stats._lab_dt VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                        (
                            role,
                            slot,
                            t[0],
                            t[1],
                            t[2],
                            t[3],
                            t[4],
                            t[5],
                            t[6],
                            int.from_bytes(h[:4], "big"),
                            int.from_bytes(h[4:8], "big"),
                        ),
                    )
            for name in DIGEST_VIEWS:
                db.execute(DIGEST_VIEW_SQL.format(name=name))
            # defaults of a fresh ProxySQL 2.7.1, with the lab's identity and credentials
            values = dict(self.profile.variables)
            values["admin-version"] = self.profile.banner
            if (self.user, self.password) != ("admin", "admin"):
                values["admin-admin_credentials"] = f"{self.user}:{self.password}"
            values["admin-mysql_ifaces"] = f"{self.host}:{self.port}"
            values.update({k: str(v) for k, v in self.initial_variables.items()})
            db.executemany("INSERT INTO global_variables VALUES (?,?)", list(values.items()))
            db.executemany(
                "INSERT INTO mysql_collations VALUES (?,?,?,?)",
                [
                    (8, "latin1_swedish_ci", "latin1", "Yes"),
                    (33, "utf8_general_ci", "utf8", "Yes"),
                    (45, "utf8mb4_general_ci", "utf8mb4", "Yes"),
                    (63, "binary", "binary", "Yes"),
                    (83, "utf8_bin", "utf8", ""),
                    (255, "utf8mb4_0900_ai_ci", "utf8mb4", ""),
                ],
            )
            self.checksums = {n: [1, int(self.started_wall), "0x0000000000000000"] for n in self.checksum_names}
            self.runtime_vars = {}
            self.proxysql_servers_loaded_at = 0.0
            fresh_disk = True
            if self.datadir:
                fresh_disk = not os.path.exists(os.path.join(self.datadir, "proxysql.db"))
            self._ensure_disk()  # as ProxySQL: a disk database always, written whole at the first start
            if self.datadir and not fresh_disk:
                for module in MODULES:  # a restart: the config comes from disk
                    self._apply(module, "disk2mem")
            # start: every module from memory to runtime; variables take effect even if read-only
            self._load_variables("mysql-", startup=True)
            self._load_variables("admin-", startup=True)
            self._load_variables("pgsql-", startup=True)  # 3.0 (none in other versions)
            for module in MODULES:
                if module not in ("MYSQL VARIABLES", "ADMIN VARIABLES"):
                    self._apply(module, "mem2run", bump=False)
            if fresh_disk:  # (a restart without a datadir puts the previous disk back over it)
                for module in MODULES:
                    self._apply(module, "mem2disk")
                self.db.execute(
                    "INSERT OR REPLACE INTO disk.global_variables SELECT * FROM main.global_variables"
                    " WHERE variable_name LIKE 'pgsql-%'"
                )  # 3.0: the disk has them too
            for name in self.checksum_names:
                self.checksums[name][2] = self._checksum(name)
            self.peer_checksums = {}  # (host, port, name) -> [version, epoch, checksum, changed_at, updated_at, diff_check]
            self._cluster_membership()

    def _ensure_disk(self):
        if self.has_disk:
            return
        if self.datadir:
            os.makedirs(self.datadir, exist_ok=True)
            path = os.path.join(self.datadir, "proxysql.db")
        else:
            path = ":memory:"
        self.db.execute("ATTACH DATABASE ? AS disk", (path,))
        if path == ":memory:":
            self.db.execute("PRAGMA disk.page_size=512")
        existing = {r[0] for r in self.db.execute("SELECT name FROM disk.sqlite_master WHERE type='table'")}
        for (schema, table), ddl in self.profile.ddl.items():
            if schema == "main" and not table.startswith("runtime_") and table not in existing:
                self.db.execute(_qualify(ddl, "disk"))
        self.has_disk = True

    def _ensure_monitor(self):
        if self.has_monitor:
            return
        self.db.execute("ATTACH DATABASE ':memory:' AS monitor")
        self.db.execute("PRAGMA monitor.page_size=512")
        for (schema, table), ddl in SCHEMA.ddl.items():
            if schema == "monitor":
                self.db.execute(_qualify(ddl, "monitor"))
        self._create_other_tables("monitor")
        self.has_monitor = True

    def _create_other_tables(self, schema):
        """The stats or monitor tables of this version that 2.7.1 lacks (3.0's pgsql ones): their columns as a real
        node showed them, empty."""
        for (s, table), columns in self.profile.other_tables.items():
            if s == schema:
                cols = ", ".join('"' + c + '"' for c in columns)
                self.db.execute(f"CREATE TABLE {schema}.{table} ({cols})")

    def close(self):
        with self.lock:
            SYNCING.discard(self)
            try:
                self.db.close()
            except sqlite3.Error:
                pass

    def restart(self):
        """Like a restart of the ProxySQL process: runtime and stats are lost, the config comes
        back from disk (the in-memory disk survives too), every client session is gone."""
        with self.lock:
            advance_cluster()
            disk_image = None
            if self.has_disk and not self.datadir:
                disk_image = self.db.serialize(name="disk")
            self.db.close()
            self._open()
            if disk_image is not None:
                self._ensure_disk()
                self.db.deserialize(disk_image, name="disk")
                for module in MODULES:
                    self._apply(module, "disk2mem")
                self._load_variables("mysql-", startup=True)
                self._load_variables("admin-", startup=True)
                self._load_variables("pgsql-", startup=True)
                for module in MODULES:
                    if module not in ("MYSQL VARIABLES", "ADMIN VARIABLES"):
                        self._apply(module, "mem2run", bump=False)
                for name in self.checksum_names:  # version 1: the configuration read from disk
                    self.checksums[name][2] = self._checksum(name)
            return True

    # ------------------------------------------------------------------ credentials
    def credentials(self):
        """Accepted (user, password) pairs: runtime admin-admin_credentials and stats_credentials."""
        pairs = {}
        for var in ("admin-admin_credentials", "admin-stats_credentials"):
            for item in (self.runtime_vars.get(var) or "").split(";"):
                u, sep, p = item.partition(":")
                if sep and u:
                    pairs.setdefault(u, p)
        pairs.setdefault(self.user, self.password)
        return pairs

    def server_version(self):
        return f"{self.runtime_vars.get('mysql-server_version', '8.0.11')} (ProxySQL Admin Module, lab double)"

    # ------------------------------------------------------------------ statements
    def record(self, conn_id, sql):
        self.log_seq += 1
        self.log.append({"seq": self.log_seq, "t": round(time.time(), 6), "conn": conn_id, "sql": sql})

    def statements(self, since=0):
        with self.lock:
            return [e["sql"] for e in self.log if e["seq"] > since]

    def holds_until_resumed(self, sql):
        """LAB FAIL_STATEMENTS {"pause": "on_resume"}: the first statement containing its text is not run yet; the
        endpoint stops answering now and the server runs it once it is set back to normal, as a ProxySQL stopped
        (SIGSTOP) with the statement in flight runs it on SIGCONT: its change is then the newest of its cluster."""
        with self.lock:
            if not any(pausing == ON_RESUME and needle.lower() in sql.lower() for needle, _, pausing in self.failing):
                return False
            advance_cluster()
            self.failing = [f for f in self.failing if not f[2]]
            self.mode = "hang"
            for cb in self.mode_listeners:
                cb(self, "mode")
            return True

    def execute(self, sql, conn_id=0):
        """Run one statement as ProxySQL's admin would; returns a Result (never raises)."""
        text = sql.strip()
        while text.endswith(";"):
            text = text[:-1].rstrip()
        if LAB_RE.match(text):
            from . import lab_commands

            return lab_commands.run(self, text[3:].strip())
        with self.lock:
            advance_cluster()
            self.record(conn_id, sql)
            pause = False
            for needle, message, pausing in self.failing:
                if needle.lower() not in text.lower():
                    continue
                if not pausing:  # an injected refusal: a node of another version, say
                    return Result(error=(ERR_CODE, f"ProxySQL Admin Error: {message}"))
                pause = True
            try:
                return self._execute(text)
            except sqlite3.Error as e:
                return Result(error=(ERR_CODE, f"ProxySQL Admin Error: {e}"))
            except Exception as e:  # a bug of the double must not kill the connection
                return Result(error=(ERR_CODE, f"ProxySQL Admin Error: lab double internal error: {e!r}"))
            finally:
                if pause:  # applied; the answer waits until the endpoint is set back to normal
                    self.failing = [f for f in self.failing if not f[2]]
                    self.mode = "hang"
                    for cb in self.mode_listeners:
                        cb(self, "mode")

    def _execute(self, text):
        norm = " ".join(text.split())
        upper = norm.upper()
        first = upper.split(" ", 1)[0] if upper else ""
        if not text:
            return Result(error=(ERR_CODE, "ProxySQL Admin Error: empty query"))
        if first in ("LOAD", "SAVE"):
            return self._loadsave(norm)
        if first == "SET":
            m = SET_VAR_RE.match(text)
            if m and m.group(1) not in self.profile.variables:
                # as ProxySQL: an OK (not an error) carrying this text, nothing written (admin_handler_command_set)
                return Result(affected=0, info=f"ERROR: Unknown global variable: '{m.group(1)}'.")
            if m and m.group(1) in NOT_SET_CONFIGURABLE:
                return Result(
                    error=(
                        ERR_CODE,
                        f"ProxySQL Admin Error: ERROR: Global variable '{m.group(1)}' is not "
                        "configurable using SET command. You must run UPDATE global_variables",
                    )
                )
            if m:
                value = _unquote(m.group(2).strip())
                cur = self.db.execute(
                    "UPDATE global_variables SET variable_value=? WHERE variable_name=?", (value, m.group(1))
                )
                return Result(affected=max(cur.rowcount, 0))
            return Result(affected=0)  # SET autocommit / NAMES / session variables: accepted
        if upper in ("BEGIN", "COMMIT", "ROLLBACK", "START TRANSACTION") or first == "USE":
            return Result(affected=0)
        m = KILL_RE.match(norm)
        if m:  # ProxySQL's admin: KILL CONNECTION <SessionID> closes that client session
            session_id = int(m.group(1) or 0)
            if not self.traffic.kill(session_id):
                return Result(error=(ERR_CODE, f"ProxySQL Admin Error: Unknown thread id: {session_id}"))
            return Result(affected=0)
        if first == "SHOW":
            return self._show(norm, upper)
        if first == "PROXYSQL":
            return self._proxysql_cmd(upper)
        m = SELECT_VARS_RE.match(norm)
        if m:
            names = [n.strip() for n in m.group(1).split(",")]
            values = [self._at_at(n) for n in names]
            if all(v is not False for v in values):
                return Result(columns=names, rows=[tuple(values)])
        return self._sql(text)

    def _at_at(self, name):
        key = name[2:].lower()
        for prefix in ("session.", "global.", "local."):
            if key.startswith(prefix):
                key = key[len(prefix) :]
        known = {
            "version": self.profile.banner,
            "version_comment": "(ProxySQL Admin Module, lab double)",
            "max_allowed_packet": "67108864",
            "autocommit": "1",
            "tx_isolation": "REPEATABLE-READ",
            "transaction_isolation": "REPEATABLE-READ",
            "sql_mode": "",
            "time_zone": "SYSTEM",
            "system_time_zone": "UTC",
            "character_set_client": "utf8",
            "character_set_connection": "utf8",
            "character_set_results": "utf8",
            "character_set_server": "utf8",
            "collation_connection": "utf8_general_ci",
            "collation_server": "utf8_general_ci",
            "auto_increment_increment": "1",
            "lower_case_table_names": "0",
            "net_write_timeout": "60",
            "wait_timeout": "28800",
            "interactive_timeout": "28800",
            "port": str(self.port),
            "hostname": "lab-double",
            "read_only": "0",
            "license": "GPL",
            "init_connect": "",
            "performance_schema": "0",
            "query_cache_size": "0",
            "query_cache_type": "OFF",
        }
        return known.get(key, False)

    def _proxysql_cmd(self, upper):
        if upper in ("PROXYSQL PAUSE",):
            self.listener_paused = True
        elif upper in ("PROXYSQL RESUME",):
            self.listener_paused = False
        elif upper == "PROXYSQL RESTART":
            self.restart()
        elif upper not in (
            "PROXYSQL FLUSH LOGS",
            "PROXYSQL FLUSH QUERY CACHE",
            "PROXYSQL READONLY",
            "PROXYSQL READWRITE",
            "PROXYSQL FLUSH MYSQL CLIENT HOSTS",
        ):
            return self._sql(upper)  # SQLite's syntax error, as the real one
        return Result(affected=0)

    def _sql(self, text):
        tokens = {t.lower() for t in IDENT_RE.findall(text)}
        if "disk" in tokens:
            self._ensure_disk()
        if "monitor" in tokens or tokens & MONITOR_TABLES:
            self._ensure_monitor()
        dyn = tokens & DYNAMIC
        if dyn:
            self._refresh(dyn)
        m = DML_TARGET_RE.match(text)
        parts = m.group(1).replace("`", "").replace('"', "").lower().split(".") if m else [""]
        target, schema = parts[-1], (parts[0] if len(parts) > 1 else "")
        if target.startswith("runtime_") or (
            target in STATS_TABLES and (schema == "stats" or (not schema and target not in self.main_tables))
        ):
            # ProxySQL regenerates runtime_* and stats tables on read: writes to them are lost.
            self.db.execute("SAVEPOINT lab_discard")
            try:
                cur = self.db.execute(text)
                rows = cur.fetchall() if cur.description else None
                return Result(
                    columns=[d[0] for d in cur.description] if cur.description else None,
                    rows=rows,
                    affected=max(cur.rowcount, 0),
                )
            finally:
                self.db.execute("ROLLBACK TO lab_discard")
                self.db.execute("RELEASE lab_discard")
        cur = self.db.execute(text)
        if cur.description:
            columns = [d[0] for d in cur.description]
            # values go out as text: the protocol writer renders ints/floats as SQLite would
            res = Result(columns=columns, rows=cur.fetchall())
        else:
            res = Result(affected=max(cur.rowcount, 0))
        if "stats_mysql_query_digest_reset" in dyn:
            self.traffic.digest_reset()
        if "stats_mysql_connection_pool_reset" in dyn:
            self.traffic.pool_rows(reset=True)
        if "stats_mysql_errors_reset" in dyn:
            with self.traffic.lock:
                self.traffic.errors.clear()
        return res

    # ------------------------------------------------------------------ SHOW
    def _show(self, norm, upper):
        m = re.match(r"^SHOW (?:FULL )?TABLES(?: (?:FROM|IN) (\w+))?(?: LIKE '(.*)')?$", norm, re.I)
        if m:
            schema = (m.group(1) or "main").lower()
            if schema == "main":
                names = self.profile.main_tables
            elif schema in ("stats", "monitor"):
                names = sorted(SCHEMA.tables[schema] + [t for s, t in self.profile.other_tables if s == schema])
            elif schema == "disk":
                self._ensure_disk()
                names = [
                    r[0]
                    for r in self.db.execute(
                        "SELECT name FROM disk.sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%' ORDER BY name"
                    )
                ]
            else:
                names = []
            if m.group(2) is not None:
                rx = _like_to_regex(m.group(2))
                names = [n for n in names if rx.match(n)]
            return Result(columns=["tables"], rows=[(n,) for n in names])
        if upper == "SHOW DATABASES" or upper == "SHOW SCHEMAS":
            d = self.datadir or "<datadir>"
            disk_file = os.path.join(d, "proxysql.db") if self.datadir else ""
            stats_file = os.path.join(d, "proxysql_stats.db") if self.datadir else ""
            return Result(
                columns=["seq", "name", "file"],
                rows=[
                    ("0", "main", ""),
                    ("2", "disk", disk_file),
                    ("3", "stats", ""),
                    ("4", "monitor", ""),
                    ("5", "stats_history", stats_file),
                ],
            )
        m = re.match(r"^SHOW (MYSQL|ADMIN|GLOBAL|LDAP)? ?VARIABLES(?: LIKE '(.*)')?$", norm, re.I)
        if m and m.group(1) and m.group(1).upper() != "GLOBAL" and m.group(2) is not None:
            m = None  # SHOW MYSQL VARIABLES LIKE '...' is no admin command: SQLite's syntax error
        if m:
            kind = (m.group(1) or "GLOBAL").upper()
            where = {
                "MYSQL": "WHERE variable_name LIKE 'mysql-%'",
                "ADMIN": "WHERE variable_name LIKE 'admin-%'",
                "LDAP": "WHERE variable_name LIKE 'ldap-%'",
            }.get(kind, "WHERE 1")
            args = ()
            if m.group(2) is not None:
                where += " AND variable_name LIKE ?"
                args = (m.group(2),)
            return self._sql_args(
                f"SELECT variable_name AS Variable_name, variable_value AS Value "
                f"FROM global_variables {where} ORDER BY variable_name",
                args,
            )
        if upper in ("SHOW MYSQL STATUS", "SHOW GLOBAL STATUS", "SHOW STATUS"):
            return self._sql("SELECT Variable_Name AS Variable_name, Variable_Value AS Value FROM stats_mysql_global")
        if upper in ("SHOW PROCESSLIST", "SHOW FULL PROCESSLIST"):
            info = "info" if "FULL" in upper else "SUBSTR(info, 0, 100) info"
            return self._sql(
                f"SELECT SessionID, user, db, hostgroup, command, time_ms, {info} FROM stats_mysql_processlist"
            )
        m = re.match(r"^SHOW CREATE TABLE [`\"]?(?:(\w+)[`\"]?\.[`\"]?)?(\w+)[`\"]?$", norm, re.I)
        if m:
            schema = (m.group(1) or "").lower()
            table = m.group(2)
            if not schema:
                schema = (
                    "main"
                    if ("main", table) in self.profile.ddl
                    else ("stats" if ("stats", table) in SCHEMA.ddl else "monitor")
                )
            lookup = "main" if schema == "disk" else schema
            ddl = self.profile.ddl.get((lookup, table))
            if ddl is None:
                return Result(error=(ERR_CODE, f"ProxySQL Admin Error: Table '{table}' doesn't exist"))
            return Result(columns=["table", "Create Table"], rows=[(table, ddl)])
        if upper in ("SHOW WARNINGS", "SHOW ERRORS"):
            return Result(columns=["Level", "Code", "Message"], rows=[])
        return self._sql(norm)

    def _sql_args(self, sql, args):
        cur = self.db.execute(sql, args)
        return Result(columns=[d[0] for d in cur.description], rows=cur.fetchall())

    # ------------------------------------------------------------------ LOAD / SAVE
    def _loadsave(self, norm):
        m = LOADSAVE_RE.match(norm)
        if m:
            verb = m.group(1).upper()
            module = " ".join(m.group(2).upper().split())
            where = f"{m.group(3).upper()} {m.group(4).upper()}"
            direction = DIRECTIONS.get((verb, where))
            if module == "MYSQL DIGEST" and verb == "SAVE" and where == "TO DISK":
                return Result(affected=0)
            if module in MODULES and direction:
                if module == "COREDUMP" and direction != "mem2run":
                    direction = None
                if direction:
                    return Result(affected=self._apply(module, direction) or 0)
        # what ProxySQL's admin does with an unknown command: hand it to SQLite, which refuses it
        return self._sql(norm)

    def _apply(self, module, direction, bump=True):
        spec = MODULES[module]
        if direction == "config":
            return
        if direction in ("mem2disk", "disk2mem"):
            self._ensure_disk()
        if isinstance(spec, str):  # variables, by prefix
            prefix = spec
            if direction == "mem2run":
                self._load_variables(prefix)
            elif direction == "run2mem":
                self.db.execute(
                    "INSERT OR REPLACE INTO main.global_variables SELECT * FROM main.runtime_global_variables"
                    " WHERE substr(variable_name,1,?)=?",
                    (len(prefix), prefix),
                )
            elif direction == "mem2disk":
                self.db.execute(
                    "DELETE FROM disk.global_variables WHERE substr(variable_name,1,?)=?", (len(prefix), prefix)
                )
                cur = self.db.execute(
                    "INSERT INTO disk.global_variables SELECT * FROM main.global_variables"
                    " WHERE substr(variable_name,1,?)=?",
                    (len(prefix), prefix),
                )
                return cur.rowcount  # ProxySQL answers SAVE ... VARIABLES TO DISK with the rows written
            elif direction == "disk2mem":
                self.db.execute(
                    "INSERT OR REPLACE INTO main.global_variables SELECT * FROM disk.global_variables"
                    " WHERE substr(variable_name,1,?)=?",
                    (len(prefix), prefix),
                )
            if direction == "mem2run" and bump:
                self._bump(module)
            if direction == "mem2run" and module == "ADMIN VARIABLES":
                self._cluster_membership()
            return
        for table in spec:
            if table not in self.main_tables:  # a table this version lacks (2.5: mysql_servers_ssl_params)
                continue
            if direction == "mem2run":
                if table == "mysql_users":
                    self._load_users()
                    continue
                self._copy(f"main.{table}", f"main.runtime_{table}")
                if table == "mysql_servers":
                    self.db.execute("UPDATE main.runtime_mysql_servers SET status=UPPER(status)")
                    self.loaded_servers = self._rows("SELECT * FROM main.runtime_mysql_servers")
                    self.loaded_at = time.monotonic()
                    self.galera_placed = None  # Monitor places the loaded rows again (_galera_monitor)
                    self.replication_placed = None  # and moves them from there (_replication_monitor)
                if table == "mysql_query_rules":  # as real 2.5.5 and 2.7.1 show it (lab/conformance.py): only the
                    # active rules are loaded, a NULL re_modifiers reads '' and is upper-cased, a '' digest reads NULL
                    self.db.execute("DELETE FROM main.runtime_mysql_query_rules WHERE active=0")
                    self.db.execute(
                        "UPDATE main.runtime_mysql_query_rules"
                        " SET re_modifiers=UPPER(IFNULL(re_modifiers,'')), digest=NULLIF(digest,'')"
                    )
                if table == "mysql_query_rules" and self.profile.swaps_mirror_columns:  # 3.0 (versions.py)
                    self.db.execute(
                        "UPDATE main.runtime_mysql_query_rules"
                        " SET mirror_flagOUT=mirror_hostgroup, mirror_hostgroup=mirror_flagOUT"
                    )
            elif direction == "run2mem":
                if table == "mysql_users":
                    self._save_users()
                    continue
                if table == "mysql_servers":
                    self._runtime_server_statuses()  # memory gets the runtime as shown, SHUNNED too
                self._copy(f"main.runtime_{table}", f"main.{table}")
            elif direction == "mem2disk":
                self._copy(f"main.{table}", f"disk.{table}")
            elif direction == "disk2mem":
                self._copy(f"disk.{table}", f"main.{table}")
        if direction == "mem2run" and module == "MYSQL SERVERS":
            self.servers_history.append(
                (
                    time.time(),
                    [
                        tuple(r)
                        for r in self.db.execute(
                            "SELECT hostgroup_id, hostname, port, status, weight FROM main.runtime_mysql_servers "
                            "ORDER BY hostgroup_id, hostname, port"
                        )
                    ],
                )
            )
        if direction == "mem2run":
            self._after_load(module, bump)

    def _copy(self, src, dst):
        self.db.execute(f"DELETE FROM {dst}")
        self.db.execute(f"INSERT INTO {dst} SELECT * FROM {src}")

    def _load_users(self):
        # runtime_mysql_users lists an active user once as frontend and once as backend, as ProxySQL
        # does; an inactive user is not at runtime at all (config-statements.jsonl)
        self.db.execute("DELETE FROM main.runtime_mysql_users")
        cols = [r[1] for r in self.db.execute("PRAGMA main.table_info(mysql_users)")]
        hashing = self.runtime_vars.get("admin-hash_passwords") == "true"  # 2.5 only, true by default
        for row in self.db.execute("SELECT * FROM main.mysql_users WHERE active<>0").fetchall():
            d = dict(zip(cols, row))
            d["password"] = _runtime_password(d["password"], hashing)
            d["default_schema"] = d["default_schema"] or ""  # NULL reads '' at runtime (real 2.5.5 and 2.7.1)
            for be, fe in ((1, 0), (0, 1)):
                if (be and d["backend"]) or (fe and d["frontend"]):
                    d2 = dict(d, backend=be, frontend=fe)
                    self.db.execute(
                        f"INSERT OR REPLACE INTO main.runtime_mysql_users ({','.join(cols)}) "
                        f"VALUES ({','.join('?' * len(cols))})",
                        [d2[c] for c in cols],
                    )

    def _save_users(self):
        # SAVE MYSQL USERS TO MEMORY writes each runtime row over memory as it is: a user loaded from
        # one row comes back as two (frontend, backend); users not at runtime (inactive) stay untouched
        self.db.execute("INSERT OR REPLACE INTO main.mysql_users SELECT * FROM main.runtime_mysql_users")

    def _load_variables(self, prefix, startup=False):
        """Memory -> runtime for one module's variables, as ProxySQL does it: a value the module
        refuses is not applied, and memory is reset to the current runtime value; an unknown
        variable is deleted from memory."""
        rows = self.db.execute(
            "SELECT variable_name, variable_value FROM main.global_variables WHERE substr(variable_name,1,?)=?",
            (len(prefix), prefix),
        ).fetchall()
        current = dict(
            self.db.execute(
                "SELECT variable_name, variable_value FROM main.runtime_global_variables"
                " WHERE substr(variable_name,1,?)=?",
                (len(prefix), prefix),
            ).fetchall()
        )
        for name, value in rows:
            if name not in self.profile.variables and name not in self.initial_variables:
                self.db.execute("DELETE FROM main.global_variables WHERE variable_name=?", (name,))
                continue
            ok, norm = _validate(name, value)
            if ok and name in RUNTIME_READ_ONLY and not startup and name in current and current[name] != norm:
                ok = False
            if ok:
                current[name] = norm
            elif name in current:
                self.db.execute(
                    "UPDATE main.global_variables SET variable_value=? WHERE variable_name=?", (current[name], name)
                )
        self.db.execute(
            "DELETE FROM main.runtime_global_variables WHERE substr(variable_name,1,?)=?", (len(prefix), prefix)
        )
        self.db.executemany("INSERT INTO main.runtime_global_variables VALUES (?,?)", sorted(current.items()))
        for k in [k for k in self.runtime_vars if k.startswith(prefix)]:
            del self.runtime_vars[k]
        self.runtime_vars.update(current)
        if prefix == "mysql-":
            self.traffic.set_runtime_variables({k: v for k, v in self.runtime_vars.items() if k.startswith("mysql-")})

    def _after_load(self, module, bump=True):
        if module == "MYSQL SERVERS":
            cur = self.db.execute("SELECT * FROM main.runtime_mysql_servers")
            cols = [d[0] for d in cur.description]
            self.traffic.set_runtime_servers([dict(zip(cols, r)) for r in cur.fetchall()])
            cur = self.db.execute("SELECT * FROM main.runtime_mysql_hostgroup_attributes")
            cols = [d[0] for d in cur.description]
            self.traffic.set_runtime_hostgroup_attributes([dict(zip(cols, r)) for r in cur.fetchall()])
        elif module == "MYSQL QUERY RULES":
            cur = self.db.execute("SELECT * FROM main.runtime_mysql_query_rules")
            cols = [d[0] for d in cur.description]
            self.traffic.set_runtime_rules(
                [{k: (None if v is None else str(v)) for k, v in zip(cols, r)} for r in cur.fetchall()]
            )
        elif module == "PROXYSQL SERVERS":
            self.proxysql_servers_loaded_at = time.time()
            self._cluster_membership()
        if bump:
            self._bump(module)

    def _bump(self, module):
        now = int(time.time())
        for name in MODULE_CHECKSUMS.get(module, []):
            if name not in self.checksums:  # a module this version lacks (2.5: mysql_servers_v2)
                continue
            c = self.checksums[name]
            c[0] += 1
            c[1] = now
            c[2] = self._checksum(name)

    def _checksum(self, name):
        tables = {
            "admin_variables": [f"runtime_global_variables WHERE variable_name LIKE 'admin-%' AND {NOT_NODE_VARIABLE}"],
            "mysql_variables": [f"runtime_global_variables WHERE variable_name LIKE 'mysql-%' AND {NOT_NODE_VARIABLE}"],
            "mysql_query_rules": ["runtime_mysql_query_rules", "runtime_mysql_query_rules_fast_routing"],
            "mysql_servers": ["runtime_mysql_servers"],
            "mysql_servers_v2": ["runtime_" + t for t in MODULES["MYSQL SERVERS"] if t in self.main_tables],
            "mysql_users": ["runtime_mysql_users"],
            "proxysql_servers": ["runtime_proxysql_servers"],
        }[name]
        h = hashlib.sha1()
        rows = 0
        for t in tables:
            for r in self.db.execute(f"SELECT * FROM main.{t} ORDER BY 1,2").fetchall():
                h.update(json.dumps(r, default=str).encode())
                rows += 1
        if rows == 0:
            return "0x0000000000000000"
        return "0x" + h.hexdigest()[:16].upper()

    # ------------------------------------------------------------------ stats refresh
    def _fill(self, table, rows, schema="stats"):
        self.db.execute(f"DELETE FROM {schema}.{table}")
        if rows:
            n = len(rows[0])
            self.db.executemany(f"INSERT INTO {schema}.{table} VALUES ({','.join('?' * n)})", rows)

    def _refresh(self, names):
        t = self.traffic
        if "runtime_mysql_servers" in names or names & {
            "stats_mysql_connection_pool",
            "stats_mysql_connection_pool_reset",
        }:
            self._galera_monitor()
            self._replication_monitor()
        if "runtime_mysql_servers" in names:
            self._runtime_server_statuses()
        if names & {"stats_mysql_connection_pool", "stats_mysql_connection_pool_reset"}:
            rows = t.pool_rows()
            self._fill("stats_mysql_connection_pool", rows)
            self._fill("stats_mysql_connection_pool_reset", rows)
        if "stats_mysql_global" in names:
            self._fill("stats_mysql_global", self._global_rows())
        if "stats_mysql_processlist" in names:
            try:
                ext = int(self.runtime_vars.get("mysql-show_processlist_extended", "0"))
            except ValueError:
                ext = 0
            self._fill("stats_mysql_processlist", t.processlist_rows(ext if ext in (1, 2) else 0))
        if "stats_mysql_commands_counters" in names:
            self._fill("stats_mysql_commands_counters", t.commands_rows())
        if "stats_mysql_free_connections" in names:
            self._fill("stats_mysql_free_connections", t.free_connection_rows())
        if "stats_mysql_query_rules" in names:
            self._fill("stats_mysql_query_rules", t.rule_rows())
        if "stats_mysql_users" in names:
            self._fill("stats_mysql_users", self._users_rows())
        if names & {"stats_mysql_errors", "stats_mysql_errors_reset"}:
            rows = t.error_rows()
            self._fill("stats_mysql_errors", rows)
            self._fill("stats_mysql_errors_reset", rows)
        if names & set(DIGEST_VIEWS):
            self._fill("_lab_dg", t.digest_params())
        if names & {
            "stats_proxysql_servers_checksums",
            "stats_proxysql_servers_metrics",
            "stats_proxysql_servers_status",
        }:
            self._cluster_rows()
        if "stats_memory_metrics" in names:
            self._fill(
                "stats_memory_metrics",
                [
                    ("SQLite3_memory_bytes", str(2682008)),
                    ("jemalloc_resident", str(40000000)),
                    ("jemalloc_active", str(30000000)),
                    ("jemalloc_allocated", str(25000000)),
                    ("jemalloc_mapped", str(60000000)),
                    ("jemalloc_metadata", str(5000000)),
                    ("jemalloc_retained", str(10000000)),
                    ("Auth_memory", "1024"),
                    ("query_digest_memory", str(400 * int(sum(1 for _ in t.digest_params())))),
                    ("mysql_query_rules_memory", str(1380 + 500 * len(t.rules))),
                    ("mysql_firewall_users_table", "0"),
                    ("mysql_firewall_users_config", "0"),
                    ("mysql_firewall_rules_table", "0"),
                    ("mysql_firewall_rules_config", "329"),
                    ("stack_memory_mysql_threads", str(8388608 * max(1, t._var_int("mysql-threads", 4)))),
                    ("stack_memory_admin_threads", "16777216"),
                    ("stack_memory_cluster_threads", "0"),
                ],
            )
        if "runtime_checksums_values" in names:
            other = [(n, v, int(self.started_wall) if v else 0, c) for n, v, c in self.profile.other_checksums]
            self._fill(
                "runtime_checksums_values",
                sorted([(n, c[0], c[1], c[2]) for n, c in self.checksums.items()] + other),
                schema="main",
            )

    def _rows(self, sql):
        cur = self.db.execute(sql)
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r)) for r in cur.fetchall()]

    def _galera_monitor(self):
        """ProxySQL's Galera manager (galera_monitor.py): with an active mysql_galera_hostgroups row at runtime,
        runtime_mysql_servers is the loaded rows placed by each backend's state (GALERA_PROBER reads them on its
        threads, never here). Until every backend of a row has been read once since the LOAD, its loaded rows stay
        (real 2.7.1 places them at its next healthcheck; the double within about FRESH_S)."""
        rows = self._rows("SELECT * FROM main.runtime_mysql_galera_hostgroups WHERE active=1")
        if not rows or not self.loaded_servers:
            return
        groups = [galera_monitor.GaleraRow.of(r) for r in rows]
        managed = {hg for g in groups for hg in g.hostgroups}
        user = self.runtime_vars.get("mysql-monitor_username", "monitor")
        password = self.runtime_vars.get("mysql-monitor_password", "monitor")
        states = {}
        for r in self.loaded_servers:
            if int(r["hostgroup_id"]) in managed:
                res = GALERA_PROBER.latest(r["hostname"], r["port"], user, password)
                if res is not None and res.started >= self.loaded_at:  # a check made after the LOAD: until then
                    states[(r["hostname"], int(r["port"]))] = res.ok  # runtime holds the loaded rows, as real
        placed = galera_monitor.place(self.loaded_servers, groups, states)
        if placed == self.galera_placed:
            return
        self.galera_placed = placed
        self._set_runtime_servers(placed)

    def _replication_monitor(self):
        """ProxySQL's replication manager (replication_monitor.py): with a mysql_replication_hostgroups row at runtime,
        the servers move between its writer and reader hostgroups by each backend's read_only (READ_ONLY_PROBER reads
        them on its threads, never here), from where the last check left them (after a LOAD: the loaded rows)."""
        rows = self._rows("SELECT * FROM main.runtime_mysql_replication_hostgroups")
        if not rows or not self.loaded_servers:
            return
        groups = [replication_monitor.ReplicationRow.of(r) for r in rows]
        managed = {hg for g in groups for hg in (g.writer, g.reader)}
        user = self.runtime_vars.get("mysql-monitor_username", "monitor")
        password = self.runtime_vars.get("mysql-monitor_password", "monitor")
        current = self.replication_placed or self.loaded_servers
        # Monitor's read_only check every mysql-monitor_read_only_interval: the loaded rows move on checks made after
        # the LOAD only (a read from before it, e.g. before read_only was flipped back, would move them for good)
        try:
            interval_s = int(self.runtime_vars.get("mysql-monitor_read_only_interval", "1000")) / 1000
        except ValueError:
            interval_s = 1.0
        states = {}
        for r in current:
            if int(r["hostgroup_id"]) in managed:
                res = READ_ONLY_PROBER.latest(r["hostname"], r["port"], user, password, fresh_s=interval_s)
                if res is not None and res.started >= self.loaded_at:
                    states[(r["hostname"], int(r["port"]))] = res.ok
        also_reader = self.runtime_vars.get("mysql-monitor_writer_is_also_reader", "true").lower() in ("true", "1")
        placed = replication_monitor.place(current, groups, states, also_reader)
        if placed == self.replication_placed:
            return
        self.replication_placed = placed
        self._set_runtime_servers(placed)

    def _set_runtime_servers(self, placed):
        cols = list(placed[0]) if placed else []
        self.db.execute("DELETE FROM main.runtime_mysql_servers")
        self.db.executemany(
            f"INSERT INTO main.runtime_mysql_servers ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
            [[r[c] for c in cols] for r in placed],
        )
        self.traffic.set_runtime_servers(placed)

    def _runtime_server_statuses(self):
        """runtime_mysql_servers shows each server's status as ProxySQL has it now: SHUNNED after
        connection errors on this node, while mysql_servers (memory) keeps what was configured."""
        self.db.executemany(
            "UPDATE main.runtime_mysql_servers SET status=? WHERE hostgroup_id=? AND hostname=? AND port=? AND status<>?",
            [(st, hg, host, port, st) for (hg, host, port), st in self.traffic.server_statuses().items()],
        )

    def _global_rows(self):
        live = self.traffic.global_values()
        live["mysql_listener_paused"] = "true" if self.listener_paused else "false"
        overrides = self.traffic.global_overrides
        names = self.profile.status_names
        rows = [
            (name, str(overrides.get(name, live.get(name, value))))
            for name, value in SCHEMA.stats_global
            if names is None or name in names
        ]
        known = {name for name, _ in SCHEMA.stats_global}
        return rows + [
            (name, str(overrides.get(name, live.get(name, "0")))) for name in sorted(names or ()) if name not in known
        ]  # 3.0's new counters: 0 on a node without clients

    def _users_rows(self):
        counts = collections.Counter()
        for wl in self.traffic.workloads.values():
            counts[wl.user] += len(wl.sessions)
        rows = []
        for name, maxc in self.db.execute(
            "SELECT username, max_connections FROM main.runtime_mysql_users WHERE frontend=1"
        ).fetchall():
            rows.append((name, counts.get(name, 0), maxc))
        return rows

    # ------------------------------------------------------------------ ProxySQL Cluster
    def _check_interval(self):
        try:
            return max(0.01, int(self.runtime_vars.get("admin-cluster_check_interval_ms", "1000")) / 1000.0)
        except ValueError:
            return 1.0

    def _peers(self):
        return self.db.execute("SELECT hostname, port, weight, comment FROM main.runtime_proxysql_servers").fetchall()

    def _cluster_membership(self):
        """The cluster thread runs while the node has peers and cluster credentials; its first check runs at
        once (a real node restarted from disk counted diff_check 1 before its admin answered:
        lab/reference/cluster-sync-3node.jsonl, step 3a)."""
        if self.runtime_vars.get("admin-cluster_username") and self._peers():
            if self not in SYNCING:
                self.next_check = time.time()
                SYNCING.add(self)
        else:
            SYNCING.discard(self)
            self.next_check = None

    def _reach(self, host, port):
        """The peer engine when this node's cluster credentials open its admin and it answers, else None."""
        peer = REGISTRY.get((_norm_host(host), int(port)))
        user = self.runtime_vars.get("admin-cluster_username", "")
        if (
            peer is None
            or not user
            or peer.mode != "normal"
            or peer.credentials().get(user) != self.runtime_vars.get("admin-cluster_password", "")
        ):
            return None
        return peer

    def _check_peers(self, t):
        """One check of the cluster thread at time t: every peer's checksums read, diff_check counted as
        ProxySQL does (1 when the peer's checksum changed since the last check, +1 when it did not, 0 when
        it equals this node's), then each module pulled from the best peer that qualifies."""
        reached = {}
        for host, port, _w, _c in self._peers():
            peer = self._reach(host, port)
            if peer is None:
                continue  # the rows keep what the last answer said
            reached[(host, int(port))] = peer
            for name in self.checksum_names:
                if name not in peer.checksums:  # a peer of a version without this module (2.5: mysql_servers_v2)
                    continue
                ver, epoch, csum = peer.checksums[name]
                st = self.peer_checksums.setdefault((host, int(port), name), [0, 0, "", 0, 0, 0])
                if csum != st[2]:
                    st[3], st[5] = int(t), 1
                else:
                    st[5] += 1
                st[0], st[1], st[2], st[4] = ver, epoch, csum, int(t)
                if csum == self.checksums[name][2]:
                    st[5] = 0
        for name, module in SYNC_MODULES.items():
            try:
                diffs = int(self.runtime_vars.get(f"admin-cluster_{name}_diffs_before_sync", "3"))
            except ValueError:
                diffs = 0
            if diffs <= 0:
                continue
            best = None
            for (host, port), peer in reached.items():
                key = self._sync_key(name, host, port)
                own_ver, own_epoch, own_csum = self.checksums[key]
                ver, epoch, csum, _ch, _up, diff = self.peer_checksums[(host, port, key)]
                if (
                    ver > 1
                    and diff >= diffs
                    and csum != own_csum
                    and (own_ver == 1 or epoch > own_epoch)
                    and (best is None or epoch > best[0])
                ):
                    best = (epoch, host, port, peer)
            if best:
                self._pull(best[3], name, module, t, best[1], best[2])

    def _sync_key(self, name, host, port):
        """The checksum that decides the pull of module `name` from a peer. 2.6+ (sysown/proxysql #4169): the
        mysql_servers module is pulled on mysql_servers_v2 (the loaded mysql_servers and every hostgroup table:
        replication, group replication, galera, aurora, attributes, ssl params), whatever
        admin-cluster_mysql_servers_sync_algorithm says; the pull fetches all of them. A galera or replication
        hostgroup row alone moves mysql_servers_v2 and not mysql_servers, and the peer pulls it 2-3 s later
        (lab/reference/cluster-2146.jsonl). The runtime-only pull of algorithm 1 (Monitor's changes to
        runtime_mysql_servers) is not modelled: here runtime_mysql_servers changes only with a LOAD, which moves
        mysql_servers_v2 too."""
        if (
            name == "mysql_servers"
            and "mysql_servers_v2" in self.checksums
            and (host, port, "mysql_servers_v2") in self.peer_checksums
        ):
            return "mysql_servers_v2"
        return name

    def _pull(self, peer, name, module, t, host, port):
        """This node takes the peer's runtime of one module into memory and runtime, with the peer's epoch
        and its own version + 1, and saves it to disk when admin-cluster_<name>_save_to_disk says so."""
        spec = MODULES[module]
        if isinstance(spec, str):
            rows = peer.db.execute(
                f"SELECT variable_name, variable_value FROM main.runtime_global_variables"
                f" WHERE substr(variable_name,1,?)=? AND {NOT_NODE_VARIABLE}",
                (len(spec), spec),
            ).fetchall()
            self.db.executemany("INSERT OR REPLACE INTO main.global_variables VALUES (?,?)", rows)
        else:
            for table in spec:
                if table not in self.main_tables or table not in peer.main_tables:
                    continue  # (a sync between versions is not modelled beyond this)
                rows = peer.db.execute(f"SELECT * FROM main.runtime_{table}").fetchall()
                if table == "mysql_users":
                    rows = self._users_as_configured(rows)
                self.db.execute(f"DELETE FROM main.{table}")
                if rows:
                    self.db.executemany(
                        f"INSERT OR REPLACE INTO main.{table} VALUES ({','.join('?' * len(rows[0]))})", rows
                    )
            if module == "MYSQL SERVERS":  # ProxySQL's own SHUNNED verdict is no configuration
                self.db.execute("UPDATE main.mysql_servers SET status='ONLINE' WHERE status='SHUNNED'")
        self._apply(module, "mem2run", bump=False)
        for n in MODULE_CHECKSUMS.get(module, []):
            if n not in self.checksums or n not in peer.checksums:
                continue
            c = self.checksums[n]
            c[0] += 1
            c[1] = peer.checksums[n][1]
            c[2] = self._checksum(n)
        if self.runtime_vars.get(f"admin-cluster_{name}_save_to_disk", "true") == "true":
            self._apply(module, "mem2disk")
        self.sync_history.append((t, name, host, port))

    def _users_as_configured(self, runtime_rows):
        """A peer's runtime users as one memory row per user: the runtime's frontend and backend rows of a user
        come back as the single row (frontend=1, backend=1) it was configured as (a real pull:
        lab/reference/cluster-sync-3node-summary.json, mysql_users)."""
        cols = [r[1] for r in self.db.execute("PRAGMA main.table_info(runtime_mysql_users)")]
        fe, be = cols.index("frontend"), cols.index("backend")
        merged = {}
        for row in runtime_rows:
            key = tuple(v for i, v in enumerate(row) if i not in (fe, be))
            if key in merged:
                merged[key][fe] = max(merged[key][fe], row[fe])
                merged[key][be] = max(merged[key][be], row[be])
            else:
                merged[key] = list(row)
        return [tuple(r) for r in merged.values()]

    def _cluster_rows(self):
        """stats_proxysql_servers_*: what this node's cluster thread last read from each peer (zeros for a peer
        never reached; a peer that stopped answering keeps its last values)."""
        interval = self._check_interval()
        checks, metrics, status = [], [], []
        for host, port, weight, comment in self._peers():
            # mysql_servers_v2 last, as a real 2.7.1 lists them (lab/conformance.py)
            for name in sorted(self.checksum_names, key=lambda n: n == "mysql_servers_v2"):
                st = self.peer_checksums.get((host, int(port), name))
                if st:
                    checks.append((host, port, name, st[0], st[1], st[2], st[3], st[4], st[5]))
                else:
                    checks.append((host, port, name, 0, 0, "", 0, 0, 0))
            peer = (
                self._reach(host, port)
                if self in SYNCING and any(k[:2] == (host, int(port)) for k in self.peer_checksums)
                else None
            )
            if peer is not None:
                g = peer.traffic.global_values()
                metrics.append(
                    (
                        host,
                        port,
                        weight,
                        comment,
                        1,
                        int(g["ProxySQL_Uptime"]),
                        int(interval * 1000),
                        g["Questions"],
                        g["Client_Connections_connected"],
                        g["Client_Connections_created"],
                    )
                )
                status.append((host, port, weight, "", 0, int(interval * 1e6), 150, 1, 0))
            else:
                metrics.append((host, port, weight, comment, 0, 0, 0, 0, 0, 0))
        self._fill("stats_proxysql_servers_checksums", checks)
        self._fill("stats_proxysql_servers_metrics", metrics)
        self._fill("stats_proxysql_servers_status", status)


NOT_NODE_VARIABLE = "variable_name NOT IN (%s)" % ",".join(f"'{v}'" for v in NODE_VARIABLES)


def advance_cluster(now=None):
    """Run every cluster check due by `now`, in time order across nodes (callers hold GLOBAL_LOCK).

    Configuration changes only through statements, and every statement (and every pause or resume) runs this
    first: a check due in the past ran against the state that held then, as ProxySQL's cluster thread would
    have. A node that does not answer (hang, refuse: a stopped process) runs no check of its own and is never
    read by a peer; its overdue check runs as soon as it answers again (resume_cluster)."""
    now = time.time() if now is None else now
    while True:
        due = [e for e in SYNCING if e.next_check is not None and e.next_check <= now and e.mode == "normal"]
        if not due:
            return
        eng = min(due, key=lambda e: (e.next_check, e.port))
        t = eng.next_check
        eng.next_check = t + eng._check_interval()
        eng._check_peers(t)


def resume_cluster(engine, now=None):
    """A stopped node answers again: its cluster thread's overdue check runs at once."""
    now = time.time() if now is None else now
    if engine in SYNCING and engine.next_check is not None and engine.next_check < now:
        engine.next_check = now


def _norm_host(h):
    return "127.0.0.1" if h in ("localhost", "127.0.0.1", "::1") else h


def _qualify(ddl, schema):
    return ddl.replace("CREATE TABLE ", f"CREATE TABLE {schema}.", 1)


def _unquote(v):
    if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
        q = v[0]
        return v[1:-1].replace(q + q, q)
    return v


def _like_to_regex(pattern):
    out = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in pattern)
    return re.compile(f"^{out}$", re.I)


# Measured on real 2.7.1 and 2.5.5 (lab/reference/conformance/variables-blank.sql): SET of these is refused with an
# error (UPDATE global_variables is the way), and these refuse '' at LOAD (memory goes back to the runtime value).
NOT_SET_CONFIGURABLE = {"mysql-init_connect"}
EMPTY_REFUSED = {
    "mysql-default_schema",
    "mysql-keep_multiplexing_variables",
    "admin-stats_credentials",
    "mysql-default_session_track_gtids",
}


def _validate(name, value):
    """(accepted, normalised value) for a variable value, judged by the type of its default."""
    default = SCHEMA.defaults.get(name)
    v = "" if value is None else str(value)
    if v == "" and name in EMPTY_REFUSED:
        return False, v
    if default in ("true", "false"):
        lv = v.strip().lower()
        if lv in ("true", "1"):
            return True, "true"
        if lv in ("false", "0"):
            return True, "false"
        return False, v
    if default is not None and re.fullmatch(r"-?\d+", default):
        try:
            n = int(v.strip())
        except ValueError:
            return False, v
        lo, hi = INT_RANGES.get(name, (-1 if default.startswith("-") else 0, 2**31 - 1))
        if default.startswith("-"):
            lo = min(lo, -(2**31))
        if not lo <= n <= hi:
            return False, v
        return True, str(n)
    return True, v
