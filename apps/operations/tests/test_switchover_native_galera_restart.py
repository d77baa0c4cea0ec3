"""A planned switchover through ProxySQL's Galera manager with a ProxySQL node restarted between the drain and the
memory restore (issue 33 §4): the restarted node loads its disk (the configured rows, the weights as they were) and its
Monitor places the old writer again, while the operation goes on with the other node. Whatever the operation's end
(done, or rolled back), every node ends with memory and disk equal to the configuration version, and one writer placed
by Monitor, the same on every node; no drift is reported. On a pair of doubles and on a real 2.7.1 pair."""

import contextlib
import threading
import time

import pytest
from django.utils import timezone

from apps.alerts.tests import test_native_galera_drift as native
from apps.fleet.models import Server
from apps.operations import rollbacks
from apps.operations.models import Operation, PendingRollback
from apps.operations.switchover import plan_switchover

from lab.statement_hooks import at_statement

from .conftest import run_plan
from .test_switchover_native_galera import configured, layers, natively_managed, version_weights

pytestmark = pytest.mark.django_db


@contextlib.contextmanager
def restart_once_drained(node, restart):
    """Restarts `node` (in a thread of its own, the operation going on beside it) as soon as it has answered the
    drain's LOAD MYSQL SERVERS TO RUNTIME, the operation's first of that statement to it (lab/statement_hooks.py:
    armed in the admin client's run(), as lab/bench_faults.py arms its kills). Polling the node's runtime for the
    drain from another thread missed it when the machine was busy (CI's sqlite-1 pass of ee1417b: no poll saw
    OFFLINE_SOFT, and no restart happened)."""
    said = {}

    def start_restart():
        said["thread"] = threading.Thread(target=lambda: said.update(restarted=restart()), daemon=True)
        said["thread"].start()

    with at_statement(node.port, start_restart, sql="LOAD MYSQL SERVERS TO RUNTIME", after=True):
        yield said


def check_restart_mid_switchover(nodes, user, restart):
    cluster = natively_managed(nodes)
    plan = plan_switchover(cluster, Server.objects.get(port=3312))
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    with restart_once_drained(nodes[1], restart) as said:
        op = run_plan(plan, user)
    assert "thread" in said, "the operation never loaded the drain on the second node"
    said["thread"].join(60)
    assert "restarted" in said, said
    deadline = time.monotonic() + 60
    while op.state == "rollback_pending":  # the node was still starting: its part of the rollback is retried
        assert time.monotonic() < deadline, op.error
        time.sleep(0.5)
        PendingRollback.objects.update(next_try_at=timezone.now())
        rollbacks.retry_due()
        op = Operation.objects.get(pk=op.pk)
    assert op.state in ("done", "rolled_back"), (op.state, op.error)
    print(f"restarted {said['restarted']}; the switchover ended {op.state}: {op.error[:300]}")
    weights = version_weights(cluster)
    writer = 3312 if op.state == "done" else 3311
    assert weights == (
        [(3311, 900), (3312, 1000), (3313, 800)] if writer == 3312 else [(3311, 1000), (3312, 900), (3313, 800)]
    ), (op.state, weights)
    for node in nodes:
        native.wait_placed(node, writer)  # one writer, by Monitor, the same on both
    assert [layers(node) for node in nodes] == [configured(weights)] * 2, (op.state, op.error)
    native.no_drift_anywhere(cluster)


def test_a_node_restarted_between_drain_and_memory_restore_on_a_double_pair(
    proxysql_double_factory, galera_healthy, live_redis, operator_user
):
    nodes = proxysql_double_factory(2)
    check_restart_mid_switchover(nodes, operator_user, nodes[1].restart)


def test_a_node_restarted_between_drain_and_memory_restore_on_a_real_pair(
    real_proxysql_factory, galera_healthy, live_redis, operator_user
):
    nodes = [real_proxysql_factory("2.7.1", name=f"galera-restart-{n}") for n in (1, 2)]
    check_restart_mid_switchover(nodes, operator_user, nodes[1].restart)
