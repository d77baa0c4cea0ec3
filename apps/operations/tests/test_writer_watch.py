"""The writer watch (apps/operations/writer_watch.py) against the Galera lab: a killed writer is seen in milliseconds
and its cluster polled at once; a connection the server closes while the writer lives costs a poll and no failover;
end to end with a Celery worker and `manage.py watch_writers`, a killed writer is failed over without a beat."""

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import pytest
from django.db import connection

from apps.clients.backend import BackendClient
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.monitoring import live, pollers, status
from apps.monitoring.rounds import TICK_TOLERANCE_S
from apps.operations.models import Operation
from apps.operations.writer_watch import WriterWatch
from conftest import database_url_for_subprocesses
from workers.monitoring import poll_cluster_backends

from .conftest import runtime, wait_for

# The watch's loop reads the clusters on a thread of its own (and, in the last test, in another process): committed.
pytestmark = pytest.mark.django_db(transaction=True)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def enable_failover(cluster):
    Cluster.objects.filter(pk=cluster.pk).update(auto_failover_enabled=True)
    return Cluster.objects.get(pk=cluster.pk)


@contextmanager
def running(watch, cluster):
    """The watch's loop on a thread until the block ends; entered once it watches the cluster's writer."""

    def loop():
        try:
            watch.run()
        finally:
            connection.close()  # this thread's own database connection

    thread = threading.Thread(target=loop, name="writer watch", daemon=True)
    thread.start()
    try:
        assert wait_for(lambda: cluster.pk in watch.watched, 10), "the watch did not open its connection to the writer"
        yield watch
    finally:
        watch.stop()
        thread.join(10)
        assert not thread.is_alive(), "the watch did not stop"


def test_the_watch_sees_a_killed_writer_before_the_next_poll_could(adopted_lab, live_redis, galera_healthy):
    cluster, _ = adopted_lab
    cluster = enable_failover(cluster)
    fired: queue.Queue[tuple[int, float]] = queue.Queue()
    with running(WriterWatch(lambda cluster_id: fired.put((cluster_id, time.monotonic()))), cluster) as watch:
        assert watch.watched[cluster.pk].key[1:3] == ("127.0.0.1", 3311)
        # A poll right before the kill: the worst moment for polling alone, the next one is a whole interval away.
        pollers.backend_round(pollers.servers_of_cluster(cluster.pk))
        polled_at = time.monotonic()
        killed_at = time.monotonic()
        galera_healthy.kill(1)
        cluster_id, fired_at = fired.get(timeout=5)
    after_kill_ms = (fired_at - killed_at) * 1000
    next_poll_ms = (polled_at + status.backend_interval(cluster) - TICK_TOLERANCE_S - killed_at) * 1000
    print(f"\nthe watch fired {after_kill_ms:.1f} ms after the kill (the next regular poll: {next_poll_ms:.0f} ms)")
    assert cluster_id == cluster.pk
    assert after_kill_ms < 1000  # a loaded 2-core machine; a quiet one sees it in a few milliseconds
    assert after_kill_ms < next_poll_ms, "no sooner than the next regular poll would have seen it"
    assert fired.empty()  # one closed connection, one trigger


def test_a_connection_the_server_closes_while_the_writer_lives_costs_a_poll_not_a_failover(adopted_lab, live_redis):
    cluster, (first, second) = adopted_lab
    cluster = enable_failover(cluster)
    writer = Server.objects.get(port=3311)
    triggered: list[float] = []

    def poll_now(cluster_id):  # the task's own code, run here rather than queued
        triggered.append(time.time())
        poll_cluster_backends(cluster_id)

    with running(WriterWatch(poll_now), cluster) as watch:
        first_id = watch.watched[cluster.pk].connection_id
        killed_at = time.time()
        with BackendClient.for_server(writer) as client:
            client.run(f"KILL CONNECTION {first_id}", action="kill the watch's connection")
        assert wait_for(lambda: triggered, 5), "the closed connection triggered no poll"
        # Watched again at the next refresh, on a new connection.
        assert wait_for(lambda: cluster.pk in watch.watched and watch.watched[cluster.pk].connection_id != first_id, 5)
    assert len(triggered) == 1
    doc = live.read_one(live.BACKEND, writer.pk)
    assert doc["ok"] and doc["ts"] >= killed_at, "the trigger did not poll the writer"
    assert not Operation.objects.exists()
    assert live.client().get(f"failover:{cluster.pk}") is None  # the poll counted no writer-down poll
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]


@pytest.fixture
def watch_process(live_redis, redis_server, tmp_path):
    """`manage.py watch_writers` in a process of its own against the test database and Redis; stopped by SIGTERM."""
    log = open(tmp_path / "watch_writers.log", "w+")
    env = {
        **os.environ,
        "REDIS_URL": redis_server,
        "DATABASE_URL": database_url_for_subprocesses(),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "watch_writers"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc.log = log
    yield proc
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def log_text(proc):
    proc.log.seek(0)
    return proc.log.read()


def test_a_killed_writer_is_failed_over_by_the_worker_the_watch_woke_without_beat(
    adopted_lab, live_redis, redis_server, celery_factory, galera_healthy, watch_process
):
    cluster, doubles = adopted_lab
    cluster = enable_failover(cluster)
    celery_factory("worker", redis_server)  # no beat: no poll happens unless the watch asks for one
    assert wait_for(lambda: "watching backend 127.0.0.1:3311" in log_text(watch_process), 30), log_text(watch_process)
    killed_at = time.time()
    galera_healthy.kill(1)
    done = wait_for(lambda: Operation.objects.filter(kind="failover", state="done").exists(), 20)
    assert done, f"no failover within 20 s\n{log_text(watch_process)[-3000:]}"
    operation = Operation.objects.get(kind="failover")
    print(
        f"\nkill -> failover saved {(operation.created_at.timestamp() - killed_at) * 1000:.0f} ms, "
        f"done {(operation.finished_at.timestamp() - killed_at) * 1000:.0f} ms"
    )
    assert operation.plan["facts"]["down_polls"] == 1
    assert HostgroupMembership.objects.get(hostgroup_id=100).server.port == 3312
    for double in doubles:
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    # The new writer is watched in its turn; then SIGTERM stops the process cleanly.
    assert wait_for(lambda: "watching backend 127.0.0.1:3312" in log_text(watch_process), 10), log_text(watch_process)
    os.killpg(watch_process.pid, signal.SIGTERM)
    assert watch_process.wait(10) == 0, log_text(watch_process)
    assert "writer watch: stopped" in log_text(watch_process)
