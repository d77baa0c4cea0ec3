"""A real Celery worker whose Redis is SIGKILLed and started again (empty) while it holds a message not yet
acknowledged (both pool processes busy) and waits on Redis for the next (BRPOP): it reconnects and consumes again, round after round, instead of
exiting (issue 39; kombu 5.7.0's close of the collected connection: controlplane/broker.py)."""

import shutil
import signal
import subprocess
import time

import pytest

from conftest import free_port

ROUNDS = 4


def start_redis(port, workdir):
    proc = subprocess.Popen(
        [
            shutil.which("redis-server"),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
        ],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    import redis

    client = redis.Redis(port=port, socket_connect_timeout=0.2)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            client.ping()
            return proc
        except redis.ConnectionError:
            time.sleep(0.05)
    pytest.fail(f"redis-server did not answer on {port} within 10 s")


def log_after(proc, mark):
    proc.log.seek(mark)
    return proc.log.read()


def wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    pytest.fail(f"not within {timeout} s: {what}")


def test_a_worker_holding_an_unacknowledged_message_survives_redis_killed_and_restarted(
    db, tmp_path, celery_factory, celery_broker
):
    from controlplane.celery import app

    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    redis_proc = start_redis(port, tmp_path)
    try:
        celery_broker(url)
        worker = celery_factory("worker", url, concurrency=2, args=["--include", "lab.celery_probe"])
        marks = tmp_path / "marks"
        marks.touch()
        for n in range(ROUNDS):
            worker.log.seek(0, 2)
            mark = worker.log.tell()
            app.send_task("lab.probe.hold", args=(4,))
            app.send_task("lab.probe.hold", args=(4,))
            app.send_task("lab.probe.mark", args=(str(marks), f"held {n}"))
            # both pool processes hold: the mark waits in the worker, not acknowledged, one under the prefetch
            # count (2): the worker is also waiting on Redis for the next message (BRPOP)
            wait_for(
                lambda: log_after(worker, mark).count(" received") >= 3 or worker.poll() is not None,
                30,
                "the worker received the three messages",
            )
            redis_proc.send_signal(signal.SIGKILL)
            redis_proc.wait()
            redis_proc = start_redis(port, tmp_path)
            wait_for(
                lambda: "Connected to redis" in log_after(worker, mark) or worker.poll() is not None,
                30,
                "the worker reconnected",
            )
            assert worker.poll() is None, f"round {n}: the worker exited:\n{log_after(worker, mark)[-3000:]}"
            app.send_task("lab.probe.mark", args=(str(marks), f"after {n}"))
            wait_for(
                lambda: f"after {n}\n" in marks.read_text() or worker.poll() is not None,
                30,
                f"round {n}: a message sent after Redis came back was consumed",
            )
            assert worker.poll() is None, f"round {n}: the worker exited:\n{log_after(worker, mark)[-3000:]}"
        assert "Unrecoverable error" not in log_after(worker, 0)
    finally:
        redis_proc.kill()
        redis_proc.wait()
