"""A canary's gate judges its node's poll as soon as that node is polled (issue 38, a bad canary rolled back within
5 s): a poll round publishes each node's latest-state document when that node is done, but stores the round's
history only once every node is; with one slow node elsewhere in the fleet the canary's errors sat in Redis while
the gate, reading the history only, saw nothing."""

import threading
import time

import pytest
from django.utils import timezone

from apps.audit.actor import Actor
from apps.fleet.models import ProxySQLNode
from apps.monitoring import live, pollers
from apps.monitoring.models import ProxySQLSample
from apps.rollouts import services

from .test_rollouts import RULE, build_fleet

pytestmark = pytest.mark.django_db(transaction=True)


def polled_since(node, ts, timeout=10):
    """Wait until the node's latest-state document is of a poll after `ts`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = live.read_one(live.PROXYSQL, node.pk)
        if doc and doc["ts"] > ts:
            return True
        time.sleep(0.02)
    return False


def a_round(now=None):
    pollers.proxysql_round(list(ProxySQLNode.objects.select_related("cluster")), threads=4, now=now)


def polled_fleet(factory, clusters, planner, reason):
    """(doubles, the canary's node, a rollout of RULE to fleet-0): every node polled twice (the polls have rates)."""
    _, doubles = build_fleet(factory, clusters)
    a_round()
    time.sleep(0.3)
    a_round()
    rollout = services.plan({"edits": [RULE]}, {"names": ["fleet-0"]}, "1", actor=Actor.command(planner), reason=reason)
    return doubles, ProxySQLNode.objects.get(name="fleet-0-proxysql-1"), rollout


def test_the_canary_gate_reads_the_canarys_poll_before_the_round_is_stored(proxysql_double_factory, live_redis, people):
    doubles, canary, rollout = polled_fleet(proxysql_double_factory, 2, people[0], "the gate's latest poll")
    canary_double, slow_double = doubles[0], doubles[3]  # fleet-0's first node; a node of fleet-1
    started = applied = timezone.now()
    time.sleep(0.05)
    canary_double.traffic.set_global("Client_Connections_aborted", 10**6)  # the canary's errors begin
    slow_double.set_mode("normal", latency_ms=400)  # its poll: several statements, each 0.4 s late
    polling = threading.Thread(target=a_round, daemon=True)
    try:
        polling.start()
        assert polled_since(canary, applied.timestamp())  # the canary polled, its document published
        assert polling.is_alive() and not ProxySQLSample.objects.filter(node=canary, ts__gte=applied).exists()
        verdict = services.gate(rollout, 0, started, applied, nodes=[canary.pk])
        assert not verdict["ok"] and verdict["why"].startswith("the errors gate on fleet-0-proxysql-1: "), verdict
        assert live.read_one(live.PROXYSQL, canary.pk)["figures"]["client_connections_aborted_ps"] > 1000
    finally:
        slow_double.set_mode("normal", latency_ms=0)
        polling.join(30)
    # once stored, the same poll is counted once: the gate says the same from the history
    assert ProxySQLSample.objects.filter(node=canary, ts__gte=applied).count() == 1
    again = services.gate(rollout, 0, started, applied, nodes=[canary.pk])
    assert again["nodes"]["fleet-0-proxysql-1"]["errors_per_s_after"] == pytest.approx(  # stored as a float32
        verdict["nodes"]["fleet-0-proxysql-1"]["errors_per_s_after"], rel=1e-6
    )


def test_the_gate_counts_errors_read_by_a_round_that_began_before_the_change(
    proxysql_double_factory, live_redis, people
):
    """A round's rows carry the round's start time while each node is read later: the round that began between the
    wave's start and the change, and read the canary after the change's errors began, is the change's (CI once saw
    a bad canary pass its gate when its only errors were read by such a round)."""
    doubles, canary, rollout = polled_fleet(proxysql_double_factory, 1, people[0], "a straddling round")
    started = timezone.now()
    time.sleep(0.05)
    round_began = time.time()  # a round begins while the change is being applied
    time.sleep(0.05)
    applied = timezone.now()
    doubles[0].traffic.set_global("Client_Connections_aborted", 10**6)  # the change's errors begin
    a_round(now=round_began)
    assert ProxySQLSample.objects.filter(node=canary, ts__gte=started, ts__lt=applied).count() == 1
    verdict = services.gate(rollout, 0, started, applied, nodes=[canary.pk])
    assert not verdict["ok"] and verdict["why"].startswith("the errors gate on fleet-0-proxysql-1: "), verdict
    assert verdict["nodes"]["fleet-0-proxysql-1"]["errors_per_s_after"] > 1000
