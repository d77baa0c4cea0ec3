"""The demo's processes: each started in a process group of its own, recorded in a pid file, and
stopped together -- by the supervisor on Ctrl-C, or by `bin/demo down` after a supervisor that died.

Why groups: gunicorn forks workers and Celery forks its pool. Signalling one pid leaves those behind
(a gunicorn master that survived Ctrl-C kept port 8000); signalling the group reaches all of them. And
since the children are not in the terminal's foreground group, Ctrl-C reaches only the supervisor
(lab/demo.py), which then stops them in reverse order of start: SIGTERM to each group, SIGKILL to
whatever is left after a grace period, and waits until every member is gone.

Each pid file (<run dir>/<name>.pid) holds the pid and its start time, so that a pid the system has
given to another process since is never taken for ours. `stop_leftovers()` stops what the pid files
name and then whatever still listens on the demo's ports from a working directory inside this
checkout; anything else on those ports is named and left alone.
"""

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
GRACE_S = 10


class Processes:
    """The processes one supervisor started, in order; pid files under run_dir."""

    def __init__(self, run_dir):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.started = []  # (name, Popen)
        self.how = {}  # name: how it was started (restart() starts it the same way)
        self.since = {}  # name: time.monotonic() when it was last started

    def start(self, name, args, *, log_path, env=None, cwd=REPO):
        log = open(log_path, "ab")
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()  # the child has its own copy
        write_pid_file(self.run_dir / f"{name}.pid", proc.pid)
        self.started.append((name, proc))
        self.how[name] = {"args": args, "log_path": log_path, "env": env, "cwd": cwd}
        self.since[name] = time.monotonic()
        return proc

    def exited(self):
        """(name, returncode) of the first started process that has exited, or None."""
        return next(((name, proc.returncode) for name, proc in self.started if proc.poll() is not None), None)

    def exited_all(self):
        """[(name, returncode, seconds it ran)] of every started process that has exited."""
        now = time.monotonic()
        return [
            (name, proc.returncode, now - self.since[name]) for name, proc in self.started if proc.poll() is not None
        ]

    def restart(self, name):
        """Start an exited process again, as it was started, in its place in the stop order. Whatever its group
        left behind (a Celery pool child of a killed worker) is stopped first."""
        at, proc = next((i, p) for i, (n, p) in enumerate(self.started) if n == name)
        proc.wait()
        stop_group(proc.pid, grace_s=2)
        del self.started[at]
        new = self.start(name, **self.how[name])
        self.started.insert(at, self.started.pop())
        return new

    def stop_all(self, grace_s=GRACE_S, say=print):
        """Stop every group at once (a slow one must not hold up the others' grace period), then reap."""
        outcome = stop_groups([proc.pid for _, proc in self.started], grace_s=grace_s)
        for name, proc in reversed(self.started):
            proc.wait()  # reap it: it was our child
            (self.run_dir / f"{name}.pid").unlink(missing_ok=True)
            say(f"stopped {name} (pid {proc.pid}{', killed' if outcome[proc.pid] == 'killed' else ''})")
        self.started.clear()


def write_pid_file(path, pid):
    path.write_text(json.dumps({"pid": pid, "create_time": psutil.Process(pid).create_time()}))


def read_pid_file(path):
    """The live process a pid file names, or None (gone, or its pid reused by another process)."""
    try:
        data = json.loads(Path(path).read_text())
        proc = psutil.Process(int(data["pid"]))
        if abs(proc.create_time() - float(data["create_time"])) < 0.01:
            return proc
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        pass
    return None


def group_members(pgid):
    return [proc for proc in psutil.process_iter() if _pgid(proc.pid) == pgid]


def stop_group(leader, *, grace_s=GRACE_S):
    """Stop the process group `leader` leads (the leader, what it forked, what those forked): SIGTERM,
    then SIGKILL after grace_s to whatever remains. Returns "stopped", "killed" or "gone"."""
    return stop_groups([leader], grace_s=grace_s)[leader]


def stop_groups(leaders, *, grace_s=GRACE_S):
    """stop_group() for several groups at once: {leader: "stopped", "killed" or "gone"}."""
    outcome = {leader: "stopped" if group_members(leader) else "gone" for leader in leaders}
    for leader in leaders:
        _signal_group(leader, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while _alive_groups(leaders) and time.monotonic() < deadline:
        time.sleep(0.1)
    for leader in _alive_groups(leaders):
        _signal_group(leader, signal.SIGKILL)
        outcome[leader] = "killed"
    deadline = time.monotonic() + 5
    while _alive_groups(leaders) and time.monotonic() < deadline:
        time.sleep(0.05)
    return outcome


def _alive_groups(leaders):
    by_group = {}
    for proc in psutil.process_iter():
        by_group.setdefault(_pgid(proc.pid), []).append(proc)
    return [leader for leader in leaders if _alive(by_group.get(leader, []))]


def stop_process_tree(proc, *, grace_s=GRACE_S):
    """Stop one process and its descendants (for a leftover that does not lead its own group)."""
    tree = [proc] + proc.children(recursive=True)
    for p in tree:
        _quietly(p.terminate)
    _, alive = psutil.wait_procs(tree, timeout=grace_s)
    for p in alive:
        _quietly(p.kill)
    psutil.wait_procs(alive, timeout=5)


def _alive(procs):
    return [p for p in procs if p.is_running() and _quietly(p.status) not in (psutil.STATUS_ZOMBIE, None)]


def _signal_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _quietly(call):
    try:
        return call()
    except psutil.Error:
        return None


def listeners(ports):
    """{port: pid or None} of the TCP listeners on these ports (this network namespace)."""
    out = {}
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port in ports:
            out.setdefault(conn.laddr.port, conn.pid)
    return out


def started_here(proc):
    """Whether a process runs from inside this checkout (its working directory), as the demo's do."""
    try:
        return Path(proc.cwd()).resolve().is_relative_to(REPO)
    except (psutil.Error, OSError):
        return False


def stop_leftovers(run_dir, ports, *, pid_files=(), say=print):
    """Stop what an earlier demo left running: every process named by a pid file in run_dir (and the
    extra pid_files, of older demos), then every listener on `ports` that was started from this
    checkout. Returns the names of what was stopped."""
    stopped = []
    for path in sorted(Path(run_dir).glob("*.pid")) + [Path(p) for p in pid_files]:
        proc = read_pid_file(path) or _legacy_pid(path)
        if proc is not None:
            _stop(proc)
            stopped.append(f"{path.stem} (pid {proc.pid}, from {path})")
        path.unlink(missing_ok=True)
    for port, pid in sorted(listeners(set(ports)).items()):
        proc = _quietly(lambda: psutil.Process(pid)) if pid else None
        if proc is None:
            say(f"port {port} is held by a process this user cannot see: left alone")
        elif not started_here(proc):
            say(
                f"port {port} is held by pid {pid} ({' '.join(proc.cmdline()[:3])}), not started from "
                f"{REPO}: left alone"
            )
        else:
            _stop(proc)
            stopped.append(f"the listener on port {port} (pid {pid})")
    for line in stopped:
        say(f"stopped {line}")
    return stopped


def _stop(proc):
    """Stop a leftover with everything of its kind: its whole process group when the whole group was
    started here (a gunicorn worker holds the master's listening socket too: stopping the worker alone
    would only make the master fork another), else its topmost ancestor in that group started here,
    with that ancestor's descendants."""
    pgid = _pgid(proc.pid)
    if pgid is None:
        return  # gone meanwhile
    if all(started_here(member) for member in group_members(pgid)):
        stop_group(pgid)
        return
    top = proc
    for parent in proc.parents():
        if _pgid(parent.pid) != pgid or not started_here(parent):
            break
        top = parent
    stop_process_tree(top)


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except (ProcessLookupError, PermissionError):
        return None


def _legacy_pid(path):
    """A pid file holding a bare pid (redis-server's own, the doubles' of older demos): trusted only
    for a process started from this checkout."""
    try:
        proc = psutil.Process(int(Path(path).read_text().split()[0]))
    except (OSError, ValueError, IndexError, psutil.Error):
        return None
    return proc if started_here(proc) else None


def port_is_free(port, host="127.0.0.1"):
    """Whether a server could listen on the port now (connections of the past in TIME_WAIT do not count,
    as they do not for gunicorn or redis, which set SO_REUSEADDR too)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def listening(port, host="127.0.0.1", timeout=0.3):
    try:
        socket.create_connection((host, port), timeout=timeout).close()
        return True
    except OSError:
        return False
