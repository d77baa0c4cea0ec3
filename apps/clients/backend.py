"""Client for backend MySQL/MariaDB nodes, with the cluster's monitor credentials.

Reads wsrep status and variables, read_only and replica status; the few writes an operation needs
(read_only, wsrep_desync). Galera-only figures are None on a node that is not a Galera node.
"""

import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Protocol

from django.conf import settings

from .credential_hosts import credentials_allowed
from .wire import NotAllowed, Params, Rejected, Result, Row, TimedConnection, TLSOptions, UnexpectedResult, Value

_STATUS_NAMES = (
    "wsrep_local_state",
    "wsrep_local_state_comment",
    "wsrep_cluster_status",
    "wsrep_cluster_size",
    "wsrep_ready",
    "wsrep_local_recv_queue",
    "wsrep_flow_control_paused",
    "wsrep_last_committed",
    "wsrep_connected",
    "wsrep_cluster_state_uuid",
    "wsrep_flow_control_paused_ns",
    "wsrep_flow_control_sent",
)
_VARIABLE_NAMES = (
    "wsrep_on",
    "wsrep_desync",
    "wsrep_sync_wait",
    "wsrep_reject_queries",
    "read_only",
    "pxc_maint_mode",
    "version",
)


@dataclass(frozen=True)
class NodeState:
    """What a backend says about itself. Galera fields are None when the node is not a Galera node."""

    version: str
    read_only: bool
    wsrep_on: bool
    local_state: int | None = None
    local_state_comment: str | None = None
    cluster_status: str | None = None
    cluster_size: int | None = None
    ready: bool | None = None
    local_recv_queue: int | None = None
    flow_control_paused: float | None = None
    # Cumulative nanoseconds replication was paused by flow control, and flow-control messages this node
    # sent (it asked the others to wait): a window's share comes from two readings.
    flow_control_paused_ns: int | None = None
    flow_control_sent: int | None = None
    last_committed: int | None = None
    desync: bool | None = None
    sync_wait: int | None = None
    reject_queries: str | None = None
    pxc_maint_mode: str | None = None  # only on Percona XtraDB Cluster
    cluster_state_uuid: str | None = None  # the same on every node of one Galera cluster

    @property
    def synced_primary(self) -> bool:
        return self.local_state == 4 and self.cluster_status == "Primary" and bool(self.ready)


ReplicaStatus = dict[str, Value]  # SHOW REPLICA STATUS: column -> value (names as the server says them)


# MySQL 8.0.22 renamed SHOW REPLICA STATUS's columns (Source_Host, Replica_IO_Running, Seconds_Behind_Source...);
# MariaDB, whose replication this product drives, keeps the old ones, which every reader of a ReplicaStatus uses.
_OLD_WORDS = {"Source": "Master", "Replica": "Slave"}


def replica_status_names(row: ReplicaStatus) -> ReplicaStatus:
    """A SHOW REPLICA STATUS row with MySQL 8.0.22's column names read as the old ones (Master_Host,
    Slave_IO_Running, Seconds_Behind_Master); word by word, so that Replicate_Do_DB stays as it is."""
    return {"_".join(_OLD_WORDS.get(word, word) for word in name.split("_")): v for name, v in row.items()}


def _text(value: Value) -> str | None:
    """A value read as text (SHOW's columns, a @@variable): bytes decoded, a number written out, NULL None."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _int(value: Value) -> int:
    """A value read as a whole number; ValueError for NULL, a date or a time (garbage, as a non-number is)."""
    if value is None or isinstance(value, (date, timedelta)):
        raise ValueError(f"not a number: {value!r}")
    return int(value)


def _int_or_none(value: Value) -> int | None:
    return None if value in (None, "") else _int(value)


def _on(value: Value) -> bool:
    return str(value).upper() in ("ON", "1", "TRUE", "YES")


class ServerTarget(Protocol):
    """A backend as for_server() reads it (fleet.Server: clients sit below fleet, so named by shape)."""

    @property
    def hostname(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def cluster(self) -> "MonitoredCluster": ...


class MonitoredCluster(Protocol):
    """The backend's cluster (fleet.Cluster): its monitor credentials, credential hosts and TLS."""

    @property
    def credential_hosts(self) -> str: ...
    @property
    def monitor_user(self) -> str: ...
    @property
    def monitor_password(self) -> str: ...
    def client_tls(self) -> TLSOptions: ...


class BackendClient:
    """A monitor connection to one backend node. Use as a context manager, or call close()."""

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
        self.name = name or f"backend {host}:{port}"
        self.wire = TimedConnection(
            node=self.name,
            host=host,
            port=port,
            user=user,
            password=password,
            connect_timeout=connect_timeout or settings.BACKEND_CONNECT_TIMEOUT,
            read_timeout=read_timeout or settings.BACKEND_READ_TIMEOUT,
            tls_ca=tls_ca,  # a CA (PEM): TLS, verified against it, or no connection
            tls_verify=tls_verify,  # with the CA: False takes TLS with any certificate
        )

    @classmethod
    def for_server(
        cls, server: ServerTarget, *, connect_timeout: float | None = None, read_timeout: float | None = None
    ) -> "BackendClient":
        """Client for a fleet.Server with its cluster's monitor credentials; NotAllowed, before any connection, for
        a host outside the cluster's credential hosts (an empty setting allows the cluster's own backends, which
        every fleet.Server of it is: no query then)."""
        cluster = server.cluster
        if cluster.credential_hosts:
            allowed, reason = credentials_allowed(cluster, server.hostname, server.port)
            if not allowed:
                raise NotAllowed(f"backend {server.hostname}:{server.port}", "connect", reason)
        return cls(
            server.hostname,
            server.port,
            cluster.monitor_user,
            cluster.monitor_password,
            name=f"backend {server.hostname}:{server.port}",
            **cluster.client_tls(),
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
        )

    def __enter__(self) -> "BackendClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.wire.close()

    def _pairs(self, sql: str, names: tuple[str, ...], action: str) -> dict[str, str | None]:
        """{variable name in lower case: its value as text} of SHOW GLOBAL STATUS / VARIABLES."""
        placeholders = ",".join(["%s"] * len(names))
        result = self.wire.execute(f"{sql} WHERE Variable_name IN ({placeholders})", names, action=action)
        return {str(_text(k)).lower(): _text(v) for k, v in result.rows}

    def state(self) -> NodeState:
        status = self._pairs("SHOW GLOBAL STATUS", _STATUS_NAMES, "read wsrep status")
        variables = self._pairs("SHOW GLOBAL VARIABLES", _VARIABLE_NAMES, "read variables")
        try:
            wsrep_on = _on(variables.get("wsrep_on", "OFF")) and "wsrep_local_state" in status
            state = NodeState(
                version=variables.get("version") or "",
                read_only=_on(variables.get("read_only", "OFF")),
                wsrep_on=wsrep_on,
                pxc_maint_mode=variables.get("pxc_maint_mode"),
            )
            if not wsrep_on:
                return state
            return NodeState(
                version=state.version,
                read_only=state.read_only,
                wsrep_on=True,
                pxc_maint_mode=state.pxc_maint_mode,
                local_state=_int(status["wsrep_local_state"]),
                local_state_comment=status.get("wsrep_local_state_comment"),
                cluster_status=status.get("wsrep_cluster_status"),
                cluster_size=int(status.get("wsrep_cluster_size") or 0),
                ready=_on(status.get("wsrep_ready", "OFF")),
                local_recv_queue=int(status.get("wsrep_local_recv_queue") or 0),
                flow_control_paused=float(status.get("wsrep_flow_control_paused") or 0),
                flow_control_paused_ns=_int_or_none(status.get("wsrep_flow_control_paused_ns")),
                flow_control_sent=_int_or_none(status.get("wsrep_flow_control_sent")),
                last_committed=int(status.get("wsrep_last_committed") or 0),
                desync=_on(variables.get("wsrep_desync", "OFF")),
                sync_wait=int(variables.get("wsrep_sync_wait") or 0),
                reject_queries=variables.get("wsrep_reject_queries"),
                cluster_state_uuid=status.get("wsrep_cluster_state_uuid"),
            )
        except (KeyError, ValueError) as exc:
            raise UnexpectedResult(self.name, "read wsrep status", f"unreadable value: {exc}") from None

    def ping(self) -> None:
        """Open the connection now (and check it answers)."""
        self.wire.execute("SELECT 1", action="ping")

    def open_idle(self) -> tuple[int, int]:
        """Open the connection and leave it idle: (its socket's file descriptor, the server's id for it). The writer
        watch (operations/writer_watch.py) waits on the socket: nothing is sent on an idle connection, so it turns
        readable only when the server closes it (its process died, a KILL). Idle is its purpose: the session's
        wait_timeout goes to its maximum (a year), lest a short server default close it every few minutes."""
        self.wire.execute("SET SESSION wait_timeout = 31536000", action="keep an idle connection")
        rows = self.wire.execute("SELECT CONNECTION_ID()", action="read connection id").rows
        return self.wire.connect().fileno(), _int(rows[0][0])

    def last_committed(self) -> int | None:
        """wsrep_last_committed alone (None when not a Galera node): the catch-up's probe, one light query."""
        value = self._pairs("SHOW GLOBAL STATUS", ("wsrep_last_committed",), "read wsrep_last_committed").get(
            "wsrep_last_committed"
        )
        try:
            return None if value is None else int(value)
        except ValueError:
            raise UnexpectedResult(self.name, "read wsrep_last_committed", f"unreadable value {value!r}") from None

    def view_addresses(self) -> list[str]:
        """The client addresses (host:port) of the members of this Galera node's current view
        (wsrep_incoming_addresses); [] on a node that is not a Galera node."""
        value = (
            self._pairs("SHOW GLOBAL STATUS", ("wsrep_incoming_addresses",), "read the view's members").get(
                "wsrep_incoming_addresses"
            )
            or ""
        )
        return [address.strip() for address in str(value).split(",") if address.strip()]

    def can_reset_replica(self) -> bool:
        """Does this connection's user hold what RESET SLAVE ALL needs (RELOAD, or every privilege on *.*)? A move's
        rollback removes a new replica's channel with it."""
        grants = [str(_text(r[0])).upper() for r in self.wire.execute("SHOW GRANTS", action="read its grants").rows]
        return any(
            g.startswith("GRANT ") and " ON *.* " in g and ("RELOAD" in g or "ALL PRIVILEGES" in g) for g in grants
        )

    def read_only(self) -> bool:
        return _on(self.wire.execute("SELECT @@global.read_only", action="read read_only").rows[0][0])

    def replica_status(self) -> ReplicaStatus | None:
        """SHOW REPLICA STATUS as a dict, or None when the node is not a replica."""
        try:
            result = self.wire.execute("SHOW REPLICA STATUS", action="read replica status")
        except Rejected:
            result = self.wire.execute("SHOW SLAVE STATUS", action="read replica status")
        rows = result.dicts()
        return replica_status_names(rows[0]) if rows else None

    def set_read_only(self, on: bool) -> None:
        self.wire.execute("SET GLOBAL read_only=%s", ("ON" if on else "OFF",), action="set read_only")

    # -- async replication (MariaDB GTID) and group replication ---------------------------------
    def gtid_binlog_pos(self) -> str:
        return _text(self.wire.execute("SELECT @@gtid_binlog_pos", action="read gtid_binlog_pos").rows[0][0]) or ""

    def wait_for_gtid(self, position: str, timeout_s: float) -> bool:
        """MASTER_GTID_WAIT: True when this replica applied `position` within the timeout."""
        result = self.wire.execute(
            "SELECT MASTER_GTID_WAIT(%s, %s)",
            (position, float(timeout_s)),
            action="wait for GTID",
            timeout=float(timeout_s) + self.wire.read_timeout,
        )
        return str(result.rows[0][0]) == "0"

    def stop_replication(self, reset: bool = False) -> None:
        self.wire.execute("STOP SLAVE", action="stop replication")
        if reset:
            self.wire.execute("RESET SLAVE ALL", action="reset replication")

    def replicate_from(self, host: str, port: int, user: str, password: str) -> None:
        """Point this node at a new primary by GTID and start replicating."""
        self.wire.execute("STOP SLAVE", action="stop replication")
        self.wire.execute(
            "CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
            "MASTER_USE_GTID=slave_pos",
            (host, int(port), user, password),
            action="change primary",
        )
        self.wire.execute("START SLAVE", action="start replication")

    def take_own_binlog_as_replica_position(self) -> None:
        """On a primary about to become a replica: start from what it wrote itself, not from an empty
        position (which would ask the new primary for its whole history)."""
        self.wire.execute("SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos", action="set gtid_slave_pos")

    def server_uuid(self) -> str:
        uuid = _text(self.wire.execute("SELECT @@server_uuid", action="read server_uuid").rows[0][0])
        if not uuid:
            raise UnexpectedResult(self.name, "read server_uuid", f"no server_uuid: {uuid!r}")
        return uuid

    def group_replication_set_as_primary(self, member_uuid: str) -> None:
        """MySQL 8 Group Replication: make `member_uuid` the primary (single-primary mode)."""
        self.wire.execute(
            "SELECT group_replication_set_as_primary(%s)", (member_uuid,), action="group_replication_set_as_primary"
        )

    def set_wsrep_desync(self, on: bool) -> None:
        self.wire.execute("SET GLOBAL wsrep_desync=%s", ("ON" if on else "OFF",), action="set wsrep_desync")

    # -- disaster-recovery channels (apps/dr) -------------------------------------------------------
    def channel(self, mysql: bool = False) -> "ChannelRead":
        """The default replication connection as this node sees it, with its GTID positions (on MySQL, which has
        no gtid_slave_pos, both are its gtid_executed)."""
        status = self.replica_status() or {}
        read = (
            "SELECT @@global.gtid_executed, @@global.gtid_executed"
            if mysql
            else "SELECT @@global.gtid_slave_pos, @@global.gtid_binlog_pos"
        )
        slave_pos, binlog_pos = self.wire.execute(read, action="read GTID positions").rows[0]
        behind = status.get("Seconds_Behind_Master")

        def text(column: str) -> str:
            return _text(status.get(column)) or ""

        return ChannelRead(
            source_host=text("Master_Host"),
            source_port=_int_or_none(status.get("Master_Port")),
            io_running=text("Slave_IO_Running"),
            sql_running=text("Slave_SQL_Running"),
            seconds_behind=_int_or_none(behind),
            last_io_errno=_int_or_none(status.get("Last_IO_Errno")) or 0,
            last_io_error=text("Last_IO_Error"),
            last_sql_errno=_int_or_none(status.get("Last_SQL_Errno")) or 0,
            last_sql_error=text("Last_SQL_Error"),
            gtid_io_pos=text("Gtid_IO_Pos"),
            gtid_slave_pos=_text(slave_pos) or "",
            gtid_binlog_pos=_text(binlog_pos) or "",
        )

    def native_sources(self, channel: str = "") -> tuple[bool, list[tuple[str, int, int]]]:
        """MySQL 8.0.22+: (SOURCE_CONNECTION_AUTO_FAILOVER on, [(host, port, weight)] of the channel's source list)."""
        rows = self.wire.execute(
            "SELECT HOST, PORT, WEIGHT FROM performance_schema.replication_asynchronous_connection_failover "
            "WHERE CHANNEL_NAME = %s ORDER BY WEIGHT DESC, HOST, PORT",
            (channel,),
            action="read source list",
        ).rows
        on = self.wire.execute(
            "SELECT SOURCE_CONNECTION_AUTO_FAILOVER FROM performance_schema."
            "replication_connection_configuration WHERE CHANNEL_NAME = %s",
            (channel,),
            action="read source failover",
        ).rows
        return bool(on and _on(on[0][0])), [(_text(h) or "", _int(p), _int(w)) for h, p, w in rows]

    def gtid_origin(self) -> tuple[int, str]:
        """(the GTID domain this node's cluster writes in, its gtid_binlog_pos): wsrep_gtid_domain_id on a
        Galera node with wsrep_gtid_mode, else gtid_domain_id."""
        wsrep_on, gtid_mode, wsrep_domain, own_domain, binlog_pos = self.wire.execute(
            "SELECT @@global.wsrep_on, @@global.wsrep_gtid_mode, @@global.wsrep_gtid_domain_id, "
            "@@global.gtid_domain_id, @@global.gtid_binlog_pos",
            action="read GTID domain",
        ).rows[0]
        domain = wsrep_domain if _on(wsrep_on) and _on(gtid_mode) else own_domain
        return _int(domain), _text(binlog_pos) or ""

    def applied_position(self) -> str:
        """gtid_binlog_pos once this Galera node has applied every write-set its cluster ordered before the
        read (wsrep_sync_wait=1 makes the SHOW wait causally): what the cluster as a whole has committed."""
        self.wire.execute("SET SESSION wsrep_sync_wait=1", action="causal read")
        try:
            rows = self.wire.execute("SHOW GLOBAL VARIABLES LIKE 'gtid_binlog_pos'", action="read gtid_binlog_pos").rows
        finally:
            self.wire.execute("SET SESSION wsrep_sync_wait=0", action="causal read")
        return (_text(rows[0][1]) if rows else "") or ""

    def render(self, sql: str, params: Params = ()) -> str:
        """The exact text run() sends: what a plan shows for a backend statement."""
        return self.wire.render(sql, params)

    def run(self, sql: str, *, action: str) -> Result:
        """One statement of a stored plan, as rendered by render()."""
        return self.wire.execute(sql, action=action)

    # Privileges that let a user only read (and see what runs): anything else and the EXPLAIN user is not read-only.
    READ_ONLY_PRIVILEGES = frozenset(
        {
            "SELECT",
            "SHOW VIEW",
            "USAGE",
            "PROCESS",
            "SHOW DATABASES",
            "REPLICATION CLIENT",
            "BINLOG MONITOR",
            "SLAVE MONITOR",
            "REPLICA MONITOR",
        }
    )

    def write_privileges(self) -> list[str]:
        """The privileges of the connected user beyond reading (SHOW GRANTS), e.g. ["INSERT ON `shop`.*"]; a grant
        this cannot read (a role, PROXY) counts as one."""
        found = []
        for (value,) in self.wire.execute("SHOW GRANTS", action="read grants").rows:
            line = value.decode() if isinstance(value, bytes) else str(value)
            match = re.match(r"GRANT (.+?) ON (\S+) TO ", line)
            if match is None:
                found.append(line.split(" TO ")[0])
                continue
            found += [
                f"{p.strip()} ON {match.group(2)}"
                for p in match.group(1).split(",")
                if p.strip().upper() not in self.READ_ONLY_PRIVILEGES
            ]
        return found

    def explain(self, sql: str, schema: str, limit_s: float) -> tuple[list[str], list[Row]]:
        """EXPLAIN one SELECT in `schema` (its caller checked it is one statement, a SELECT), in a read-only transaction,
        cut by the server after `limit_s` seconds (MariaDB's max_statement_time) and by this client's read deadline
        one second later: (columns, rows)."""
        if schema:
            self.wire.execute("USE `" + schema.replace("`", "``") + "`", action="use schema")
        self.wire.execute("START TRANSACTION READ ONLY", action="read only")  # ended by ROLLBACK or the close
        result = self.wire.execute(
            f"SET STATEMENT max_statement_time={float(limit_s):g} FOR EXPLAIN {sql}",
            action="explain",
            timeout=float(limit_s) + 1,
        )
        self.wire.execute("ROLLBACK", action="read only")
        return result.columns, [
            tuple(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in row) for row in result.rows
        ]


@dataclass(frozen=True)
class ChannelRead:
    """SHOW SLAVE STATUS (default connection) plus the node's GTID positions; source_host is '' when the
    node has no replication configured."""

    source_host: str
    source_port: int | None
    io_running: str
    sql_running: str
    seconds_behind: int | None
    last_io_errno: int
    last_io_error: str
    last_sql_errno: int
    last_sql_error: str
    gtid_io_pos: str
    gtid_slave_pos: str
    gtid_binlog_pos: str

    @property
    def running(self) -> bool:
        return self.io_running == "Yes" and self.sql_running == "Yes"
