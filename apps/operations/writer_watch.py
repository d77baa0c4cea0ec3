"""The writer watch (issue 37 item 3): one idle connection to the writer of every cluster the product fails over
itself, so that a writer whose process dies is seen in milliseconds instead of at the next backend poll.

A dead process's kernel closes its sockets at once (FIN or RST): the watched socket turns readable, and the watch
calls its trigger for that cluster, which queues a poll of the cluster's backends now (queue_poll). The watch
decides nothing: that poll, the re-probe and failover_after_polls decide as after any poll (rules.apply_failover),
so a connection closed for another reason (a KILL, wait_timeout, a restart of the server) costs one poll and
nothing more. A host that vanishes without closing (power, network) is not seen here: the polls' timeouts see it.

No polling: the loop sleeps in select() on the watched sockets until one turns readable, or until the targets are
read again (every REFRESH_S: a new writer after a failover is watched, a lost connection opened again; a writer
that stays down is tried once per refresh, never in a loop). Connections are opened on a few threads through the
backend client (its timeouts), so a writer that does not answer holds up no one else's watch.
"""

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from django.db import close_old_connections

from apps.clients.backend import BackendClient
from apps.clients.wire import ClientError
from apps.fleet.choices import NativeManager
from apps.fleet.models import Cluster, Server
from controlplane.tasks import enqueue

from .switchover import current_writers

log = logging.getLogger(__name__)
REFRESH_S = 1.0
CONNECT_THREADS = 4

Trigger = Callable[[int], None]  # called with a cluster's id when its watched writer's connection closed
TargetKey = tuple[int, str, int, str, str, str | None, bool]  # what a watched connection was opened for


def writer_targets() -> dict[int, Server]:
    """{cluster id: its current writer} of the clusters with automatic failover on and no native manager (there
    ProxySQL's Monitor moves the writer, and rules.apply_failover stays out)."""
    clusters = {c.pk: c for c in Cluster.objects.filter(auto_failover_enabled=True, native_manager=NativeManager.NONE)}
    targets = {}
    for cluster_id, writer in current_writers(clusters.values()).items():  # two queries a refresh, not one a cluster
        writer.server.cluster = clusters[cluster_id]  # for_server reads it: no query more
        targets[cluster_id] = writer.server
    return targets


def target_key(server: Server) -> TargetKey:
    """A watched connection is opened again when any of this changes (the password is not in it: the open connection
    was authenticated already, a new password is used at its next opening)."""
    cluster = server.cluster
    return (
        server.pk,
        server.hostname,
        server.port,
        cluster.monitor_user,
        cluster.credential_hosts,
        cluster.tls_ca or None,
        bool(cluster.tls_verify),
    )


def queue_poll(cluster_id: int) -> None:
    """The product's trigger: a poll of the cluster's backends now, then the rules (workers/monitoring.py)."""
    enqueue("monitoring.poll_cluster_backends", [cluster_id])


@dataclass
class Watched:
    """One open idle connection to a cluster's writer."""

    cluster_id: int
    key: TargetKey
    client: BackendClient
    fileno: int
    connection_id: int  # the server's id for it (KILL <id> closes it from the server's side)
    since: float  # time.monotonic() when it was opened


class WriterWatch:
    """watch = WriterWatch(trigger); watch.run() until watch.stop() (from a signal handler or another thread)."""

    def __init__(self, trigger: Trigger, *, refresh_s: float = REFRESH_S) -> None:
        self.trigger = trigger
        self.refresh_s = refresh_s
        self.watched: dict[int, Watched] = {}  # cluster id -> its open connection
        self.wanted: dict[int, TargetKey] = {}  # cluster id -> what it should watch, as last read
        self._opening: dict[int, Future[Watched]] = {}
        self._failing: set[int] = set()  # clusters whose writer could not be connected to at the last try
        self._selector = selectors.DefaultSelector()
        # A finished opening (on a pool thread) or stop() wakes the loop through this pair, so it never polls.
        self._wake_read, self._wake_write = socket.socketpair()
        for end in (self._wake_read, self._wake_write):
            end.setblocking(False)
        self._selector.register(self._wake_read, selectors.EVENT_READ, None)
        self._pool = ThreadPoolExecutor(CONNECT_THREADS, thread_name_prefix="writer watch connect")
        self._stopped = threading.Event()

    # -- the loop ------------------------------------------------------------------------------------
    def run(self) -> None:
        next_refresh = 0.0
        try:
            while not self._stopped.is_set():
                if time.monotonic() >= next_refresh:
                    self.refresh()
                    next_refresh = time.monotonic() + self.refresh_s
                for key, _ in self._selector.select(timeout=max(0.0, next_refresh - time.monotonic())):
                    if key.data is None:
                        self._drain_wake()
                    else:
                        self._lost(key.data)
                self._take_opened()
        finally:
            self.close()

    def stop(self) -> None:
        self._stopped.set()
        self._wake()

    def refresh(self) -> None:
        """Read the targets again: drop what is no longer wanted (a new writer, failover turned off, a changed
        setting), open what is wanted and neither open nor being opened."""
        try:
            targets = writer_targets()
        except Exception:  # the database away for a moment: keep watching what is watched
            log.exception("writer watch: reading the targets failed")
            return
        finally:
            close_old_connections()  # a long-lived process: a database connection past its age is reopened
        self.wanted = {cluster_id: target_key(server) for cluster_id, server in targets.items()}
        for cluster_id, watched in list(self.watched.items()):
            if self.wanted.get(cluster_id) != watched.key:
                self._drop(cluster_id)
        for cluster_id, server in targets.items():
            if cluster_id in self.watched or cluster_id in self._opening:
                continue
            try:
                client = BackendClient.for_server(server)  # the credential hosts' check: here, it may query
            except ClientError as exc:  # NotAllowed: its credential hosts refuse it (said once, as below)
                if cluster_id not in self._failing:
                    log.warning("writer watch: cluster %s: writer %s not watched: %s", cluster_id, server, exc.message)
                    self._failing.add(cluster_id)
                continue
            future = self._pool.submit(self._open, cluster_id, self.wanted[cluster_id], client)
            future.add_done_callback(lambda _: self._wake())
            self._opening[cluster_id] = future

    # -- connections -----------------------------------------------------------------------------------
    @staticmethod
    def _open(cluster_id: int, key: TargetKey, client: BackendClient) -> Watched:
        try:
            fileno, connection_id = client.open_idle()
        except BaseException:
            client.close()
            raise
        return Watched(cluster_id, key, client, fileno, connection_id, time.monotonic())

    def _take_opened(self) -> None:
        for cluster_id, future in list(self._opening.items()):
            if not future.done():
                continue
            del self._opening[cluster_id]
            try:
                watched = future.result()
            except ClientError as exc:  # the writer down: tried again at the next refresh, said once
                if cluster_id not in self._failing:
                    log.warning(
                        "writer watch: cluster %s: no connection to its writer (tried each refresh): %s",
                        cluster_id,
                        exc,
                    )
                    self._failing.add(cluster_id)
                continue
            except Exception:
                log.exception("writer watch: cluster %s: opening a connection to its writer failed", cluster_id)
                continue
            if self.wanted.get(cluster_id) != watched.key or self._stopped.is_set():
                watched.client.close()  # the target changed while it was being opened
                continue
            self.watched[cluster_id] = watched
            self._failing.discard(cluster_id)
            self._selector.register(watched.fileno, selectors.EVENT_READ, watched)
            log.info("writer watch: cluster %s: watching %s", cluster_id, watched.client.name)

    def _lost(self, watched: Watched) -> None:
        """The server closed an idle connection (EOF, RST, or a packet it sends only before closing): poll now."""
        self._drop(watched.cluster_id)
        log.warning(
            "writer watch: cluster %s: %s closed its idle connection (open %.1f s): polling the cluster now",
            watched.cluster_id,
            watched.client.name,
            time.monotonic() - watched.since,
        )
        try:
            self.trigger(watched.cluster_id)
        except Exception:  # a broker away: the next tick polls anyway
            log.exception("writer watch: cluster %s: the trigger failed", watched.cluster_id)

    def _drop(self, cluster_id: int) -> None:
        watched = self.watched.pop(cluster_id)
        self._selector.unregister(watched.fileno)
        watched.client.close()

    def close(self) -> None:
        for cluster_id in list(self.watched):
            self._drop(cluster_id)
        self._pool.shutdown(wait=False, cancel_futures=True)
        for future in self._opening.values():  # an opening still running: closed when it ends
            future.add_done_callback(_close_opened)
        self._opening.clear()
        self._selector.close()
        self._wake_read.close()
        self._wake_write.close()

    # -- waking the loop -------------------------------------------------------------------------------
    def _wake(self) -> None:
        try:
            self._wake_write.send(b"\0")
        except (BlockingIOError, OSError):  # already full (the loop wakes anyway), or closed at the end
            pass

    def _drain_wake(self) -> None:
        try:
            while self._wake_read.recv(512):
                pass
        except (BlockingIOError, OSError):
            pass


def _close_opened(future: "Future[Watched]") -> None:
    if not future.cancelled() and future.exception() is None:
        future.result().client.close()
