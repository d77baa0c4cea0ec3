"""ProxySQL admin doubles served from a process of their own, behind the in-process double's Python API.

Why: an in-process double answers from a thread of the test process. Under a loaded machine (shards of the
suite on two cores) that thread waits for a core and for the GIL behind the test's own work, and a handshake or
a read now and then misses the product's sub-second deadlines. Here the doubles' event loop runs in a host
process (one per test process, started on first use), so it only competes for a core.

    from lab.proxysql_double.host import ProcessDouble
    with ProcessDouble(port=0, user="admin", password="admin") as d:
        d.port, d.connect_kwargs()
        d.traffic.set_sessions(hostgroup=100, count=4)   # forwarded to the host, answered when applied there
        d.statements(), d.query("SELECT 1"), d.set_mode("hang"), d.restart(), d.status()
        d.engine.log                                       # a copy of a few engine attributes (EngineView)

The host (`python -m lab.proxysql_double.host <fd>`) runs one DoubleServer for every double of its test
process (so ProxySQL Cluster sync between them works as in one process) and answers a tiny RPC on a socket
pair: each request is served in order, on the host's main thread, as a test thread would call the in-process
double. It exits when the socket reaches EOF or its parent is gone (never an orphan).
"""

import atexit
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path

from .server import DoubleServer, ProxySQLDouble

# ---------------------------------------------------------------------------------------------- the host process


def serve(conn):
    """Answer requests until EOF: ("add", kwargs) -> port, ("remove", port), ("call", port, path, args, kwargs),
    ("get", port, path). Each answer is ("ok", value) or ("error", exception)."""
    server = DoubleServer().start_background()
    doubles = {}  # port -> ProxySQLDouble on the shared server
    try:
        while True:
            try:
                request = pickle.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            op, args = request[0], request[1:]
            try:
                if op == "add":
                    d = ProxySQLDouble(server=server, **args[0]).start()
                    doubles[d.port] = d
                    reply = pickle.dumps(("ok", d.port))
                elif op == "remove":
                    d = doubles.pop(args[0], None)
                    if d is not None:
                        d.stop()
                    reply = pickle.dumps(("ok", None))
                elif op == "call":
                    port, path, a, kw = args
                    reply = pickle.dumps(("ok", _resolve(doubles[port], path)(*a, **kw)))
                elif op == "get":  # an attribute read: copied under the engines' lock (the loop changes them)
                    port, path = args
                    d = doubles[port]
                    with d.engine.lock:
                        reply = pickle.dumps(("ok", _resolve(d, path)))
                else:
                    raise ValueError(f"unknown request {op!r}")
            except Exception as e:
                try:
                    reply = pickle.dumps(("error", e))
                except Exception:  # an exception that does not pickle still says what it was
                    reply = pickle.dumps(("error", RuntimeError(repr(e))))
            conn.send_bytes(reply)
    finally:
        server.stop()


def _resolve(obj, path):
    for name in path:
        obj = getattr(obj, name)
    return obj


def _exit_with_parent(parent):
    """The parent's death closes the socket (EOF) unless a forked child of it holds it too: then this catches it."""
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(0)


def main(argv):
    fd, parent = int(argv[1]), int(argv[2])
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    serve(Connection(fd))


# ---------------------------------------------------------------------------------------------- the test process


class Host:
    """The host process and the client end of its socket; calls from several threads are served one at a time."""

    def __init__(self):
        mine, theirs = socket.socketpair()
        root = Path(__file__).resolve().parents[2]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "lab.proxysql_double.host", str(theirs.fileno()), str(os.getpid())],
            cwd=root,
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.conn = Connection(mine.detach())
        self.lock = threading.Lock()

    def ask(self, *request):
        with self.lock:
            self.conn.send_bytes(pickle.dumps(request))
            status, value = pickle.loads(self.conn.recv_bytes())
        if status == "error":
            raise value
        return value

    def close(self):
        self.conn.close()  # EOF: the host stops its doubles and exits
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


_host = None
_host_lock = threading.Lock()


def host():
    """This process's host, started on first use (and again if it died)."""
    global _host
    with _host_lock:
        if _host is None or _host.process.poll() is not None:
            _host = Host()
            atexit.register(_host.close)
        return _host


class _Forward:
    """`double.traffic.<method>(...)`: every attribute is a method run on the host's object at `path`."""

    def __init__(self, double, path):
        self._double = double
        self._path = path

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)  # internals (locks, private state) stay in the host: use an in-process double
        return lambda *args, **kwargs: self._double._call(*self._path, name, args=args, kwargs=kwargs)


class EngineView:
    """The few engine attributes tests read, each a copy taken in the host under the engines' lock."""

    def __init__(self, double):
        self._double = double

    @property
    def port(self):
        return self._double.port

    @property
    def host(self):
        return self._double.host

    @property
    def log(self):
        return self._double._get("engine", "log")

    @property
    def log_seq(self):
        return self._double._get("engine", "log_seq")

    @property
    def mode(self):
        return self._double._get("engine", "mode")

    @property
    def checksums(self):
        return self._double._get("engine", "checksums")

    @property
    def sync_history(self):
        return self._double._get("engine", "sync_history")

    @property
    def servers_history(self):
        return self._double._get("engine", "servers_history")


class ProcessDouble:
    """server.ProxySQLDouble's API (the constructor's arguments but `server`, the handy accessors) for a double
    served by the host process."""

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
        self.requested_port = port
        self.version = version
        self.user = user
        self.password = password
        self.host = host
        self.datadir = datadir
        self.variables = variables
        self.seed = seed
        self._port = None
        self._host = None

    def start(self):
        if self._port is not None:
            return self
        self._host = host()
        kwargs = dict(
            port=self.requested_port,
            user=self.user,
            password=self.password,
            host=self.host,
            datadir=self.datadir,
            variables=self.variables,
            seed=self.seed,
            version=self.version,
        )
        self._port = self._host.ask("add", kwargs)
        return self

    def stop(self):
        if self._port is None:
            return
        try:
            self._host.ask("remove", self._port)
        finally:
            self._port = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _call(self, *path, args=(), kwargs=None):
        return self._host.ask("call", self._port, path, args, kwargs or {})

    def _get(self, *path):
        return self._host.ask("get", self._port, path)

    @property
    def port(self):
        return self._port

    @property
    def traffic(self):
        return _Forward(self, ("traffic",))

    @property
    def engine(self):
        return EngineView(self)

    def connect_kwargs(self, **extra):
        kw = {"host": self.host, "port": self.port, "user": self.user, "passwd": self.password, "connect_timeout": 5}
        kw.update(extra)
        return kw


def _forwarded(name):
    """ProxySQLDouble.<name> called in the host: the same arguments, its answer or its exception."""

    def call(self, *args, **kwargs):
        return self._call(name, args=args, kwargs=kwargs)

    call.__name__, call.__doc__ = name, getattr(ProxySQLDouble, name).__doc__
    return call


for _name in ProxySQLDouble.ACCESSORS:
    setattr(ProcessDouble, _name, _forwarded(_name))


if __name__ == "__main__":
    main(sys.argv)
