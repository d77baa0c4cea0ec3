"""The backends, mirror and latency gates (gates.py), each driven on the canary by the ProxySQL double as a bad change
would make it (ProxySQL's own shunning of a backend it cannot reach, a mirror queue filling up, queries slower),
read from the stored polls, halting the rollout with its figures in the reason, the canary rolled back."""

import time

import pytest

from apps.audit.actor import Actor
from apps.digests import services as digests
from apps.fleet.models import ProxySQLNode
from apps.rollouts import services
from apps.rollouts.models import Rollout, RolloutState

from .test_rollouts import LAYERS, RULE, Poller, build_fleet, once_baking, rule_ids

pytestmark = pytest.mark.django_db(transaction=True)


class DigestPoller(Poller):
    """The ProxySQL poll and the digest poll (its deltas are what the latency gate reads), every `interval` s."""

    def round(self):
        nodes = list(ProxySQLNode.objects.select_related("cluster"))
        super().round()
        digests.poll_round(nodes, threads=4)

    def __enter__(self):
        digests.forget_caches()  # ids of digests a test before stored (its rows are gone: the database was emptied)
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        digests.forget_caches()


def halt_of(rollout, starter, doubles, gate_name, hurt_at, bake_canary_s=20):
    """Run the rollout (the caller's thread hurts the canary meanwhile, saying when in hurt_at); it halts at the
    canary, before its bake ends, rolled back on every node. The failed gate's entry."""
    started = time.monotonic()
    services.start(rollout, actor=Actor.command(starter), enqueue=False)
    assert services.run(rollout.pk) == RolloutState.HALTED
    done = time.monotonic()
    assert done - started < bake_canary_s
    print(f"the {gate_name} gate: hurt to rollback done {done - hurt_at[0]:.2f} s")
    rollout.refresh_from_db()
    assert rollout.halt_reason.startswith("wave 0 failed its health gate: "), rollout.halt_reason
    assert [w["state"] for w in rollout.waves] == ["rolled_back", "pending", "pending"]
    assert [rule_ids(d) for d in doubles] == [{layer: [] for layer in LAYERS}] * len(doubles)
    named = [f for f in rollout.waves[0]["gate"]["failed"] if f["gate"] == gate_name]
    assert named, rollout.waves[0]["gate"]["failed"]
    return rollout, named[0]


def planned(planner, reason, **thresholds):
    return services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason=reason,
        bake_canary_s=20,
        bake_s=0.5,
        **thresholds,
    )


def test_a_backend_the_canary_node_shuns_since_the_change_halts_it(proxysql_double_factory, live_redis, people):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=57000)
    rollout = planned(planner, "backends gate")

    hurt_at = []

    def hurt():  # the canary's clients now use hostgroup 101, whose backends do not answer: ProxySQL shuns them
        doubles[0].traffic.set_sessions(hostgroup=101, count=4, rate=50)
        hurt_at.append(time.monotonic())

    with Poller(interval=0.3):
        hurting = once_baking(rollout, 0, hurt)
        rollout, failed = halt_of(rollout, starter, doubles, "backends", hurt_at)
        hurting.join(5)
    assert failed["node"] == "fleet-0-proxysql-1"
    backends = {b["backend"]: b for b in failed["backends"]}
    assert backends and all(
        b["status"] == "SHUNNED" and b["before"] == "ONLINE" and b["hostgroup"] == 101 for b in backends.values()
    ), backends
    assert "the backends gate on fleet-0-proxysql-1: 127.0.0.1:5700" in rollout.halt_reason
    assert "(hostgroup 101) SHUNNED since the change, ONLINE before" in rollout.halt_reason
    # the other node of the cluster was not gated (the canary is one node) and shunned nothing
    assert "fleet-0-proxysql-2" not in rollout.waves[0]["gate"]["nodes"]


def test_the_canary_mirror_queue_at_its_limit_halts_it(proxysql_double_factory, live_redis, people):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=58000)
    rollout = planned(planner, "mirror gate", max_mirror_queue_share=0.5)

    hurt_at = []

    def hurt():  # mirrored queries arrive far faster than the mirror sessions serve them: the queue fills
        doubles[0].traffic.set_mirror(latency_ms=1000, extra_rate=400000)
        hurt_at.append(time.monotonic())

    with Poller(interval=0.3):
        hurting = once_baking(rollout, 0, hurt)
        rollout, failed = halt_of(rollout, starter, doubles, "mirror", hurt_at)
        hurting.join(5)
        doubles[0].traffic.set_mirror(extra_rate=0)
    assert failed["node"] == "fleet-0-proxysql-1" and failed["threshold"] == 0.5
    assert failed["share"] >= 0.5 and failed["queue"] >= 0.5 * failed["limit"] and failed["limit"] > 0
    assert (
        f"the mirror gate on fleet-0-proxysql-1: mirror queue {failed['queue']:g} of its limit "
        f"{failed['limit']:g}" in rollout.halt_reason
    )
    assert "before (threshold 50% of the limit)" in rollout.halt_reason
    assert rollout.waves[0]["gate"]["nodes"]["fleet-0-proxysql-1"]["mirror_queue_after"] == failed["queue"]


def test_slower_queries_on_the_canary_since_the_change_halt_it(proxysql_double_factory, galera_lab, live_redis, people):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=3311)  # fleet-0's backends: the lab's
    rollout = planned(planner, "latency gate", max_latency_ratio=2)
    for double in doubles[:2]:  # traffic before the change: the window before has digest figures
        double.traffic.set_sessions(hostgroup=101, count=4, rate=200)

    hurt_at = []

    def hurt():  # the change made the canary's queries five times slower
        doubles[0].traffic.set_digests(latency=5)
        hurt_at.append(time.monotonic())

    with DigestPoller(interval=0.3):
        time.sleep(4)
        hurting = once_baking(rollout, 0, hurt)
        rollout, failed = halt_of(rollout, starter, doubles, "latency", hurt_at)
        hurting.join(5)
    for double in doubles[:2]:
        double.traffic.clear_sessions()
    assert failed["cluster"] == "fleet-0" and failed["threshold"] == 2
    assert failed["after"] > 2 * failed["before"] > 0 and failed["queries"] >= 20
    assert (
        f"the latency gate on fleet-0 (fleet-0-proxysql-1): {failed['after']:.2f} ms per query since the change"
        in rollout.halt_reason
    ), rollout.halt_reason
    assert f"{failed['before']:.2f} ms before (threshold x2)" in rollout.halt_reason
    assert not [f for f in rollout.waves[0]["gate"]["failed"] if f["gate"] == "backends"]  # the lab's backends answer


def test_the_thresholds_are_checked_when_planned(proxysql_double_factory, people):
    planner, _ = people
    build_fleet(proxysql_double_factory, 1, first_port=59000)
    for bad in ({"max_latency_ratio": 0.5}, {"max_mirror_queue_share": 0}, {"max_mirror_queue_share": 1.5}):
        with pytest.raises(services.Refused):
            services.plan(
                {"edits": [RULE]},
                {"tags": [["env", "prod"]]},
                "1",
                actor=Actor.command(planner),
                reason="bad thresholds",
                **bad,
            )
    assert not Rollout.objects.exists()


def test_slower_queries_the_change_does_not_touch_leave_the_latency_gate_passing(
    proxysql_double_factory, galera_lab, live_redis, people
):
    """The rule routes `^SELECT rollout_probe` to hostgroup 101: the latency gate reads those digests only. The
    canary's other queries (hostgroup 100, no probe) five times slower since the change are not the change's doing
    (they failed the gate when it read every digest of the node)."""
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=3311)  # fleet-0's backends: the lab's
    rollout = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="latency of untouched digests",
        bake_canary_s=4,
        bake_s=0.5,
        max_latency_ratio=2,
    )
    for double in doubles[:2]:  # traffic before the change, on the writer hostgroup only
        double.traffic.set_sessions(hostgroup=100, count=4, rate=200)

    with DigestPoller(interval=0.3):
        time.sleep(4)
        slowing = once_baking(rollout, 0, lambda: doubles[0].traffic.set_digests(latency=5))
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.DONE, Rollout.objects.get(pk=rollout.pk).halt_reason
        slowing.join(5)
    for double in doubles[:2]:
        double.traffic.clear_sessions()
    rollout.refresh_from_db()
    canary = rollout.waves[0]["gate"]["clusters"]["fleet-0"]
    assert canary["latency_digests"] == "the digests of query rule 77 and of hostgroup 101"
    assert canary["queries_after"] == 0 and canary["latency_ms_before"] is None  # none of them ran
    for double in doubles:
        assert rule_ids(double) == {layer: [77] for layer in LAYERS}


def test_the_digests_a_change_touches_are_those_its_rules_match_or_route_to():
    from apps.rollouts.gates import Scope

    probe = {"rule_id": 77, "match_digest": "^SELECT rollout_probe", "destination_hostgroup": 101}
    scope = Scope([probe], {101}, 1, "rule 77")
    assert scope.covers("0xA1", "SELECT rollout_probe FROM t WHERE id=?", 100, "app", "shop")  # its pattern
    assert not scope.covers("0xB2", "SELECT c FROM sbtest1 WHERE id=?", 100, "app", "shop")
    assert scope.covers("0xB2", "SELECT c FROM sbtest1 WHERE id=?", 101, "app", "shop")  # routed where it routes
    assert not scope.covers("0xC3", "select ROLLOUT_PROBE from t", 100, "app", "shop")
    caseless = Scope([{**probe, "re_modifiers": "CASELESS"}], set(), 1, "rule 77")
    assert caseless.covers("0xC3", "select ROLLOUT_PROBE from t", 100, "app", "shop")
    by_user = Scope([{"rule_id": 5, "username": "report", "destination_hostgroup": None}], set(), 1, "rule 5")
    assert by_user.covers("0xD4", "SELECT 1", 100, "report", "") and not by_user.covers(
        "0xD4", "SELECT 1", 100, "app", ""
    )
    by_digest = Scope([{"rule_id": 6, "digest": "0xABCDEF"}], set(), 2, "rule 6")
    assert by_digest.covers("0xabcdef", "SELECT 1", 100, "app", "") and not by_digest.covers(
        "0x1", "SELECT 1", 100, "app", ""
    )
    negated = Scope([{"rule_id": 8, "match_pattern": "^SELECT", "negate_match_pattern": 1}], set(), 1, "rule 8")
    assert negated.covers("0xE5", "UPDATE t SET a=?", 100, "app", "")  # a negated pattern narrows nothing here
    everything = Scope(None, set(), 1, "every digest (the change edits no query rule)")
    assert everything.covers("0xF6", "SELECT anything", 7, "any", "")
