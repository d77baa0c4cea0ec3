"""A mysqlclient connection whose connect and every query are bounded by sub-second deadlines.

mysqlclient only takes whole seconds for its timeouts, so they serve as a backstop only: the connect
runs on a short-lived thread we stop waiting for at the deadline, and a query is sent, then its
answer is awaited with poll() on the socket (not select(): a worker polling a fleet holds more than
FD_SETSIZE = 1024 sockets, and select() refuses a descriptor numbered above that). A timed-out
connection is closed (its stream is out of step), and the next call reconnects.

Stored passwords go only to a server that proves it knows them: the client library (MariaDB Connector/C) would
run any authentication plugin the server asks for, mysql_clear_password included (the password in clear, to any
host an operator pointed a poller at). Every connection reads restricted_auth.cnf, which limits it to
ALLOWED_AUTH_PLUGINS (Connector/C's restricted-auth option, which mysqlclient does not expose otherwise); a server
asking for another plugin gets nothing and the call fails with AuthFailed saying so. With a CA (`tls_ca`, PEM) the
connection is TLS, the server's certificate and host name verified against it, or none; there, and only there, the
plugins that hand the password to the server are allowed too (TLS_AUTH_PLUGINS): it is the server we verified.
With the CA and `tls_verify=False` (a cluster's choice) the connection is TLS or none, but any certificate is taken:
encrypted, not proved, so only ALLOWED_AUTH_PLUGINS.
"""

import functools
import hashlib
import math
import select
import socket
import tempfile
import threading
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import ClassVar, TypedDict

import MySQLdb
from MySQLdb.connections import Connection

# mysqlclient error codes that mean "we could not talk to it" rather than "it refused the statement".
_UNREACHABLE_CODES = {2002, 2003, 2005, 2006, 2013, 2055}
_AUTH_CODES = {1044, 1045, 1698}
_PLUGIN_NOT_ALLOWED = 5010  # Connector/C: the plugin the server asked for is not in restricted-auth
ALLOWED_AUTH_PLUGINS = ("mysql_native_password", "client_ed25519")
TLS_AUTH_PLUGINS = ALLOWED_AUTH_PLUGINS + ("mysql_clear_password", "caching_sha2_password", "sha256_password")


def checked_option_file(path: Path) -> str:
    """`path` if it restricts both groups as ALLOWED_AUTH_PLUGINS and TLS_AUTH_PLUGINS say. Connector/C ignores a
    missing or unreadable option file, and the restriction with it, without a word: so this raises instead."""
    text = Path(path).read_text()
    for group, plugins in (("controlplane", ALLOWED_AUTH_PLUGINS), ("controlplane-verified-tls", TLS_AUTH_PLUGINS)):
        if f"[{group}]\nrestricted-auth={','.join(plugins)}\n" not in text:
            raise RuntimeError(f"{path}: group [{group}] must restrict the auth plugins to {', '.join(plugins)}")
    return str(path)


AUTH_OPTIONS = {
    "read_default_file": checked_option_file(Path(__file__).with_name("restricted_auth.cnf")),
    "read_default_group": "controlplane",
}
TLS_AUTH_OPTIONS = {**AUTH_OPTIONS, "read_default_group": "controlplane-verified-tls"}
_TLS_CODES = {2026}  # CR_SSL_CONNECTION_ERROR: no TLS offered, or a certificate that does not verify
# The server demands TLS and we came without (MySQL's require_secure_transport: 3159; MariaDB's: 1941).
_TLS_DEMANDED_CODES = {3159, 1941}


@functools.cache
def _ca_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix="controlplane-ca-"))  # private: mode 0700


@functools.cache
def ca_file(pem: str) -> str:
    """A file holding this CA (Connector/C reads CAs from files): one per distinct CA."""
    path = _ca_folder() / f"{hashlib.sha256(pem.encode()).hexdigest()}.pem"
    path.write_text(pem)
    return str(path)


PLUGIN_REFUSED = (
    "the server asked for an authentication plugin that is not allowed without verified TLS: refused, "
    f"the password was not sent (allowed: {', '.join(ALLOWED_AUTH_PLUGINS)}; mysql_clear_password "
    "would send it in clear, dialog, sha256_password and caching_sha2_password's full authentication "
    "hand it to the server)"
)
PLUGIN_REFUSED_TLS = (
    "the server asked for an authentication plugin that is not allowed: refused, the password was "
    f"not sent (allowed over verified TLS: {', '.join(TLS_AUTH_PLUGINS)})"
)


class ClientError(Exception):
    """A failed call to a ProxySQL node or a backend: which node, what we tried, what happened.

    `retryable` is True when the same call may succeed later (timeout, unreachable), False when it
    will fail again until something is changed (wrong password, statement rejected, unexpected schema).
    """

    kind: ClassVar[str] = "error"

    def __init__(
        self, node: str, action: str, message: str, *, retryable: bool = False, code: int | None = None
    ) -> None:
        self.node = node
        self.action = action
        self.message = message
        self.retryable = retryable
        self.code = code
        super().__init__(f"{node}: {action}: {message}")


class Unreachable(ClientError):
    kind = "unreachable"


class Timeout(ClientError):
    kind = "timeout"


class AuthFailed(ClientError):
    kind = "auth"


class Rejected(ClientError):
    """The server answered with an error for this statement (syntax, constraint, unknown table...)."""

    kind = "rejected"


class TLSFailed(ClientError):
    """TLS was required (a CA was given) and could not be set up: no TLS offered, or a certificate that does not
    verify against the CA. Nothing was sent."""

    kind = "tls"


class NotAllowed(ClientError):
    """The host is outside the cluster's credential hosts (credential_hosts.py): no connection was opened and no
    credential sent."""

    kind = "not_allowed"


class UnexpectedResult(ClientError):
    """The server answered, but not with the columns or values we know how to read."""

    kind = "unexpected"


def tcp_host(host: str) -> str:
    """The host to dial. libmysqlclient takes `localhost` for its local Unix socket and ignores the port;
    every connection of this product goes over TCP to the port it was given, so `localhost` is 127.0.0.1."""
    return "127.0.0.1" if str(host).rstrip(".").lower() == "localhost" else host


# One value of a row as mysqlclient's default conversions give it: a text column is str (bytes where the server sends
# it binary), a number int, float or Decimal, a date or time its datetime type (the text when it is not a valid one),
# NULL None. ProxySQL's admin sends every column as text (str | bytes | None: proxysql.AdminValue).
Value = str | bytes | int | float | Decimal | datetime | date | timedelta | None
Row = tuple[Value, ...]


class TLSOptions(TypedDict):
    """A cluster's TLS for the clients' connections (fleet.Cluster.client_tls(): TimedConnection's keywords)."""

    tls_ca: str | None
    tls_verify: bool


# A statement's parameters, each rendered by the driver's escaping (literal()).
Params = tuple[object, ...]


@dataclass(frozen=True)
class Result:
    columns: list[str]
    rows: list[Row]
    affected: int

    def dicts(self) -> list[dict[str, Value]]:
        return [dict(zip(self.columns, row)) for row in self.rows]


@dataclass
class _Attempt:
    """What the connect thread made: the connection, or the error it met (None, None while it runs)."""

    conn: Connection | None = None
    error: BaseException | None = None


class TimedConnection:
    """One open connection to one server, reconnecting on demand, every call bounded."""

    def __init__(
        self,
        *,
        node: str,
        host: str,
        port: int,
        user: str,
        password: str | None,
        connect_timeout: float,
        read_timeout: float,
        database: str | None = None,
        tls_ca: str | None = None,
        tls_verify: bool = True,
    ) -> None:
        self.node = node
        self.tls_ca = tls_ca or None
        self.tls_verify = bool(tls_verify)  # with a CA: False takes TLS with any certificate (encrypted, not proved)
        self.host = tcp_host(host)
        self.port = int(port)
        self.user = user
        self.password = password
        self.database = database
        self.connect_timeout = float(connect_timeout)
        self.read_timeout = float(read_timeout)
        self._conn: Connection | None = None

    # -- connection -------------------------------------------------------------------------
    def connect(self) -> Connection:
        if self._conn is not None:
            return self._conn
        self._probe_tcp()
        outcome = _Attempt()

        def attempt() -> None:
            try:
                kwargs: dict[str, object] = dict(
                    host=self.host,
                    port=self.port,
                    user=self.user,
                    passwd=self.password or "",
                    connect_timeout=max(1, math.ceil(self.connect_timeout)),
                    read_timeout=max(1, math.ceil(self.read_timeout)),
                    write_timeout=max(1, math.ceil(self.read_timeout)),
                    charset="utf8mb4",
                    autocommit=True,
                )
                if self.tls_ca and self.tls_verify:
                    kwargs.update(TLS_AUTH_OPTIONS, ssl={"ca": ca_file(self.tls_ca)}, ssl_mode="VERIFY_IDENTITY")
                elif self.tls_ca:  # TLS or nothing, the certificate not checked: the plugins of a plain connection
                    # (no CA handed over: Connector/C checks the chain against any CA it is given)
                    kwargs.update(AUTH_OPTIONS, ssl_mode="REQUIRED")
                else:
                    kwargs.update(AUTH_OPTIONS)
                if self.database:
                    kwargs["db"] = self.database
                outcome.conn = MySQLdb.connect(**kwargs)
            except MySQLdb.OperationalError as exc:
                if exc.args and exc.args[0] == _PLUGIN_NOT_ALLOWED:
                    # Only the code is read: after an AuthSwitchRequest Connector/C's message is not text, and
                    # mysqlclient then leaves a NULL in args that crashes the process when it is read.
                    outcome.error = AuthFailed(
                        self.node,
                        "connect",
                        PLUGIN_REFUSED_TLS if self.tls_ca and self.tls_verify else PLUGIN_REFUSED,
                        code=_PLUGIN_NOT_ALLOWED,
                    )
                else:
                    outcome.error = exc
            except BaseException as exc:  # handed to the caller's thread below
                outcome.error = exc

        worker = threading.Thread(target=attempt, name=f"connect {self.node}", daemon=True)
        worker.start()
        worker.join(self.connect_timeout)
        if worker.is_alive():
            # The thread ends by itself within mysqlclient's whole-second backstop; close what it made.
            threading.Thread(target=self._close_late, args=(worker, outcome), daemon=True).start()
            raise Timeout(self.node, "connect", f"no handshake within {self.connect_timeout:g}s", retryable=True)
        if isinstance(outcome.error, ClientError):
            raise outcome.error
        if outcome.error is not None:
            raise self._translate(outcome.error, "connect")
        self._conn = outcome.conn
        return self._conn

    def _probe_tcp(self) -> None:
        """Fail fast (refused, no route, filtered) before the handshake, within the connect timeout."""
        try:
            with socket.create_connection((self.host, self.port), timeout=self.connect_timeout):
                pass
        except socket.timeout:
            raise Timeout(
                self.node, "connect", f"TCP connect timed out after {self.connect_timeout:g}s", retryable=True
            ) from None
        except OSError as exc:
            raise Unreachable(
                self.node, "connect", f"TCP connect failed: {exc.strerror or exc}", retryable=True
            ) from None

    @staticmethod
    def _close_late(worker: threading.Thread, outcome: _Attempt) -> None:
        worker.join()
        conn = outcome.conn
        if conn is not None:
            try:
                conn.close()
            except MySQLdb.Error:
                pass

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except MySQLdb.Error:
                pass
            self._conn = None

    # -- statements --------------------------------------------------------------------------
    def literal(self, value: object) -> str:
        """The driver's escaping of one value, as the connected server wants it (e.g. SQLite-style
        quote doubling on ProxySQL's admin, which announces NO_BACKSLASH_ESCAPES)."""
        conn = self.connect()
        out = conn.literal(value)
        return out.decode("utf-8") if isinstance(out, bytes) else out

    def render(self, sql: str, params: Params = ()) -> str:
        """SQL with %s placeholders filled in by the driver's escaping; never by string formatting."""
        if not params:
            return sql
        return sql % tuple(self.literal(p) for p in params)

    def execute(
        self, sql: str, params: Params = (), *, action: str | None = None, timeout: float | None = None
    ) -> Result:
        action = action or sql.split(None, 1)[0].upper()
        statement = self.render(sql, params)
        conn = self.connect()
        deadline = self.read_timeout if timeout is None else float(timeout)
        try:
            conn.send_query(statement.encode("utf-8"))
            answer = select.poll()
            answer.register(conn.fileno(), select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP)
            if not answer.poll(max(0, math.ceil(deadline * 1000))):
                self.close()
                raise Timeout(self.node, action, f"no answer within {deadline:g}s", retryable=True)
            conn.read_query_result()
            result = conn.store_result()
            if result is None:
                return Result(columns=[], rows=[], affected=conn.affected_rows())
            columns = [d[0] for d in result.describe()]
            rows = list(result.fetch_row(maxrows=0))
            return Result(columns=columns, rows=rows, affected=len(rows))
        except MySQLdb.Error as exc:
            error = self._translate(exc, action)
            if isinstance(error, (Unreachable, Timeout)):
                self.close()
            raise error from None

    def _translate(self, exc: BaseException, action: str) -> ClientError:
        code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
        message = str(exc.args[1]) if len(exc.args) > 1 else str(exc)
        if code in _UNREACHABLE_CODES:
            return Unreachable(self.node, action, message, retryable=True, code=code)
        if code in _TLS_CODES:
            checked = "verified against the CA" if self.tls_verify else "(certificate not verified)"
            return TLSFailed(self.node, action, f"TLS {checked} failed, nothing was sent: {message}", code=code)
        if code in _TLS_DEMANDED_CODES:
            return TLSFailed(
                self.node,
                action,
                "the server demands TLS and this cluster has no CA set: set the "
                f"cluster's TLS CA (cluster page, Connections): {message}",
                code=code,
            )
        if code in _AUTH_CODES and action == "connect":
            return AuthFailed(self.node, action, message, code=code)
        return Rejected(self.node, action, message, code=code)
