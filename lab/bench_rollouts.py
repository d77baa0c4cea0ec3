"""Fleet rollouts (issue 38) at 50 clusters of 2 ProxySQL doubles (not collected by pytest: no test_ prefix; run by
path, prints its figures):

    CLUSTERS=50 .venv/bin/pytest lab/bench_rollouts.py -q -s

The fleet as the rollout tests build it (one DoubleServer thread serves every double, each cluster its own backends
on closed ports), adopted through the product; a poll thread starts a round of every node at the clusters' default
interval (Cluster.poll_interval_s, 2 s), as beat's ticks do, and the rollout runs in this process as the worker's
task does (services.run). Two figures:

1. overhead: a harmless rule to every cluster in waves 1,1,25%,100% (5 waves: the canary node, the rest of its
   cluster, then up to 25 % of the fleet, then the rest), bakes CANARY_BAKE / BAKE seconds; the overhead is the
   wall time beyond the bakes (plan excluded, measured apart), in all and per cluster.
2. a bad canary: a second rule, the canary baked at the default 60 s; once it bakes, its node counts aborted client
   connections (as a rule that breaks queries makes it); the time from those first errors to run() back with the
   canary rolled back (the canary's gate reads at its node's next poll, at the latest every GATE_STEP_S; the errors
   are rates between two polls).
Bounded: one pass of each, then the fleet is stopped (the machine is shared).
"""

import os
import platform
import time
from datetime import datetime

import pytest

from apps.audit.actor import Actor
from apps.fleet.models import Cluster
from apps.rollouts import services
from apps.rollouts.models import Rollout, RolloutState
from apps.rollouts.tests.conftest import people  # noqa: F401 (the fixture: a planner and a second operator)
from apps.rollouts.tests.test_rollouts import RULE, Poller, build_fleet, once_baking, rule_ids

CLUSTERS = int(os.environ.get("CLUSTERS", "50"))
CANARY_BAKE = float(os.environ.get("CANARY_BAKE", "2"))
BAKE = float(os.environ.get("BAKE", "1"))


class FixedRatePoller(Poller):
    """A poll round every `period` seconds from its start, as beat's ticks are (the tests' Poller waits a whole
    interval after each round); the rounds' durations kept."""

    def __init__(self, period):
        super().__init__(period)
        self.period, self.rounds = period, []

    def round(self):
        began = time.monotonic()
        super().round()
        self.rounds.append(time.monotonic() - began)
        self.interval = max(0.0, self.period - self.rounds[-1])


@pytest.mark.django_db(transaction=True)
def test_bench_rollouts(proxysql_double_factory, live_redis, people):  # noqa: F811 (the fixture imported)
    planner, starter = people
    began = time.monotonic()
    clusters, doubles = build_fleet(proxysql_double_factory, CLUSTERS, first_port=20000)
    interval = Cluster._meta.get_field("poll_interval_s").default
    print(
        f"\n{CLUSTERS} clusters of 2 doubles adopted in {time.monotonic() - began:.1f} s; polled every "
        f"{interval:g} s; gate read every {services.GATE_STEP_S:g} s; machine {platform.node()}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )

    with FixedRatePoller(interval) as poller:
        time.sleep(2 * interval)  # a window before the first wave
        # 1. the rollout's own overhead beyond its bakes
        began = time.monotonic()
        rollout = services.plan(
            {"edits": [RULE]},
            {"tags": [["env", "prod"]]},
            "1,1,25%,100%",
            actor=Actor.command(planner),
            reason="bench: a harmless rule",
            bake_canary_s=CANARY_BAKE,
            bake_s=BAKE,
        )
        planned_s = time.monotonic() - began
        began = time.monotonic()
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        state = services.run(rollout.pk)
        wall = time.monotonic() - began
        rollout.refresh_from_db()
        assert state == RolloutState.DONE, rollout.halt_reason
        assert all(rule_ids(d)["runtime"] == [77] for d in doubles)
        bakes = CANARY_BAKE + BAKE * (len(rollout.waves) - 1)
        print(
            f"harmless rule, {len(rollout.waves)} waves of {[len(w['clusters']) for w in rollout.waves]} "
            f"clusters: planned in {planned_s:.2f} s; run {wall:.1f} s, bakes {bakes:g} s, overhead "
            f"{wall - bakes:.1f} s ({(wall - bakes) / CLUSTERS:.2f} s per cluster); load average "
            f"{os.getloadavg()[0]:.2f}"
        )

        # 2. a bad canary: its first errors to its rollback done, at the default canary bake (60 s)
        bad = dict(RULE, row={**RULE["row"], "rule_id": 78, "match_digest": "^SELECT broken"})
        rollout = services.plan(
            {"edits": [bad]},
            {"tags": [["env", "prod"]]},
            "1,1,25%,100%",
            actor=Actor.command(planner),
            reason="bench: a rule that hurts",
        )
        hurt_at = []

        def hurt():
            doubles[0].traffic.set_global("Client_Connections_aborted", 10**6)
            hurt_at.append((time.monotonic(), time.time()))

        hurting = once_baking(rollout, 0, hurt)
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        state = services.run(rollout.pk)
        done = time.monotonic()
        hurting.join(5)
        rollout.refresh_from_db()
        assert state == RolloutState.HALTED and "the errors gate" in rollout.halt_reason, rollout.halt_reason
        assert rule_ids(doubles[0])["runtime"] == [77]  # the canary rolled back
        failed_at = datetime.fromisoformat(rollout.waves[0]["gate"]["at"]).timestamp()  # the failing reading
        print(
            f"bad canary (bake {rollout.bake_canary_s:g} s): first errors to rollback done "
            f"{done - hurt_at[0][0]:.2f} s (the gate failed {failed_at - hurt_at[0][1]:.2f} s after the first "
            f"errors, the rollback done {done - hurt_at[0][0] - (failed_at - hurt_at[0][1]):.2f} s after that); "
            f"load average {os.getloadavg()[0]:.2f}"
        )
    print(
        f"poll rounds of {2 * CLUSTERS} nodes: {len(poller.rounds)}, median {sorted(poller.rounds)[len(poller.rounds) // 2]:.2f} s, "
        f"longest {max(poller.rounds):.2f} s"
    )
    assert Rollout.objects.count() == 2
