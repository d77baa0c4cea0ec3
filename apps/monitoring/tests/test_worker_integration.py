"""The real thing end to end: a Celery worker and beat (subprocesses) with a real Redis broker poll the
adopted lab on their own; latest state and history appear within a few seconds."""

import time

import pytest

from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import live
from apps.monitoring.models import BackendSample, ProxySQLSample

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def celery_processes(live_redis, redis_server, celery_factory):
    worker = celery_factory("worker", redis_server, MONITOR_SHARDS=2)
    beat = celery_factory("beat", redis_server, MONITOR_SHARDS=2)
    return {"worker": worker.log, "beat": beat.log}


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_worker_and_beat_poll_the_lab(adopted_lab, celery_processes):
    node_pks = list(ProxySQLNode.objects.values_list("pk", flat=True))
    server_pks = list(Server.objects.values_list("pk", flat=True))

    def all_live():
        docs = {
            **live.read_many(live.PROXYSQL, node_pks),
            **{("b", k): v for k, v in live.read_many(live.BACKEND, server_pks).items()},
        }
        return all(doc and doc["ok"] for doc in docs.values())

    ok = wait_for(all_live, 30)
    if not ok:
        for name, log in celery_processes.items():
            log.seek(0)
            print(f"--- {name} log\n{log.read()[-4000:]}")
    assert ok, "worker and beat did not bring every node's latest state within 30 s"
    # History accumulates at the cluster's interval (2 s): several polls within a few seconds.
    assert wait_for(lambda: ProxySQLSample.objects.filter(node_id=node_pks[0]).count() >= 3, 15)
    assert BackendSample.objects.filter(server_id__in=server_pks, local_state=4).exists()
    doc = live.read_one(live.PROXYSQL, node_pks[0])
    assert time.time() - doc["ts"] < 5 and doc["figures"]["questions_ps"] is not None
