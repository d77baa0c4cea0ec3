"""Network side of the ProxySQL admin double (lab double): one asyncio loop serving many endpoints.

`DoubleServer` runs the loop (in a background thread, or in the foreground for the CLI) and serves
any number of independent endpoints, each an `engine.AdminEngine` on its own TCP port. There is no
thread and no timer per endpoint: an idle endpoint is a listening socket and an SQLite database.

`ProxySQLDouble` is the in-process handle tests use: one endpoint, on its own background server
unless one is shared.
"""

import asyncio
import itertools
import logging
import socket
import threading
import time

from . import engine as engine_mod
from . import protocol as p

log = logging.getLogger("lab.proxysql_double")
_conn_ids = itertools.count(1)


class Endpoint:
    def __init__(self, engine):
        self.engine = engine
        self.server = None  # asyncio.Server while listening
        self.writers = set()
        self.closed = False


class DoubleServer:
    """Serves several ProxySQL admin doubles from one asyncio event loop."""

    def __init__(self):
        self.loop = None
        self.thread = None
        self.endpoints = {}  # port -> Endpoint
        self.pending = []  # (what, future) of mode changes scheduled on the loop, for settle()
        self._pending_lock = threading.Lock()  # engines call in from their own threads
        self._ready = threading.Event()

    # ------------------------------------------------------------------ lifecycle
    def start_background(self):
        """Run the loop in a daemon thread; returns when it is ready."""
        if self.thread is not None:
            return self

        def run():
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            self._ready.set()
            self.loop.run_forever()
            self.loop.close()

        self.thread = threading.Thread(target=run, name="proxysql-double", daemon=True)
        self.thread.start()
        self._ready.wait()
        return self

    def call(self, coro, timeout=30):
        """Run a coroutine on the server loop from another thread and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def add_endpoint(self, port=0, **kwargs):
        """Create and start one endpoint (blocking; from any thread but the loop's)."""
        return self.call(self.add(port=port, **kwargs))

    def remove_endpoint(self, engine):
        self.call(self.remove(engine))

    def stop(self):
        if self.loop is None:
            return
        if self.thread is not None and threading.current_thread() is not self.thread:
            try:
                self.call(self.close_all(), timeout=10)
            finally:
                self.loop.call_soon_threadsafe(self.loop.stop)
                self.thread.join(timeout=10)
                self.thread = None

    # ------------------------------------------------------------------ coroutines (loop thread)
    async def add(
        self,
        port=0,
        host="127.0.0.1",
        user="admin",
        password="admin",
        datadir=None,
        variables=None,
        seed=None,
        datadir_per_port=False,
        version=None,
    ):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        bound = sock.getsockname()[1]
        if datadir and datadir_per_port:
            datadir = f"{datadir.rstrip('/')}/{bound}"
        eng = engine_mod.AdminEngine(
            port=bound,
            user=user,
            password=password,
            host=host,
            datadir=datadir,
            variables=variables,
            seed=seed,
            version=version,
        )
        ep = Endpoint(eng)
        eng.mode_listeners.append(self._on_engine_event)
        ep.server = await asyncio.start_server(lambda r, w: self._serve(ep, r, w), sock=sock, backlog=128)
        self.endpoints[bound] = ep
        engine_mod.REGISTRY[(engine_mod._norm_host(host), bound)] = eng
        return eng

    async def remove(self, eng):
        ep = self.endpoints.pop(eng.port, None)
        engine_mod.REGISTRY.pop((engine_mod._norm_host(eng.host), eng.port), None)
        if ep is None:
            return
        ep.closed = True
        if ep.server is not None:
            ep.server.close()
            ep.server = None
        for w in list(ep.writers):
            w.close()
        eng.close()

    async def close_all(self):
        for ep in list(self.endpoints.values()):
            await self.remove(ep.engine)

    def _on_engine_event(self, eng, what):
        # called under the engine lock, from any thread: hop onto the loop; settle() waits for it (a mode set from a
        # test must have closed or opened the listening socket before the test's next connect, even under load)
        if threading.current_thread() is self.thread:
            fut = asyncio.ensure_future(self._apply_event(eng, what))
        else:
            fut = asyncio.run_coroutine_threadsafe(self._apply_event(eng, what), self.loop)
        with self._pending_lock:
            self.pending = [(w, f) for w, f in self.pending if not f.done()] + [(what, fut)]

    def settle(self, timeout=10):
        """Wait until every mode change so far is applied to its endpoint (from any thread but the loop's)."""
        if threading.current_thread() is self.thread:
            return
        with self._pending_lock:
            waiting, self.pending = self.pending, []
        for _, fut in waiting:
            if isinstance(fut, asyncio.Future):  # scheduled from the loop thread itself (a LAB command on the wire)
                self.call(asyncio.wait_for(asyncio.shield(fut), timeout), timeout)
            else:
                fut.result(timeout)

    async def settled(self):
        """On the loop: wait until every mode change so far is applied (a LAB SET_MODE answers after it took effect;
        a LAB DROP_CONNECTIONS still answers before its own connection is closed)."""
        with self._pending_lock:
            waiting = [f for what, f in self.pending if what == "mode" and not f.done()]
        for fut in waiting:
            await (asyncio.shield(fut) if isinstance(fut, asyncio.Future) else asyncio.wrap_future(fut))

    async def _apply_event(self, eng, what):
        ep = self.endpoints.get(eng.port)
        if ep is None or ep.closed:
            return
        if what == "drop":
            for w in list(ep.writers):
                w.close()
            return
        if eng.mode == "refuse" and ep.server is not None:
            ep.server.close()  # connect() now gets ECONNREFUSED
            ep.server = None
        elif eng.mode != "refuse" and ep.server is None:
            ep.server = await asyncio.start_server(
                lambda r, w: self._serve(ep, r, w), host=eng.host, port=eng.port, reuse_address=True, backlog=128
            )

    # ------------------------------------------------------------------ one client connection
    async def _serve(self, ep, reader, writer):
        eng = ep.engine
        ep.writers.add(writer)
        try:
            if eng.mode == "hang":
                # accept the TCP connection, never say a word (a stuck ProxySQL)
                while await reader.read(65536):
                    pass
                return
            await self._session(ep, eng, reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            ep.writers.discard(writer)
            try:
                writer.close()
            except Exception:
                pass

    async def _session(self, ep, eng, reader, writer):
        conn_id = next(_conn_ids)
        scramble = p.new_scramble()
        w = p.PacketWriter(0)
        w.packet(p.handshake_v10(conn_id, scramble, eng.server_version()))
        writer.write(w.take())
        seq, payload = await _read_packet(reader)
        resp = p.parse_handshake_response(payload)
        token = resp["auth"]
        nseq = seq + 1
        if resp["plugin"] and resp["plugin"] != p.NATIVE_PLUGIN:
            w = p.PacketWriter(nseq)
            w.packet(p.auth_switch_request(scramble))
            writer.write(w.take())
            seq, token = await _read_packet(reader)
            nseq = seq + 1
        user = resp["user"]
        with eng.lock:
            creds = eng.credentials()
        w = p.PacketWriter(nseq)
        if user not in creds or not p.native_password_ok(creds[user], scramble, token):
            peer = (writer.get_extra_info("peername") or ("127.0.0.1",))[0]
            w.err(
                1045,
                f"ProxySQL Admin Error: Access denied for user '{user}'@'{peer}' "
                f"(using password: {'YES' if token else 'NO'})",
                "28000",
            )
            writer.write(w.take())
            await writer.drain()
            return
        w.ok()
        writer.write(w.take())
        while True:
            seq, payload = await _read_packet(reader)
            if not payload:
                continue
            cmd = payload[0]
            w = p.PacketWriter(seq + 1)
            if cmd == p.COM_QUIT:
                return
            if cmd == p.COM_QUERY:
                sql = payload[1:].decode("utf-8", "replace")
                is_lab = engine_mod.LAB_RE.match(sql) is not None
                if not is_lab:
                    eng.holds_until_resumed(sql)
                    while eng.mode == "hang" and not ep.closed:
                        await asyncio.sleep(0.05)  # a stuck ProxySQL: no answer, no error
                    if eng.latency_ms:
                        await asyncio.sleep(eng.latency_ms / 1000.0)
                res = eng.execute(sql, conn_id)
                if is_lab:
                    await self.settled()
                while not is_lab and eng.mode == "hang" and not ep.closed:
                    await asyncio.sleep(0.05)  # paused after applying it: the answer waits
                if res.error:
                    w.err(res.error[0], res.error[1], engine_mod.ERR_STATE)
                elif res.columns is not None:
                    w.result_set(res.columns, res.rows)
                else:
                    w.ok(affected=res.affected, info=p.lenenc_str(res.info.encode()) if res.info else b"")
            elif cmd in (p.COM_PING, p.COM_INIT_DB, p.COM_RESET_CONNECTION):
                w.ok()
            elif cmd == p.COM_SET_OPTION:
                w.eof()
            elif cmd == p.COM_FIELD_LIST:
                w.eof()
            elif cmd == p.COM_STATISTICS:
                w.packet(f"Uptime: {int(time.time() - eng.started_wall)}  Threads: 1  Questions: 0".encode())
            else:
                w.err(1047, "ProxySQL Admin Error: Unknown command", "08S01")
            writer.write(w.take())
            if writer.transport.get_write_buffer_size() > 1 << 20:
                await writer.drain()


async def _read_packet(reader):
    """One logical packet (joins 16 MiB continuation packets); returns (last seq, payload)."""
    payload = b""
    while True:
        head = await reader.readexactly(4)
        n = head[0] | head[1] << 8 | head[2] << 16
        seq = head[3]
        payload += await reader.readexactly(n) if n else b""
        if n < p.MAX_PAYLOAD:
            return seq, payload


class ProxySQLDouble:
    """One ProxySQL admin double endpoint for in-process use (tests, scripts).

        with ProxySQLDouble(port=0, user="admin", password="admin") as d:
            d.port                      # the bound port
            d.traffic.set_sessions(hostgroup=100, count=4, pinned_reason="auto_increment")
            d.statements()              # what clients sent, in order
        # or d.start() ... d.stop()

    `server=` shares one DoubleServer (one loop thread) between many doubles.
    """

    def __init__(
        self,
        port=0,
        user="admin",
        password="admin",
        host="127.0.0.1",
        datadir=None,
        variables=None,
        seed=None,
        server=None,
        version=None,
    ):
        self.requested_port = port
        self.version = version  # the ProxySQL version it answers as: 2.5, 2.6, 2.7 (default) or 3.0
        self.user = user
        self.password = password
        self.host = host
        self.datadir = datadir
        self.variables = variables
        self.seed = seed
        self._server = server
        self._own_server = server is None
        self.engine = None

    def start(self):
        if self.engine is not None:
            return self
        if self._server is None:
            self._server = DoubleServer().start_background()
        self.engine = self._server.add_endpoint(
            port=self.requested_port,
            host=self.host,
            user=self.user,
            password=self.password,
            datadir=self.datadir,
            variables=self.variables,
            seed=self.seed,
            version=self.version,
        )
        log.info("ProxySQL admin lab double listening on %s:%d", self.host, self.port)
        return self

    def stop(self):
        if self.engine is None:
            return
        try:
            self._server.remove_endpoint(self.engine)
        finally:
            self.engine = None
            if self._own_server:
                self._server.stop()
                self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # ------------------------------------------------------------------ handy accessors
    # the methods a double in the host process (host.ProcessDouble) forwards there, each by this name
    ACCESSORS = ("statements", "clear_statements", "set_mode", "drop_connections", "restart", "status", "query")

    @property
    def port(self):
        return self.engine.port

    @property
    def traffic(self):
        """The traffic model (see traffic.TrafficModel for its knobs)."""
        return self.engine.traffic

    def connect_kwargs(self, **extra):
        """Keyword arguments for MySQLdb.connect()."""
        kw = {"host": self.host, "port": self.port, "user": self.user, "passwd": self.password, "connect_timeout": 5}
        kw.update(extra)
        return kw

    def statements(self, since=0):
        """The SQL statements received over the wire, in order (LAB statements excluded)."""
        return self.engine.statements(since)

    def clear_statements(self):
        with self.engine.lock:
            self.engine.log.clear()

    def set_mode(self, mode, latency_ms=None):
        """normal | hang (accept TCP, never answer) | refuse (connection refused); latency per query."""
        from . import lab_commands

        args = {"mode": mode}
        if latency_ms is not None:
            args["latency_ms"] = latency_ms
        result = lab_commands.dispatch(self.engine, "set_mode", args)
        self._server.settle()
        return result

    def drop_connections(self):
        from . import lab_commands

        result = lab_commands.dispatch(self.engine, "drop_connections", {})
        self._server.settle()
        return result

    def restart(self):
        self.engine.restart()

    def status(self):
        from . import lab_commands

        return lab_commands.status(self.engine)

    def query(self, sql):
        """Run a statement in-process (no wire): (columns, rows) or raises RuntimeError."""
        res = self.engine.execute(sql, conn_id=0)
        if res.error:
            raise RuntimeError(res.error[1])
        rows = None
        if res.rows is not None:
            rows = [
                tuple(
                    v
                    if v is None or isinstance(v, (str, bytes))
                    else (p.sqlite_float_text(v) if isinstance(v, float) else str(v))
                    for v in r
                )
                for r in res.rows
            ]
        return res.columns, rows
