"""Faults that must end in a consistent state on every ProxySQL node, with real Celery workers."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

from apps.fleet.models import Server
from apps.operations import services, switchover
from apps.operations.models import Operation

from .conftest import runtime, variable

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def state(op):
    return Operation.objects.get(pk=op.pk).state


def confirm(cluster, user, **options):
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), **options)
    op = services.save_plan(plan, user=user)
    services.confirm(op, user=user)  # enqueued on commit: a real worker picks it up
    return op


def test_worker_killed_mid_drain_is_rolled_back_by_the_reaper(adopted_lab, operator_user, redis_server, live_redis,
                                                               celery_broker, celery_factory):
    cluster, (first, second) = adopted_lab
    worker = celery_factory("worker", redis_server)
    op = confirm(cluster, operator_user, drain_timeout_ms=60_000, lower_autoinc=False)  # pinned: drains forever
    assert wait_for(lambda: Operation.objects.get(pk=op.pk).steps.filter(key="wait_drain", state="running").exists(), 20)
    assert runtime(first, 100) == [("127.0.0.1", 3311, "OFFLINE_SOFT")]
    os.killpg(worker.pid, signal.SIGKILL)  # the worker dies with the writer hostgroup drained
    worker.wait()
    # A new worker and beat: the reaper finds the stale heartbeat and rolls the drain back.
    celery_factory("worker", redis_server, OPERATIONS_STALE_AFTER_S=3)
    celery_factory("beat", redis_server, MONITOR_SHARDS=1)
    assert wait_for(lambda: state(op) == "rolled_back", 40), Operation.objects.get(pk=op.pk).error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]
        assert double.traffic.status()["counters"]["sessions_cut"] == 0
    assert "no heartbeat" in Operation.objects.get(pk=op.pk).error


def test_redis_restarted_mid_operation_changes_nothing(adopted_lab, operator_user, celery_factory, celery_broker,
                                                      settings):
    cluster, (first, second) = adopted_lab
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="redis-restart-")
    args = [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", workdir]
    redis = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    settings.REDIS_URL = url
    celery_broker(url)
    try:
        time.sleep(0.3)
        celery_factory("worker", url)
        op = confirm(cluster, operator_user, drain_timeout_ms=20_000)
        assert wait_for(lambda: Operation.objects.get(pk=op.pk).steps.filter(key="wait_drain", state="running").exists(), 20)
        redis.terminate()
        redis.wait()
        redis = subprocess.Popen(args, stdout=subprocess.DEVNULL)
        for double in (first, second):  # the pinned sessions finish: now the drain can complete
            double.traffic.clear_sessions(hostgroup=100)
        assert wait_for(lambda: state(op) == "done", 20), Operation.objects.get(pk=op.pk).error
        for double in (first, second):
            assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def test_new_writer_killed_mid_switchover_rolls_back(adopted_lab, operator_user, redis_server, live_redis,
                                                     celery_broker, celery_factory, galera_healthy):
    cluster, (first, second) = adopted_lab
    celery_factory("worker", redis_server)
    op = confirm(cluster, operator_user, drain_timeout_ms=20_000)
    assert wait_for(lambda: Operation.objects.get(pk=op.pk).steps.filter(key="wait_drain", state="running").exists(), 20)
    galera_healthy.kill(2)  # the target dies while the old writer drains
    for double in (first, second):
        double.traffic.clear_sessions(hostgroup=100)
    assert wait_for(lambda: state(op) in ("rolled_back", "failed"), 30)
    assert state(op) == "rolled_back", Operation.objects.get(pk=op.pk).error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]
        assert variable(double, "mysql-auto_increment_delay_multiplex") == "5"
