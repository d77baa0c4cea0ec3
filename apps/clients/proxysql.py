"""Client for a ProxySQL admin interface (port 6032). One method per statement family we use.

Every value ProxySQL's admin returns is a string; this module converts to typed rows and raises
UnexpectedResult when a column is missing or a value is not what ProxySQL would send.
"""

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar, copy_context
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal, ParamSpec, Protocol, TypeVar, cast

from django.conf import settings
from django.db.models import Model, prefetch_related_objects

from .wire import ClientError, Params, Rejected, Result, TimedConnection, TLSOptions, UnexpectedResult

if TYPE_CHECKING:  # why: the dataclass protocol exists in the type stubs only
    from _typeshed import DataclassInstance

# Modules of LOAD/SAVE statements. Only these strings are ever put into such a statement.
MODULES = (
    "MYSQL SERVERS",
    "MYSQL USERS",
    "MYSQL QUERY RULES",
    "MYSQL VARIABLES",
    "ADMIN VARIABLES",
    "SCHEDULER",
    "PROXYSQL SERVERS",
)
SERVER_STATUSES = ("ONLINE", "SHUNNED", "OFFLINE_SOFT", "OFFLINE_HARD")


class ProxySQLError(ClientError):
    """Base for errors raised by this client (the wire module's classes are used as they are)."""


# One value of an admin row: ProxySQL's admin sends every column as VAR_STRING in a text charset (as the double's
# protocol.py does), so mysqlclient gives str, or None for NULL; the row classes below convert them by annotation.
AdminValue = str | None
AdminRow = tuple[AdminValue, ...]
ServerKey = tuple[int, str, int]  # (hostgroup_id, hostname, port): a mysql_servers row's key
Layer = Literal["runtime", "memory", "disk"]
RowT = TypeVar("RowT", bound="DataclassInstance")
ColumnKind = Literal["int", "int?"] | None  # converted with int(), with int() unless NULL, or kept as sent


def _admin_rows(result: Result) -> list[AdminRow]:
    """The rows of an admin answer as they are: text or NULL (AdminValue)."""
    return cast(list[AdminRow], result.rows)  # why: the admin sends text only (AdminValue); the wire's Value is wider


def _int(value: AdminValue) -> int:
    """int() of an admin value; NULL raises TypeError as int(None) does: garbage to the callers, as a non-number."""
    if value is None:
        raise TypeError("NULL where a number was expected")
    return int(value)


def _admin_dicts(result: Result) -> list[dict[str, AdminValue]]:
    return [dict(zip(result.columns, row)) for row in _admin_rows(result)]


def _typed(cls: type[RowT], row: Mapping[str, AdminValue], node: str, table: str) -> RowT:
    """Build dataclass `cls` from a dict of strings, converting by annotation; strict on garbage."""
    values: dict[str, int | AdminValue] = {}
    for name, kind in _columns(cls):
        if name not in row:
            raise UnexpectedResult(node, f"read {table}", f"column {name!r} missing (got {sorted(row)})")
        raw = row[name]
        if kind is None:
            values[name] = raw
        elif raw is None:
            if kind == "int":
                raise UnexpectedResult(node, f"read {table}", f"{name}=None is not an integer")
            values[name] = None
        else:
            try:
                values[name] = int(raw)
            except ValueError:
                raise UnexpectedResult(node, f"read {table}", f"{name}={raw!r} is not an integer") from None
    return cls(**values)


_column_kinds: dict[type, list[tuple[str, ColumnKind]]] = {}


def _columns(cls: "type[DataclassInstance]") -> list[tuple[str, ColumnKind]]:
    """[(field name, "int" | "int?" | None)] of a row class, worked out once (dataclasses.fields() at every row of
    every poll was a tenth of a poll's CPU)."""
    if cls not in _column_kinds:
        _column_kinds[cls] = [
            (f.name, "int" if f.type is int else "int?" if f.type == _OPTIONAL_INT else None) for f in fields(cls)
        ]
    return _column_kinds[cls]


_OPTIONAL_INT = int | None


@dataclass(frozen=True)
class ServerRow:
    """One row of mysql_servers / runtime_mysql_servers / disk.mysql_servers."""

    hostgroup_id: int
    hostname: str
    port: int
    gtid_port: int
    status: str
    weight: int
    compression: int
    max_connections: int
    max_replication_lag: int
    use_ssl: int
    max_latency_ms: int
    comment: str

    @property
    def key(self) -> ServerKey:
        return (self.hostgroup_id, self.hostname, self.port)


# Fields compared for drift and written by operations (everything but the key).
SERVER_FIELDS = (
    "status",
    "weight",
    "max_connections",
    "max_replication_lag",
    "compression",
    "use_ssl",
    "max_latency_ms",
    "gtid_port",
    "comment",
)
# Statuses ProxySQL sets by itself at runtime (after connection errors), never written by anyone: a
# runtime row with one of them is configured ONLINE. It recovers lazily and per ProxySQL node, and a
# LOAD that changes the row resets it (see ../shared/proxysql-reference/README.md).
RUNTIME_ONLY_STATUSES = ("SHUNNED",)
# A mirror rule's copy runs as a session of ProxySQL's own in stats_mysql_processlist, its client this name with no
# port (measured on 2.7.1: lab/tests/test_real_mirror_processlist.py): no client's session, and not to be killed.
MIRROR_CLIENT = "mirror_internal"
NOT_MIRROR = f"(cli_host IS NULL OR cli_host <> '{MIRROR_CLIENT}')"


def configured_status(status: str) -> str:
    """The status a runtime row was configured with: ProxySQL's own SHUNNED verdict reads as ONLINE."""
    return "ONLINE" if status in RUNTIME_ONLY_STATUSES else status


def configured(row: "ServerRow | Mapping[str, int | str | None]") -> dict[str, int | str | None]:
    """The configuration columns of a mysql_servers row (dict or ServerRow), runtime-only states removed:
    what to compare with memory or the inventory, and what to write back."""
    data: Mapping[str, int | str | None] = row if isinstance(row, dict) else row.__dict__
    values = {f: data[f] for f in SERVER_FIELDS}
    values["status"] = configured_status(str(values["status"]))
    return values


@dataclass(frozen=True)
class GaleraHostgroups:
    writer_hostgroup: int
    backup_writer_hostgroup: int
    reader_hostgroup: int
    offline_hostgroup: int
    active: int
    max_writers: int
    writer_is_also_reader: int
    max_transactions_behind: int
    comment: str | None


@dataclass(frozen=True)
class ReplicationHostgroups:
    writer_hostgroup: int
    reader_hostgroup: int
    check_type: str
    comment: str | None


@dataclass(frozen=True)
class GroupReplicationHostgroups(GaleraHostgroups):
    """mysql_group_replication_hostgroups: the same columns as the Galera table."""


@dataclass(frozen=True)
class ProxySQLPeer:
    hostname: str
    port: int
    weight: int
    comment: str


# ProxySQL Cluster: the modules its native sync carries (2.7 adds mysql_servers_v2, ldap_variables where built with
# LDAP), and the admin variables that say whether and how each one syncs (never the cluster password).
CLUSTER_MODULES = (
    "mysql_servers",
    "mysql_users",
    "mysql_query_rules",
    "mysql_variables",
    "admin_variables",
    "proxysql_servers",
    "ldap_variables",
)
CLUSTER_VARIABLES = (
    "admin-cluster_username",
    "admin-cluster_check_interval_ms",
    "admin-cluster_mysql_servers_sync_algorithm",
    *(f"admin-cluster_{m}_{what}" for m in CLUSTER_MODULES for what in ("diffs_before_sync", "save_to_disk")),
)


@dataclass(frozen=True)
class ModuleChecksum:
    """One row of runtime_checksums_values: a node's own version counter, epoch and checksum of one module."""

    name: str
    version: int
    epoch: int
    checksum: str


@dataclass(frozen=True)
class PeerChecksum:
    """One row of stats_proxysql_servers_checksums: what this node's cluster thread last read from one peer
    (itself included when it lists itself), and for how many checks in a row it differed from its own."""

    hostname: str
    port: int
    name: str
    version: int
    epoch: int
    checksum: str
    changed_at: int
    updated_at: int
    diff_check: int


@dataclass(frozen=True)
class MirrorRule:
    """The mirror-related columns of one mysql_query_rules row."""

    rule_id: int
    active: int
    match_digest: str | None
    match_pattern: str | None
    destination_hostgroup: int | None
    mirror_hostgroup: int | None
    mirror_flagOUT: int | None


@dataclass(frozen=True)
class UserRow:
    """The frontend row of one runtime_mysql_users entry: where that user's queries go when no query
    rule routes them (ProxySQL keeps only active users at runtime). The password is never read."""

    username: str
    active: int
    default_hostgroup: int
    transaction_persistent: int
    fast_forward: int
    comment: str


@dataclass(frozen=True)
class QueryRule:
    """The columns of a runtime_mysql_query_rules row that decide which queries it matches and where it
    sends them (and their mirror)."""

    rule_id: int
    active: int
    username: str | None
    schemaname: str | None
    flagIN: int
    match_digest: str | None
    match_pattern: str | None
    negate_match_pattern: int
    re_modifiers: str | None
    destination_hostgroup: int | None
    mirror_hostgroup: int | None
    mirror_flagOUT: int | None
    apply: int


QUERY_RULE_COLUMNS = ", ".join(f.name for f in fields(QueryRule))


@dataclass(frozen=True)
class PoolRow:
    """One row of stats_mysql_connection_pool."""

    hostgroup: int
    srv_host: str
    srv_port: int
    status: str
    ConnUsed: int
    ConnFree: int
    ConnOK: int
    ConnERR: int
    MaxConnUsed: int
    Queries: int
    Bytes_data_sent: int
    Bytes_data_recv: int
    Latency_us: int


@dataclass(frozen=True, slots=True)
class DigestRow:
    """One row of stats_mysql_query_digest, without digest_text (read apart, see query_digest_texts).

    Counters are cumulative since the digest was first seen or since the last reset of the table
    (a read of stats_mysql_query_digest_reset, which this client never does) or ProxySQL's start.
    Times are in microseconds; first_seen/last_seen are the node's clock (epoch seconds).
    """

    hostgroup: int
    schemaname: str
    username: str
    client_address: str
    digest: str
    count_star: int
    first_seen: int
    last_seen: int
    sum_time: int
    min_time: int
    max_time: int
    sum_rows_affected: int = 0
    sum_rows_sent: int = 0

    @property
    def key(self) -> tuple[int, str, str, str, str]:
        return (self.hostgroup, self.schemaname, self.username, self.client_address, self.digest)


DIGEST_COLUMNS = (
    "hostgroup",
    "schemaname",
    "username",
    "client_address",
    "digest",
    "count_star",
    "first_seen",
    "last_seen",
    "sum_time",
    "min_time",
    "max_time",
    "sum_rows_affected",
    "sum_rows_sent",
)


@dataclass(frozen=True)
class UserConnections:
    """stats_mysql_users: a frontend user's client connections against its mysql_users.max_connections."""

    username: str
    frontend_connections: int
    frontend_max_connections: int


@dataclass(frozen=True)
class ErrorRow:
    """stats_mysql_errors: errors met on backends, counted per hostgroup, server, user, schema and errno."""

    hostgroup: int
    hostname: str
    port: int
    username: str
    client_address: str
    schemaname: str
    errno: int
    count_star: int
    first_seen: int
    last_seen: int
    last_error: str


@dataclass(frozen=True)
class CommandCounter:
    """stats_mysql_commands_counters: queries of one command (SELECT, INSERT...) and their total time."""

    Command: str
    Total_Time_us: int
    Total_cnt: int


class HasTLS(Protocol):
    def client_tls(self) -> TLSOptions: ...


class AdminEndpoint(Protocol):
    """A ProxySQL node as this client reads it (fleet.ProxySQLNode: clients sit below fleet, so named by shape)."""

    @property
    def pk(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def admin_host(self) -> str: ...
    @property
    def admin_port(self) -> int: ...
    @property
    def admin_user(self) -> str: ...
    @property
    def admin_password(self) -> str: ...
    @property
    def cluster_id(self) -> int | None: ...
    @property
    def cluster(self) -> HasTLS: ...


class ProxySQLAdmin:
    """An admin connection to one ProxySQL node. Use as a context manager, or call close()."""

    def __init__(
        self,
        host: str,
        port: int,
        user: str,
        password: str | None,
        *,
        name: str | None = None,
        connect_timeout: float | None = None,
        read_timeout: float | None = None,
        tls_ca: str | None = None,
        tls_verify: bool = True,
    ) -> None:
        self.name = name or f"proxysql {host}:{port}"
        self.wire = TimedConnection(
            node=self.name,
            host=host,
            port=port,
            user=user,
            password=password,
            connect_timeout=connect_timeout or settings.PROXYSQL_CONNECT_TIMEOUT,
            read_timeout=read_timeout or settings.PROXYSQL_READ_TIMEOUT,
            tls_ca=tls_ca,  # a CA (PEM): TLS, verified against it, or no connection
            tls_verify=tls_verify,  # with the CA: False takes TLS with any certificate
        )

    @classmethod
    def for_node(
        cls, node: AdminEndpoint, *, connect_timeout: float | None = None, read_timeout: float | None = None
    ) -> "ProxySQLAdmin":
        """Client for a fleet.ProxySQLNode (decrypts its password only here), with its cluster's TLS setting (none for
        a node of no cluster yet: an adoption's unsaved node)."""
        tls: TLSOptions = (
            node.cluster.client_tls() if node.cluster_id is not None else {"tls_ca": None, "tls_verify": True}
        )
        return cls(
            node.admin_host,
            node.admin_port,
            node.admin_user,
            node.admin_password,
            name=f"ProxySQL {node.name} ({node.admin_host}:{node.admin_port})",
            **tls,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )

    @property
    def endpoint(self) -> tuple[str, int]:
        """(host, port) this client connects to."""
        return self.wire.host, self.wire.port

    def __enter__(self) -> "ProxySQLAdmin":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.wire.close()

    # -- generic -----------------------------------------------------------------------------
    def ping(self) -> None:
        self.wire.execute("SELECT 1", action="ping")

    def version(self) -> str:
        rows = _admin_rows(self.wire.execute("SELECT @@version", action="read version"))
        if not rows or not rows[0] or rows[0][0] is None:  # a server that answers OK without a row is no ProxySQL admin
            raise UnexpectedResult(self.name, "read version", "no version in the answer to SELECT @@version")
        return rows[0][0]

    def run(self, sql: str, params: Params = (), *, action: str | None = None) -> Result:
        """Run one admin statement (already vetted by the caller's plan). Returns the wire Result."""
        return self.wire.execute(sql, params, action=action)

    def render(self, sql: str, params: Params = ()) -> str:
        """The exact text run() would send: what plans show in their preview."""
        return self.wire.render(sql, params)

    def _select(self, sql: str, cls: type[RowT], table: str, params: Params = ()) -> list[RowT]:
        result = self.wire.execute(sql, params, action=f"read {table}")
        return [_typed(cls, row, self.name, table) for row in _admin_dicts(result)]

    def _pairs(self, sql: str, table: str, params: Params = ()) -> dict[str, str]:
        """{name: value} of a two-column read whose columns are NOT NULL (global variables, stats_mysql_global)."""
        pairs = {}
        for name, value in _admin_rows(self.wire.execute(sql, params, action=f"read {table}")):
            if name is None or value is None:
                raise UnexpectedResult(self.name, f"read {table}", f"NULL in a name and value row: {name!r}={value!r}")
            pairs[name] = value
        return pairs

    def _table_or_empty(self, sql: str, cls: type[RowT], table: str) -> list[RowT]:
        """Tables that older ProxySQL versions lack read as empty rather than failing the caller."""
        try:
            return self._select(sql, cls, table)
        except Rejected as exc:
            if "no such table" in exc.message:
                return []
            raise

    # -- mysql_servers and friends ----------------------------------------------------------
    def servers(self, layer: Layer = "runtime") -> list[ServerRow]:
        table = {"runtime": "runtime_mysql_servers", "memory": "mysql_servers", "disk": "disk.mysql_servers"}[layer]
        return self._select(f"SELECT * FROM {table} ORDER BY hostgroup_id, hostname, port", ServerRow, table)

    def galera_hostgroups(self, runtime: bool = True) -> list[GaleraHostgroups]:
        table = "runtime_mysql_galera_hostgroups" if runtime else "mysql_galera_hostgroups"
        return self._table_or_empty(f"SELECT * FROM {table}", GaleraHostgroups, table)

    def replication_hostgroups(self, runtime: bool = True) -> list[ReplicationHostgroups]:
        table = "runtime_mysql_replication_hostgroups" if runtime else "mysql_replication_hostgroups"
        return self._table_or_empty(f"SELECT * FROM {table}", ReplicationHostgroups, table)

    def group_replication_hostgroups(self, runtime: bool = True) -> list[GroupReplicationHostgroups]:
        table = "runtime_mysql_group_replication_hostgroups" if runtime else "mysql_group_replication_hostgroups"
        return self._table_or_empty(f"SELECT * FROM {table}", GroupReplicationHostgroups, table)

    def proxysql_servers(self) -> list[ProxySQLPeer]:
        return self._select(
            "SELECT hostname, port, weight, comment FROM runtime_proxysql_servers",
            ProxySQLPeer,
            "runtime_proxysql_servers",
        )

    def checksums(self) -> list[ModuleChecksum]:
        """runtime_checksums_values: this node's version, epoch and checksum per module."""
        return self._select(
            "SELECT name, version, epoch, checksum FROM runtime_checksums_values ORDER BY name",
            ModuleChecksum,
            "runtime_checksums_values",
        )

    def peer_checksums(self) -> list[PeerChecksum]:
        """stats_proxysql_servers_checksums: each peer's checksums as this node's cluster thread last read them."""
        return self._select(
            "SELECT hostname, port, name, version, epoch, checksum, changed_at, updated_at, diff_check"
            " FROM stats_proxysql_servers_checksums ORDER BY hostname, port, name",
            PeerChecksum,
            "stats_proxysql_servers_checksums",
        )

    def mirror_rules(self) -> list[MirrorRule]:
        return self._select(
            "SELECT rule_id, active, match_digest, match_pattern, destination_hostgroup, mirror_hostgroup,"
            " mirror_flagOUT FROM runtime_mysql_query_rules"
            " WHERE mirror_hostgroup IS NOT NULL OR mirror_flagOUT IS NOT NULL ORDER BY rule_id",
            MirrorRule,
            "runtime_mysql_query_rules",
        )

    def mirroring_rules(self) -> list[QueryRule]:
        """The runtime rules that mirror (mirror_hostgroup or mirror_flagOUT set), and the rules that send
        queries to one of their mirror hostgroups (whose executions there are not mirrored copies)."""
        table = "runtime_mysql_query_rules"
        return self._select(
            f"SELECT {QUERY_RULE_COLUMNS} FROM {table}"
            f" WHERE mirror_hostgroup IS NOT NULL OR mirror_flagOUT IS NOT NULL OR destination_hostgroup IN"
            f" (SELECT mirror_hostgroup FROM {table} WHERE mirror_hostgroup IS NOT NULL) ORDER BY rule_id",
            QueryRule,
            table,
        )

    def query_rule_hits(self, rule_ids: Iterable[int]) -> dict[int, int]:
        """{rule_id: hits} from stats_mysql_query_rules for these rules (cumulative since the rules were
        last loaded to runtime: a LOAD MYSQL QUERY RULES TO RUNTIME starts every counter at 0)."""
        ids = sorted({int(r) for r in rule_ids})
        if not ids:
            return {}
        table = "stats_mysql_query_rules"
        result = self.wire.execute(
            f"SELECT rule_id, hits FROM {table} WHERE rule_id IN ({','.join(['%s'] * len(ids))})",
            tuple(ids),
            action=f"read {table}",
        )
        try:
            return {_int(rule_id): _int(hits) for rule_id, hits in _admin_rows(result)}
        except (TypeError, ValueError):
            raise UnexpectedResult(self.name, f"read {table}", f"not a hits row: {result.rows!r}") from None

    def users(self) -> list[UserRow]:
        return self._select(
            "SELECT username, active, default_hostgroup, transaction_persistent, fast_forward, comment"
            " FROM runtime_mysql_users WHERE frontend=1 ORDER BY username",
            UserRow,
            "runtime_mysql_users",
        )

    def query_rules(self) -> list[QueryRule]:
        table = "runtime_mysql_query_rules"
        return self._select(f"SELECT {QUERY_RULE_COLUMNS} FROM {table} ORDER BY rule_id", QueryRule, table)

    def global_variables(self, names: Iterable[str], layer: Layer = "runtime") -> dict[str, str]:
        table = {"runtime": "runtime_global_variables", "memory": "global_variables", "disk": "disk.global_variables"}[
            layer
        ]
        names = tuple(names)
        placeholders = ",".join(["%s"] * len(names))
        return self._pairs(
            f"SELECT variable_name, variable_value FROM {table} WHERE variable_name IN ({placeholders})", table, names
        )

    def config_rows(
        self, table: str, columns: Iterable[str], key: Iterable[str], layer: Layer = "runtime"
    ) -> list[dict[str, AdminValue]]:
        """Every row of a configuration table (mysql_users, mysql_query_rules, scheduler...) in one layer, as
        dicts of the strings ProxySQL sends. `table`, `columns` and `key` come from the caller's constants
        (apps.configuration.tables), never from input; a table whose columns differ is UnexpectedResult."""
        name = {"runtime": f"runtime_{table}", "memory": table, "disk": f"disk.{table}"}[layer]
        columns = tuple(columns)
        result = self.wire.execute(
            f"SELECT {', '.join(columns)} FROM {name} ORDER BY {', '.join(key)}", action=f"read {name}"
        )
        if tuple(result.columns) != tuple(columns):
            raise UnexpectedResult(self.name, f"read {name}", f"columns {result.columns!r}")
        return _admin_dicts(result)

    def all_variables(self, layer: Layer = "runtime") -> dict[str, str]:
        """{variable_name: value} for every global variable of one layer (memory, runtime or disk)."""
        table = {"runtime": "runtime_global_variables", "memory": "global_variables", "disk": "disk.global_variables"}[
            layer
        ]
        return self._pairs(f"SELECT variable_name, variable_value FROM {table}", table)

    # -- stats -------------------------------------------------------------------------------
    def connection_pool(self) -> list[PoolRow]:
        return self._select("SELECT * FROM stats_mysql_connection_pool", PoolRow, "stats_mysql_connection_pool")

    def stats_global(self) -> dict[str, str]:
        return self._pairs("SELECT Variable_Name, Variable_Value FROM stats_mysql_global", "stats_mysql_global")

    def query_digest(self, *, timeout: float | None = None) -> list[DigestRow]:
        """Every row of stats_mysql_query_digest (cumulative counters), as DigestRow.

        Never reads stats_mysql_query_digest_reset: that would zero the counters other tools rely on.
        A node with many digests builds its answer before sending it: `timeout` (seconds) bounds
        the wait for the first byte instead of the client's default read timeout.
        """
        table = "stats_mysql_query_digest"
        result = self.wire.execute(
            f"SELECT {', '.join(DIGEST_COLUMNS)} FROM {table}", action=f"read {table}", timeout=timeout
        )
        if tuple(result.columns) != DIGEST_COLUMNS:
            raise UnexpectedResult(self.name, f"read {table}", f"columns {result.columns!r}")
        rows: list[DigestRow] = []
        try:
            for hg, schema, user, client, digest, *figures in _admin_rows(result):
                if not digest:
                    raise ValueError(digest)
                # A NULL hostgroup or figure is garbage as a non-number is: int() raises (TypeError), caught below.
                numbers = [int(n) for n in (hg, *figures)]  # type: ignore[arg-type]  # why: the line above
                rows.append(DigestRow(numbers[0], schema or "", user or "", client or "", digest, *numbers[1:]))
        except (TypeError, ValueError):
            raise UnexpectedResult(
                self.name, f"read {table}", f"not a digest row: {result.rows[len(rows)]!r}"
            ) from None
        return rows

    def query_digest_texts(
        self, digests: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, str]:
        """{digest: digest_text} for these digest hashes (all when None), read in chunks."""
        table = "stats_mysql_query_digest"
        wanted = None if digests is None else sorted(set(digests))
        chunks: list[list[str] | None] = (
            [None] if wanted is None else [wanted[i : i + 500] for i in range(0, len(wanted), 500)]
        )
        texts: dict[str, str] = {}
        for chunk in chunks:
            where, params = (
                ("", ()) if chunk is None else (f" WHERE digest IN ({','.join(['%s'] * len(chunk))})", chunk)
            )
            result = self.wire.execute(
                f"SELECT digest, digest_text FROM {table}{where}",
                tuple(params),
                action=f"read {table} texts",
                timeout=timeout,
            )
            for digest, text in _admin_rows(result):
                if digest is not None:  # digest is the table's key, never NULL
                    texts.setdefault(digest, text or "")
        return texts

    def conn_used(self, hostgroup: int, hostname: str, port: int) -> int:
        """The drain probe: ConnUsed of one server in one hostgroup (0 when the row is gone)."""
        result = self.wire.execute(
            "SELECT IFNULL(SUM(ConnUsed),0) FROM stats_mysql_connection_pool"
            " WHERE hostgroup=%s AND srv_host=%s AND srv_port=%s",
            (int(hostgroup), hostname, int(port)),
            action="read ConnUsed",
        )
        try:
            return _int(_admin_rows(result)[0][0])
        except (IndexError, TypeError, ValueError):
            raise UnexpectedResult(self.name, "read ConnUsed", f"unexpected answer {result.rows!r}") from None

    def processlist(self, session_id: int | None = None) -> list[dict[str, object]]:
        """stats_mysql_processlist (one session's row with `session_id`) as dicts; `extended_info` parsed from JSON when ProxySQL fills it
        (mysql-show_processlist_extended=1 or 2), else None."""
        one = session_id is not None  # `if session_id` read every session for id 0 (its first row described session 1)
        result = self.wire.execute(
            "SELECT * FROM stats_mysql_processlist" + (" WHERE SessionID=%s" if one else ""),
            (int(session_id),) if session_id is not None else (),
            action="read stats_mysql_processlist",
        )
        rows: list[dict[str, object]] = []
        for sent in _admin_dicts(result):
            row: dict[str, object] = dict(sent)
            info = sent.get("extended_info")
            try:
                row["extended_info"] = json.loads(info) if info else None
            except ValueError:
                row["extended_info"] = None  # an unreadable blob is not worth failing the page for
            for field in ("SessionID", "hostgroup", "srv_port", "time_ms", "cli_port"):
                value = sent.get(field)
                row[field] = int(value) if value else None  # NULL or '': None
            rows.append(row)
        return rows

    def running_queries(self, limit: int) -> list[tuple[int, str, str, str, int | None, int, str]]:
        """[(hostgroup, user, db, srv_host, srv_port, time_ms, info)] of the sessions running a query now (the longest
        running first, at most `limit`): ProxySQL's only example of a digest's real text (info, literals included).
        A mirror rule's copy runs as a session of its own whose client is 'mirror_internal' (measured on 2.7.1,
        lab/tests/test_real_mirror_processlist.py): not the application's query, left out."""
        result = self.wire.execute(
            "SELECT hostgroup, user, db, srv_host, srv_port, time_ms, info FROM"
            " stats_mysql_processlist WHERE info IS NOT NULL AND command IN ('Query', 'Execute')"
            f" AND {NOT_MIRROR}"
            " ORDER BY time_ms DESC LIMIT %s",
            (int(limit),),
            action="read stats_mysql_processlist",
        )
        try:
            return [
                (
                    _int(hg),
                    user or "",
                    db or "",
                    host or "",
                    int(port) if port else None,
                    int(ms or 0),
                    str(info),
                )
                for hg, user, db, host, port, ms, info in _admin_rows(result)
            ]
        except (TypeError, ValueError):
            raise UnexpectedResult(self.name, "read stats_mysql_processlist", f"{result.rows[:3]!r}") from None

    def user_connections(self) -> list[UserConnections]:
        return self._select(
            "SELECT username, frontend_connections, frontend_max_connections FROM stats_mysql_users ORDER BY username",
            UserConnections,
            "stats_mysql_users",
        )

    def backend_errors(self, limit: int) -> list[ErrorRow]:
        """The `limit` most frequent rows of stats_mysql_errors (reading the table does not reset it)."""
        return self._select(
            "SELECT * FROM stats_mysql_errors ORDER BY count_star DESC, last_seen DESC LIMIT %s",
            ErrorRow,
            "stats_mysql_errors",
            (int(limit),),
        )

    def error_totals(self) -> list[tuple[int, int, int]]:
        """[(hostgroup, errno, count)]: every row of stats_mysql_errors summed by ProxySQL (a few rows)."""
        result = self.wire.execute(
            "SELECT hostgroup, errno, SUM(count_star) FROM stats_mysql_errors"
            " GROUP BY hostgroup, errno ORDER BY hostgroup, errno",
            action="read stats_mysql_errors",
        )
        try:
            return [(_int(hg), _int(errno), _int(n)) for hg, errno, n in _admin_rows(result)]
        except (TypeError, ValueError):
            raise UnexpectedResult(self.name, "read stats_mysql_errors", f"{result.rows!r}") from None

    def command_counters(self) -> list[CommandCounter]:
        """The commands ProxySQL has seen at least once (most of its ~60 rows stay at 0)."""
        return self._select(
            "SELECT Command, Total_Time_us, Total_cnt FROM stats_mysql_commands_counters"
            " WHERE Total_cnt > 0 ORDER BY Command",
            CommandCounter,
            "stats_mysql_commands_counters",
        )

    def session_counts(self) -> dict[str, tuple[int, int]]:
        """{command: (sessions, longest time_ms)} of the client sessions in stats_mysql_processlist, counted by
        ProxySQL: a poll reads a few rows however many sessions there are. Mirror copies (ProxySQL's own sessions,
        MIRROR_CLIENT) are no client's: left out."""
        result = self.wire.execute(
            f"SELECT command, COUNT(*), MAX(time_ms) FROM stats_mysql_processlist WHERE {NOT_MIRROR} GROUP BY command",
            action="read stats_mysql_processlist",
        )
        try:
            return {command or "": (_int(n), int(longest or 0)) for command, n, longest in _admin_rows(result)}
        except (TypeError, ValueError):
            raise UnexpectedResult(self.name, "read stats_mysql_processlist", f"{result.rows!r}") from None

    # -- writes ------------------------------------------------------------------------------
    def kill_connection(self, session_id: int) -> None:
        """Close one client session (its SessionID in stats_mysql_processlist), as ProxySQL's admin takes it."""
        self.wire.execute(f"KILL CONNECTION {int(session_id)}", action="kill a client session")

    def load_to_runtime(self, module: str) -> None:
        self._check_module(module)
        self.wire.execute(f"LOAD {module} TO RUNTIME", action=f"load {module.lower()} to runtime")

    def save_to_disk(self, module: str) -> None:
        self._check_module(module)
        self.wire.execute(f"SAVE {module} TO DISK", action=f"save {module.lower()} to disk")

    @staticmethod
    def _check_module(module: str) -> None:
        if module not in MODULES:
            raise ValueError(f"unknown ProxySQL module {module!r}")


# Open admin connections on_each_node() may use instead of opening its own: {node_id: ProxySQLAdmin}.
_open_connections: ContextVar[Mapping[int, ProxySQLAdmin]] = ContextVar("open_admin_connections", default={})


@contextmanager
def reusing(connections: Mapping[int, ProxySQLAdmin]) -> Iterator[None]:
    """Inside, on_each_node() reads through these open connections (an executor re-checking its plan with
    the connections its steps will use: no second connect per node)."""
    token = _open_connections.set(connections)
    try:
        yield
    finally:
        _open_connections.reset(token)


@contextmanager
def node_admin(node: AdminEndpoint) -> Iterator[ProxySQLAdmin]:
    """An admin connection to this node: the open one reusing() gave for it (left open: its owner closes it, and
    an earlier connect that failed is tried again on it), else a new one closed at the end. A planner reads through
    this, so an executor's re-check at start makes no second handshake per node."""
    connections = _open_connections.get()
    if node.pk in connections:
        yield connections[node.pk]
        return
    with ProxySQLAdmin.for_node(node) as admin:
        yield admin


P = ParamSpec("P")
T = TypeVar("T")
NodeT = TypeVar("NodeT", bound=AdminEndpoint)


def in_this_context(fn: Callable[P, T]) -> Callable[P, T]:
    """fn to run on a pool thread as if on this one: with the open connections reusing() gave here (a pool thread
    starts with a context of its own)."""
    context = copy_context()

    def run(*args: P.args, **kwargs: P.kwargs) -> T:
        return context.copy().run(fn, *args, **kwargs)  # a copy per call: calls may run at once

    return run


def with_clusters(nodes: Iterable[NodeT]) -> list[NodeT]:
    """The nodes (a list), each with its cluster loaded, in one query for those without: for_node reads the cluster's
    TLS setting, and the threads that open the connections must not touch the database."""
    nodes = list(nodes)
    with_cluster: list[object] = [n for n in nodes if n.cluster_id is not None]
    prefetch_related_objects([n for n in with_cluster if isinstance(n, Model)], "cluster")  # ProxySQLNode rows
    return nodes


def on_each_node(
    nodes: Iterable[NodeT], read: Callable[[NodeT, ProxySQLAdmin], T]
) -> list[tuple[NodeT, T | None, ClientError | None]]:
    """read(node, admin) on every ProxySQL node at once, each on its own admin connection: a list of
    (node, result, None) or (node, None, ClientError), in the nodes' order. One node that does not
    answer costs one timeout, not one per node. `read` runs on another thread: no database in it."""
    nodes = with_clusters(nodes)

    @in_this_context
    def one(node: NodeT) -> tuple[NodeT, T | None, ClientError | None]:
        try:
            with node_admin(node) as admin:
                return node, read(node, admin), None
        except ClientError as exc:
            return node, None, exc

    if not nodes:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(nodes)), thread_name_prefix="proxysql-read") as pool:
        return list(pool.map(one, nodes))
