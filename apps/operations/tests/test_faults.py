"""Faults that must end in a consistent state on every ProxySQL node, with real Celery workers."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster, Server
from apps.operations import services, switchover
from apps.operations.models import Operation, PendingRollback
from conftest import adopt_double, free_port
from lab import demo

from .conftest import runtime, servers, variable, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def state(op):
    return Operation.objects.get(pk=op.pk).state


def confirm(cluster, user, **options):
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), **options)
    op = services.save_plan(plan, actor=Actor.command(user))
    services.confirm(op, actor=Actor.command(user))  # enqueued on commit: a real worker picks it up
    return op


def test_worker_killed_mid_drain_is_rolled_back_by_the_reaper(
    adopted_lab, operator_user, redis_server, live_redis, celery_broker, celery_factory
):
    cluster, (first, second) = adopted_lab
    worker = celery_factory("worker", redis_server)
    op = confirm(cluster, operator_user, drain_timeout_ms=60_000, lower_autoinc=False)  # pinned: drains forever
    assert wait_for(
        lambda: Operation.objects.get(pk=op.pk).steps.filter(key="wait_drain", state="running").exists(), 20
    )
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


@pytest.mark.parametrize("stop", ["terminate", "kill"])  # SIGTERM, and SIGKILL as in issue 39
def test_redis_restarted_mid_operation_changes_nothing(
    adopted_lab, operator_user, celery_factory, celery_broker, settings, stop
):
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
        op = confirm(cluster, operator_user, drain_timeout_ms=20_000, lower_autoinc=False)  # pinned: the drain waits
        assert wait_for(
            lambda: Operation.objects.get(pk=op.pk).steps.filter(key="wait_drain", state="running").exists(), 20
        )
        getattr(redis, stop)()
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


def test_new_writer_killed_mid_switchover_rolls_back(
    adopted_lab, operator_user, redis_server, live_redis, celery_broker, celery_factory, galera_healthy
):
    cluster, (first, second) = adopted_lab
    celery_factory("worker", redis_server)
    op = confirm(cluster, operator_user, drain_timeout_ms=20_000, lower_autoinc=False)  # pinned: the drain waits
    assert wait_for(
        lambda: Operation.objects.get(pk=op.pk).steps.filter(key="wait_drain", state="running").exists(), 20
    )
    galera_healthy.kill(2)  # the target dies while the old writer drains
    for double in (first, second):
        double.traffic.clear_sessions(hostgroup=100)
    assert wait_for(lambda: state(op) in ("rolled_back", "failed"), 30)
    assert state(op) == "rolled_back", Operation.objects.get(pk=op.pk).error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]
        assert variable(double, "mysql-auto_increment_delay_multiplex") == "5"


# -- issue 9: a ProxySQL node paused mid-operation, plans started late ----------------------------------
AUTOINC = "mysql-auto_increment_delay_multiplex"


def pin_writers(double):
    """Writer sessions pinned by user variables: lowering the auto-increment delay does not free them, so
    the drain waits (probing every node) until something else happens."""
    demo.admin_sql(
        double.port,
        "LAB SET_SESSIONS "
        + json.dumps({"hostgroup": 100, "count": 4, "kind": "write", "pinned_reason": "user_variable"}),
        user=double.user,
        password=double.password,
    )


def draining(op):
    return Operation.objects.get(pk=op.pk).steps.filter(key="wait_drain", state="running").exists()


@pytest.fixture
def process_double():
    """A ProxySQL double in its own process (python -m lab.proxysql_double), so that SIGSTOP pauses it
    as it would a ProxySQL: its sockets stay open, nothing answers."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lab.proxysql_double", "--port", str(port), "--user", "admin", "--password", "admin"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        for line in proc.stdout:
            if "endpoint(s) ready" in line:
                break
        else:
            pytest.fail(f"the process double did not start (exit {proc.wait()})")
        yield SimpleNamespace(port=port, user="admin", password="admin", pid=proc.pid)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def mixed_lab(db, proxysql_double, process_double, galera_lab):
    """The lab cluster fronted by an in-process double (proxysql-1) and a double in its own process
    (proxysql-2), both laid out like the seeds' pair and adopted through the product."""
    for i, double in enumerate((proxysql_double, process_double), 1):
        demo.admin_sql(double.port, *demo.seed_statements(), user=double.user, password=double.password)
        adopt_double(double, "galera-lab", f"proxysql-{i}")
    return Cluster.objects.get(name="galera-lab"), (proxysql_double, process_double)


def pause_mid_switchover_and_resume(cluster, doubles, user, redis_server, celery_factory, pause, resume):
    """The seed's case on the real pair: the node stops answering after the drain reached it. The operation
    must become rollback pending (its statements visible), and once the node answers again the beat's
    retry must bring it back exactly as before, with no hand-typed SQL."""
    first, second = doubles
    before = [servers(d) for d in doubles]
    for double in doubles:
        pin_writers(double)
    celery_factory("worker", redis_server)
    celery_factory("beat", redis_server, MONITOR_SHARDS=1)
    op = confirm(cluster, user, drain_timeout_ms=30_000, lower_autoinc=True)
    assert wait_for(lambda: draining(op), 20), Operation.objects.get(pk=op.pk).error
    assert runtime(second, 100) == [("127.0.0.1", 3311, "OFFLINE_SOFT")] and variable(second, AUTOINC) == "0"
    pause()
    assert wait_for(lambda: state(op) == "rollback_pending", 20), (state(op), Operation.objects.get(pk=op.pk).error)
    assert runtime(first, 100) == [("127.0.0.1", 3311, "ONLINE")] and variable(first, AUTOINC) == "5"
    row = PendingRollback.objects.get(operation=op)
    assert row.node.name == "proxysql-2" and [s["sql"] for s in row.statements][-2:] == [
        f"UPDATE global_variables SET variable_value='5' WHERE variable_name='{AUTOINC}'",
        "LOAD MYSQL VARIABLES TO RUNTIME",
    ]
    assert any(
        s["sql"].startswith("REPLACE INTO mysql_servers") and "3311,0,'ONLINE'" in s["sql"] for s in row.statements
    )
    assert wait_for(lambda: AuditEvent.objects.filter(action="rollback retry", outcome="failure").exists(), 15)
    resume()
    assert wait_for(lambda: state(op) == "rolled_back", 40), [t for t in PendingRollback.objects.get(pk=row.pk).tries]
    for double, was in zip(doubles, before):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")] and variable(double, AUTOINC) == "5"
        assert servers(double) == was
    assert AuditEvent.objects.filter(action="rollback retry", outcome="success").count() == 1
    assert AuditEvent.objects.filter(action="switchover rolled_back").exists()


def test_a_node_paused_by_sigstop_mid_switchover_is_rolled_back_when_it_resumes(
    mixed_lab, operator_user, redis_server, live_redis, celery_broker, celery_factory
):
    cluster, doubles = mixed_lab
    pid = doubles[1].pid
    pause_mid_switchover_and_resume(
        cluster,
        doubles,
        operator_user,
        redis_server,
        celery_factory,
        pause=lambda: os.kill(pid, signal.SIGSTOP),
        resume=lambda: os.kill(pid, signal.SIGCONT),
    )


def test_a_node_hung_mid_switchover_is_rolled_back_when_it_answers_again(
    adopted_lab, operator_user, redis_server, live_redis, celery_broker, celery_factory
):
    cluster, doubles = adopted_lab
    second = doubles[1]
    pause_mid_switchover_and_resume(
        cluster,
        doubles,
        operator_user,
        redis_server,
        celery_factory,
        pause=lambda: second.set_mode("hang"),
        resume=lambda: second.set_mode("normal"),
    )


def test_a_switchover_whose_worker_starts_after_the_validity_window_expires(
    adopted_lab, operator_user, redis_server, live_redis, celery_broker, celery_factory
):
    cluster, (first, second) = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(plan_validity_s=2)
    op = confirm(Cluster.objects.get(pk=cluster.pk), operator_user, lower_autoinc=True)  # queued, no worker yet
    time.sleep(2.5)
    celery_factory("worker", redis_server)  # the worker comes back late, like the killed one of the issue
    assert wait_for(lambda: state(op) == "expired", 30), Operation.objects.get(pk=op.pk).error
    assert "validity window of 2 s" in Operation.objects.get(pk=op.pk).error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]
    assert AuditEvent.objects.get(action="switchover expired").outcome == "refused"


def test_a_switchover_whose_target_died_before_its_worker_started_is_refused(
    adopted_lab, operator_user, redis_server, live_redis, celery_broker, celery_factory, galera_healthy
):
    cluster, (first, second) = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(plan_validity_s=120)  # this test is about the guards, not the clock
    op = confirm(Cluster.objects.get(pk=cluster.pk), operator_user, lower_autoinc=True)
    galera_healthy.kill(2)
    celery_factory("worker", redis_server)
    assert wait_for(lambda: state(op) == "refused", 30), Operation.objects.get(pk=op.pk).error
    error = Operation.objects.get(pk=op.pk).error
    assert "127.0.0.1:3312 answers (now:" in error and "nothing was changed" in error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")] and variable(double, AUTOINC) == "5"
    refused = AuditEvent.objects.get(action="switchover refused")
    assert "new_writer_reachable" in [g["key"] for g in refused.details["failed_guards"]]
