"""Shared plumbing for the local MariaDB labs (Galera cluster and standalone server).

Everything here works on *our* processes only: a server is tracked by the pid file we write when we
spawn it, and a pid is only believed when that process is a live (non-zombie) mariadbd whose command
line names our own defaults file. Nothing here ever signals a process by name.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import logging
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

import psutil

REPO_ROOT = Path(__file__).resolve().parent.parent


def lab_set() -> str | None:
    """LAB_SET=NAME: this process (and what it starts) uses the lab set NAME, every lab of which (Galera,
    replication, DR, Django's MariaDB, named ones and their slot and lease files) lives under var/lab-NAME/
    instead of var/lab/, on the same ports. Two sets therefore run at once only in separate network
    namespaces: bin/test runs each test pass in its own (the tests name the labs' default ports)."""
    name = os.environ.get("LAB_SET", "").strip() or None
    if name is not None and not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"LAB_SET is letters, digits, - and _, got {name!r}")
    return name


# Resolved, as every lab's base_dir is (var/ may be a symlink, e.g. shared by git worktrees).
LAB_VAR = (REPO_ROOT / "var" / (f"lab-{lab_set()}" if lab_set() else "lab")).resolve()

log = logging.getLogger("lab")


class LabError(RuntimeError):
    """A lab operation failed; the message says what and (when known) includes the server's log tail."""


# --------------------------------------------------------------------------------------------------
# binaries and OS user


def find_binary(name: str, *fallbacks: str) -> str:
    for candidate in (name, *fallbacks):
        path = shutil.which(candidate) or shutil.which(candidate, path="/usr/sbin:/usr/bin:/sbin:/bin")
        if path:
            return path
    raise LabError(f"{name} not found; install mariadb-server (bin/setup does it)")


def server_binary() -> str:
    return find_binary("mariadbd", "mysqld")


def install_db_binary() -> str:
    return find_binary("mariadb-install-db", "mysql_install_db")


def server_os_user() -> str | None:
    """The OS user the servers run as: `mysql` when we are root (rsync SST fails as root), else None
    (run as ourselves)."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("mysql")
    except KeyError:
        raise LabError("running as root but there is no `mysql` OS user; install mariadb-server") from None
    return "mysql"


def socket_auth_user() -> str:
    """The MariaDB account that unix_socket auth maps our OS user to (root@localhost when root)."""
    return pwd.getpwuid(os.geteuid()).pw_name


def chown_tree(path: Path) -> None:
    user = server_os_user()
    if user is None:
        return
    pw = pwd.getpwnam(user)
    for root, dirs, files in os.walk(path):
        os.chown(root, pw.pw_uid, pw.pw_gid)
        for name in files:
            try:
                os.chown(os.path.join(root, name), pw.pw_uid, pw.pw_gid, follow_symlinks=False)
            except FileNotFoundError:
                pass


def check_traversable(path: Path) -> None:
    """The server user must be able to reach its datadir: every parent needs o+x (or be owned)."""
    user = server_os_user()
    if user is None:
        return
    pw = pwd.getpwnam(user)
    for parent in [path, *path.parents]:
        if not parent.exists():
            continue
        st = parent.stat()
        if st.st_uid == pw.pw_uid:
            continue
        if not (st.st_mode & 0o001):
            raise LabError(
                f"{parent} is not traversable by the {user} OS user (mode {oct(st.st_mode)}); "
                f"put the lab somewhere it can reach, e.g. chmod o+x {parent}"
            )


def socket_path_for(preferred: Path, key: str) -> Path:
    """AF_UNIX paths are limited to ~107 bytes; fall back to a short per-lab dir under /tmp."""
    if len(str(preferred)) <= 100:
        return preferred
    short = Path("/tmp") / ("lab-mariadb-" + hashlib.sha1(str(preferred).encode()).hexdigest()[:10])
    return short / f"{key}.sock"


# --------------------------------------------------------------------------------------------------
# processes

# Children spawned by this Python process, so that we can reap them (the VM's init does not reap
# orphans, and a killed child of ours would otherwise stay a zombie until we exit).
_CHILDREN: dict[int, subprocess.Popen] = {}


def _reap() -> None:
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            _CHILDREN.pop(pid, None)


def spawn_server(argv: list[str], output: Path, cwd: Path) -> int:
    """Start a server detached (own session, stdin closed, output to a file) as the server OS user.
    Returns its pid; Popen only returns once the exec succeeded, so the pid is already mariadbd."""
    user = server_os_user()
    kwargs: dict = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    env = dict(os.environ)
    env["PATH"] = env.get("PATH", "") + ":/usr/sbin:/usr/bin:/sbin:/bin"
    if user is not None:
        env["HOME"] = str(cwd)
        env["USER"] = env["LOGNAME"] = user
    with open(output, "ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=str(cwd),
            env=env,
            start_new_session=True,
            close_fds=True,
            **kwargs,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def run_as_server_user(argv: list[str], timeout: float, cwd: Path) -> subprocess.CompletedProcess:
    user = server_os_user()
    kwargs: dict = {}
    if user is not None:
        pw = pwd.getpwnam(user)
        kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
    try:
        return subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, cwd=str(cwd), **kwargs
        )
    except subprocess.TimeoutExpired as exc:
        raise LabError(f"{' '.join(argv[:3])} ... did not finish within {timeout:.0f} s") from exc


def live_process(pid: int | None, marker: str) -> psutil.Process | None:
    """The process `pid` if it is alive, not a zombie, and its command line contains `marker`."""
    if not pid:
        return None
    _reap()
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        if not any(marker in arg for arg in proc.cmdline()):
            return None
        return proc
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return None


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip() or 0) or None
    except (FileNotFoundError, ValueError):
        return None


def processes_under(path: Path) -> list[psutil.Process]:
    """Live mariadbd/rsync/SST-script processes whose command line mentions `path` (our lab's dir).
    Used to make sure nothing of the lab is left behind, never to touch anything else."""
    # The directory itself or a path inside it, never a sibling whose name starts the same (var/lab/galera is not
    # var/lab/galera-NAME, a named lab of its own).
    inside = re.compile(re.escape(str(path).rstrip("/")) + r"(?![\w.-])")
    me = {os.getpid(), os.getppid()}
    found = []
    for proc in psutil.process_iter(["pid", "name", "cmdline", "status"]):
        try:
            if proc.pid in me or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            cmd = proc.info["cmdline"] or []
            name = proc.info["name"] or ""
            joined = " ".join(cmd)
            if not inside.search(joined):
                continue
            if name in ("mariadbd", "mysqld", "rsync") or "wsrep_sst" in joined or "mariadbd" in joined:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _exited(proc: psutil.Process) -> bool:
    """True once every thread of proc is gone. A zombie counts as gone (init on this kind of VM may
    never reap it), unless other threads of it still run (a zombie thread-group leader)."""
    _reap()
    try:
        if proc.status() != psutil.STATUS_ZOMBIE:
            return False
    except psutil.NoSuchProcess:
        return True
    try:
        return len(os.listdir(f"/proc/{proc.pid}/task")) <= 1
    except OSError:
        return True


def wait_gone(proc: psutil.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _exited(proc):
            return True
        time.sleep(0.05)
    return _exited(proc)


def stop_process(proc: psutil.Process, timeout: float) -> str:
    """SIGTERM, wait (bounded), SIGKILL if still there. Returns 'stopped', 'killed' or 'gone'."""
    try:
        proc.send_signal(signal.SIGTERM)
    except psutil.NoSuchProcess:
        return "gone"
    if wait_gone(proc, timeout):
        return "stopped"
    try:
        proc.send_signal(signal.SIGKILL)
    except psutil.NoSuchProcess:
        return "stopped"
    wait_gone(proc, 10)
    return "killed"


def kill_process(proc: psutil.Process, timeout: float = 10) -> None:
    try:
        proc.send_signal(signal.SIGKILL)
    except psutil.NoSuchProcess:
        return
    if not wait_gone(proc, timeout):
        raise LabError(f"pid {proc.pid} still alive {timeout:.0f} s after SIGKILL")


def install_datadir(cnf: Path, datadir: Path, cwd: Path, timeout: float = 180) -> None:
    """`mariadb-install-db` into `datadir` with the settings of `cnf` (root@localhost by unix_socket for
    our OS user, no test db), owned by the server OS user. Raises LabError with the output on failure."""
    datadir.mkdir(parents=True, exist_ok=True)
    chown_tree(cwd)
    argv = [install_db_binary(), f"--defaults-file={cnf}", "--auth-root-authentication-method=socket", "--skip-test-db"]
    user = server_os_user()
    argv.append(f"--user={user}" if user else f"--auth-root-socket-user={socket_auth_user()}")
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=str(cwd), stdin=subprocess.DEVNULL)
    if res.returncode != 0 or not (datadir / "mysql").is_dir():
        raise LabError(
            f"mariadb-install-db into {datadir} failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}"
        )
    chown_tree(cwd)


# --------------------------------------------------------------------------------------------------
# ports


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return True
            raise
    return False


def port_owner(port: int) -> str:
    try:
        for conn in psutil.net_connections("tcp"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid:
                    try:
                        p = psutil.Process(conn.pid)
                        return f"pid {conn.pid} ({' '.join(p.cmdline()[:3])})"
                    except psutil.Error:
                        return f"pid {conn.pid}"
                return "unknown process"
    except psutil.Error:
        pass
    return "unknown process"


def check_ports_free(ports: Iterable[tuple[str, int]]) -> None:
    busy = [f"{what} port {port} is in use by {port_owner(port)}" for what, port in ports if port_in_use(port)]
    if busy:
        raise LabError("; ".join(busy) + " (choose other ports with the LAB_* environment variables)")


# --------------------------------------------------------------------------------------------------
# files


def tail(path: Path, lines: int = 25, since: int = 0) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(since)
            data = fh.read()
    except FileNotFoundError:
        return f"({path} does not exist)"
    text = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(text) if text else f"({path} has nothing new)"


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# --------------------------------------------------------------------------------------------------
# SQL


def connect_tcp(
    host: str, port: int, user: str, password: str, timeout: int = 1, db: str | None = None, autocommit: bool = True
):
    import MySQLdb

    kwargs = dict(
        host=host,
        port=port,
        user=user,
        password=password,
        connect_timeout=timeout,
        read_timeout=max(timeout, 1),
        write_timeout=max(timeout, 1),
        charset="utf8mb4",
    )
    if db:
        kwargs["database"] = db
    conn = MySQLdb.connect(**kwargs)
    conn.autocommit(autocommit)
    return conn


def connect_socket(sock: Path, user: str | None = None, timeout: int = 2, read_timeout: int = 30):
    """unix_socket-authenticated connection as the account of our OS user (root@localhost as root).
    No option files are read (mysqlclient reads none unless told to)."""
    import MySQLdb

    conn = MySQLdb.connect(
        unix_socket=str(sock),
        user=user or socket_auth_user(),
        connect_timeout=timeout,
        read_timeout=read_timeout,
        write_timeout=read_timeout,
        charset="utf8mb4",
    )
    conn.autocommit(True)
    return conn


def show(conn, sql: str) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(sql)
        return {str(k).lower(): (v.decode() if isinstance(v, bytes) else str(v)) for k, v in cur.fetchall()}


def execute_all(conn, statements: Iterable[str]) -> None:
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


# --------------------------------------------------------------------------------------------------
# locking (between processes: CLI, pytest sessions, xdist workers)

_LOCKS_GUARD = threading.Lock()
_LOCKS: dict[str, dict] = {}


class LabLock:
    """A re-entrant exclusive flock on `path`, shared by every lab object of this process."""

    def __init__(self, path: Path, timeout: float = 900):
        self.path = path
        self.timeout = timeout

    def __enter__(self):
        key = str(self.path)
        with _LOCKS_GUARD:
            entry = _LOCKS.setdefault(key, {"rlock": threading.RLock(), "depth": 0, "fd": None})
        entry["rlock"].acquire()
        if entry["depth"] == 0:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            deadline = time.monotonic() + self.timeout
            announced = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        os.close(fd)
                        entry["rlock"].release()
                        raise LabError(f"another process holds {self.path} for over {self.timeout:.0f} s")
                    if not announced:
                        log.info("waiting for another lab operation to finish (%s)", self.path)
                        announced = True
                    time.sleep(0.1)
            entry["fd"] = fd
        entry["depth"] += 1
        return self

    def __exit__(self, *exc):
        entry = _LOCKS[str(self.path)]
        entry["depth"] -= 1
        if entry["depth"] == 0:
            fcntl.flock(entry["fd"], fcntl.LOCK_UN)
            os.close(entry["fd"])
            entry["fd"] = None
        entry["rlock"].release()
        return False


# --------------------------------------------------------------------------------------------------
# misc


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.1):
    """Call predicate until it returns something truthy (returned) or timeout (returns None)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            return None
        time.sleep(interval)


def setup_cli_logging() -> None:
    start = time.monotonic()

    class _Fmt(logging.Formatter):
        def format(self, record):
            return f"[{time.monotonic() - start:6.2f}s] {record.getMessage()}"

    handler = logging.StreamHandler()
    handler.setFormatter(_Fmt())
    root = logging.getLogger("lab")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def mib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1048576:.0f}MiB"
