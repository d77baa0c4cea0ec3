"""A fault or a probe that must land at one statement an operation sends one node: armed in the admin client's run(),
the one way a statement reaches a ProxySQL node (apps/clients/proxysql.py). A call through: the statement still goes
to the node, over the wire; nothing is answered in its place. Polling a node's state from another thread misses
short windows on a busy machine (a SAVE of a few rows takes milliseconds), so the benches' kills
(lab/bench_faults.py) and the tests' restarts are armed here."""

import contextlib
import threading

from apps.clients.proxysql import ProxySQLAdmin


@contextlib.contextmanager
def at_statement(port, act, *, sql=None, when=None, after=False):
    """Within the block, act() runs once, in the sending thread, at the first statement sent to the node whose admin
    port is `port` that is `sql` (compared without case or surrounding space; any statement when None) and for which
    `when()` holds (when given): before the statement is sent, or once its answer came (`after`). Yields an Event set
    once act() has run. The hook is off once act() starts (in every thread: it acts once)."""
    send, done = ProxySQLAdmin.run, threading.Event()
    wanted = sql.strip().upper() if sql is not None else None
    lock = threading.Lock()

    def matches(client, statement):
        return (
            client.endpoint[1] == port
            and (wanted is None or statement.strip().upper() == wanted)
            and (when is None or when())
        )

    def hooked(client, statement, params=(), *, action=None):
        if done.is_set() or not matches(client, statement):
            return send(client, statement, params, action=action)
        if after:
            answer = send(client, statement, params, action=action)
        with lock:
            if not done.is_set():
                ProxySQLAdmin.run = send  # the hook is off from here: act()'s own statements go through
                try:
                    act()
                finally:
                    done.set()
        if after:
            return answer
        return send(client, statement, params, action=action)

    ProxySQLAdmin.run = hooked
    try:
        yield done
    finally:
        ProxySQLAdmin.run = send
