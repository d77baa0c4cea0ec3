"""bin/demo's processes, for real: Ctrl-C stops every one of them (gunicorn's master and workers, the
Celery worker and its pool, beat, Redis) and frees their ports; `down` stops what a killed supervisor
left behind, by pid file and by port. The product part of the demo (`python -m lab.demo product`, the
same code `bin/demo` runs after setting up the lab) runs on free ports with a scratch database, started
in a process group of its own as a terminal starts a command; the whole demo (Galera lab, adoption)
would add a minute and nothing to what is checked here."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import psutil
import pytest

from conftest import free_port
from lab.demo_processes import REPO, group_members, port_is_free

START_TIMEOUT_S = 90


@pytest.fixture
def product(tmp_path):
    """start(database_url=None) -> (supervisor Popen, port, redis_port, run_dir), on a scratch SQLite database unless
    `database_url` (the test's, for a cluster the test adopted); anything still running is killed after."""
    started = []

    def start(database_url=None):
        port, redis_port = free_port(), free_port()
        run_dir, log_dir = tmp_path / "run", tmp_path / "log"
        env = {
            **os.environ,
            "DJANGO_DEBUG": "1",
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "DATABASE_URL": database_url or f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        }
        log = open(tmp_path / "supervisor.log", "w+")
        supervisor = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lab.demo",
                "product",
                "--port",
                str(port),
                "--redis-port",
                str(redis_port),
                "--run-dir",
                str(run_dir),
                "--log-dir",
                str(log_dir),
            ],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # SIGINT ignored, as for a command run with `&` from a script (or by some test runners):
            # Ctrl-C must stop the demo all the same.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
        )
        started.append(supervisor)
        deadline = time.monotonic() + START_TIMEOUT_S
        while "product up" not in (tmp_path / "supervisor.log").read_text():
            assert supervisor.poll() is None and time.monotonic() < deadline, (tmp_path / "supervisor.log").read_text()
            time.sleep(0.2)
        return supervisor, port, redis_port, run_dir

    yield start
    for supervisor in started:
        leftovers = {supervisor.pid} | {
            m.pid for f in (tmp_path / "run").glob("*.pid") for m in group_members(json.loads(f.read_text())["pid"])
        }
        for pid in leftovers:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        supervisor.wait(timeout=10)


def everything_started(supervisor, run_dir):
    """{name: [pids]}: each pid file's whole process group, and the supervisor's descendants, once the
    Celery worker has forked its pool (when it is ready)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        groups = {
            f.stem: [m.pid for m in group_members(json.loads(f.read_text())["pid"])] for f in run_dir.glob("*.pid")
        }
        groups["descendants"] = [p.pid for p in psutil.Process(supervisor.pid).children(recursive=True)]
        if len(groups.get("worker", [])) >= 3 or time.monotonic() > deadline:
            return groups
        time.sleep(0.2)


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(pids, timeout=10):
    deadline = time.monotonic() + timeout
    while not all(gone(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if not gone(p)]


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGHUP"])
def test_ctrl_c_stops_every_process_the_demo_started_and_frees_its_ports(product, signal_name, tmp_path):
    """SIGINT is Ctrl-C; SIGHUP is the terminal closing (on which gunicorn alone would reload, not stop)."""
    supervisor, port, redis_port, run_dir = product()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=10) as response:
        assert response.status == 200  # the console answers
    groups = everything_started(supervisor, run_dir)
    assert sorted(groups) == ["beat", "descendants", "redis", "watch", "web", "worker"]
    assert len(groups["web"]) >= 3 and len(groups["worker"]) >= 3  # gunicorn's and Celery's forks too
    pids = {pid for members in groups.values() for pid in members}

    os.killpg(supervisor.pid, getattr(signal, signal_name))  # as the terminal does: its foreground group
    try:
        assert supervisor.wait(timeout=60) == 0
    except subprocess.TimeoutExpired:
        pytest.fail(
            "the supervisor did not stop within 60 s; still running: "
            f"{ {name: [p for p in members if not gone(p)] for name, members in groups.items()} }\n"
            + (tmp_path / "supervisor.log").read_text()
        )
    assert not wait_gone(pids), "left running: " + str(
        {name: [p for p in members if not gone(p)] for name, members in groups.items()}
    )
    assert port_is_free(port) and port_is_free(redis_port)
    assert not list(run_dir.glob("*.pid"))


def test_down_stops_what_a_killed_supervisor_left_by_pid_file_and_by_port(product):
    supervisor, port, redis_port, run_dir = product()
    groups = everything_started(supervisor, run_dir)
    pids = {pid for name, members in groups.items() if name != "descendants" for pid in members}
    (run_dir / "web.pid").unlink()  # the console must then be found by its port
    os.kill(supervisor.pid, signal.SIGKILL)  # a supervisor that could not clean up
    supervisor.wait(timeout=10)
    time.sleep(0.5)
    assert all(not gone(p) for p in pids)  # left behind, as after the reported Ctrl-C
    assert not port_is_free(port)

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.demo",
            "down",
            "--product-only",
            "--port",
            str(port),
            "--redis-port",
            str(redis_port),
            "--run-dir",
            str(run_dir),
        ],
        cwd=REPO,
        env={**os.environ, "DJANGO_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"the listener on port {port}" in result.stdout and "worker" in result.stdout
    assert not wait_gone(pids)
    assert port_is_free(port) and port_is_free(redis_port) and not list(run_dir.glob("*.pid"))


def test_a_child_that_dies_is_restarted_and_the_console_stays_up(product, tmp_path):
    """Issue 39: Redis SIGKILLed mid-operation stopped the whole demo ("redis exited (code -9): stopping the demo").
    Now the supervisor restarts it (and a worker or beat likewise), says so, and the console keeps answering."""
    supervisor, port, redis_port, run_dir = product()
    groups = everything_started(supervisor, run_dir)
    redis_pid = groups["redis"][0]
    os.killpg(redis_pid, signal.SIGKILL)
    worker_pid = json.loads((run_dir / "worker.pid").read_text())["pid"]
    os.killpg(worker_pid, signal.SIGKILL)  # a worker killed with its pool
    log = tmp_path / "supervisor.log"
    deadline = time.monotonic() + 30
    while not ("redis restarted" in log.read_text() and "worker restarted" in log.read_text()):
        assert supervisor.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.2)
    text = log.read_text()
    assert "redis exited (code -9) after" in text and "restarting it in 1 s (restart 1 in a row)" in text
    assert "stopping the demo" not in text
    deadline = time.monotonic() + 15
    while port_is_free(redis_port):  # Redis answers again on its port
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert json.loads((run_dir / "redis.pid").read_text())["pid"] != redis_pid
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=10) as response:
        assert response.status == 200  # the console never went down
    assert supervisor.poll() is None
    assert wait_gone([worker_pid]) == []


@pytest.mark.django_db(transaction=True)
def test_redis_killed_mid_switchover_leaves_the_console_up_and_the_switchover_done(
    product, tmp_path, adopted_lab, operator_user, celery_broker, settings
):
    """Issue 39's "Done when", in one run of the demo's processes on the test's database: a switchover confirmed as
    the page does (queued through the demo's Redis to its worker) waits in its drain (pinned writer sessions); Redis
    is SIGKILLed; the supervisor starts it again, the console keeps answering, and the switchover ends done with
    every node writing to the new writer."""
    from conftest import database_url_for_subprocesses
    from apps.audit.actor import Actor
    from apps.fleet.models import Server
    from apps.operations import services, switchover
    from apps.operations.models import Operation, OperationStep
    from lab import demo

    cluster, doubles = adopted_lab
    supervisor, port, redis_port, run_dir = product(database_url=database_url_for_subprocesses())
    everything_started(supervisor, run_dir)  # the worker's pool forked: it consumes
    settings.REDIS_URL = f"redis://127.0.0.1:{redis_port}/0"
    celery_broker(settings.REDIS_URL)
    plan = switchover.plan_switchover(
        cluster, Server.objects.get(port=3312), drain_timeout_ms=30_000, lower_autoinc=False
    )
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user))  # enqueued on commit, to the demo's worker

    def until(check, timeout, what):
        deadline = time.monotonic() + timeout
        while not check():
            assert supervisor.poll() is None and time.monotonic() < deadline, (
                what,
                Operation.objects.get(pk=op.pk).state,
                (tmp_path / "supervisor.log").read_text(),
            )
            time.sleep(0.2)

    until(
        lambda: OperationStep.objects.filter(operation=op, key="wait_drain", state="running").exists(),
        60,
        "the switchover's drain never started",
    )
    redis_pid = json.loads((run_dir / "redis.pid").read_text())["pid"]
    os.killpg(redis_pid, signal.SIGKILL)  # mid-operation: the writer hostgroup drained, its sessions pinned
    until(lambda: "redis restarted" in (tmp_path / "supervisor.log").read_text(), 30, "redis not restarted")
    for double in doubles:  # the pinned sessions finish: now the drain can complete
        double.traffic.clear_sessions(hostgroup=100)
    until(lambda: Operation.objects.get(pk=op.pk).state == "done", 60, "the switchover did not end done")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=10) as response:
        assert response.status == 200  # the console never went down
    assert "stopping the demo" not in (tmp_path / "supervisor.log").read_text()
    writers = "SELECT hostname, port, status FROM runtime_mysql_servers WHERE hostgroup_id=100"
    for double in doubles:
        assert demo.admin_sql(double.port, writers, user=double.user, password=double.password) == (
            ("127.0.0.1", "3312", "ONLINE"),
        )
