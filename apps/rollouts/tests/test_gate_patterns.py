"""The latency gate matches the change's query rules against the stored digest texts (gates.Scope.covers): an
operator's draft of costly patterns is bounded there as in the rule tester (one budget a gate read,
RULE_WALK_BUDGET_S), and a digest it cannot tell about counts as touched (issue 34: every place a pattern runs)."""

import time
from datetime import datetime, timedelta, timezone

import pytest
from django.conf import settings as django_settings
from hypothesis import given, settings as hypothesis_settings, strategies as st

from apps.audit.actor import Actor
from apps.configuration import content as C, rule_tester, services as config
from apps.configuration.models import ChangeSet
from apps.digests.tests.factories import digest, fleet, source, stat
from apps.monitoring.tests.test_rule_regex import BELOW_THE_LIMIT, DIGEST_TEXTS, PATHOLOGICAL, cpu_spent, within
from apps.rollouts import gates
from apps.rollouts.gates import Scope
from apps.rollouts.models import Rollout, RolloutCluster


def rule(rule_id, pattern, column="match_digest"):
    return {"rule_id": rule_id, column: pattern, "re_modifiers": "CASELESS", "destination_hostgroup": 10}


def covered(scope):
    return [scope.covers(f"0x{i:016X}", text, 0, "app", "shop") for i, text in enumerate(DIGEST_TEXTS)]


def test_a_draft_of_costly_patterns_is_read_within_the_walk_budget_and_counted_as_touched(settings):
    """Before: no budget (each search just under PCRE's match limit, about 2.5 ms): 40 such rules over a poll's 300
    digest texts took about 30 s of CPU at every gate read, per cluster of the wave."""
    settings.RULE_WALK_BUDGET_S = 0.5
    rules = [rule(i, f"{BELOW_THE_LIMIT}(?#{i})") for i in range(1, 41)]
    scope = Scope(rules, {10}, rule_tester.PCRE, "the digests of query rules 1..40")
    with cpu_spent() as cpu, within(3):
        answers = covered(scope)
    assert cpu.seconds < settings.RULE_WALK_BUDGET_S + 0.5, cpu.seconds
    # The pattern matches no digest text: the few texts searched before the budget are told apart, the rest are not
    # known and counted as touched (never left out of the gate's figures).
    assert answers.count(False) < 20 and all(answers[20:])
    assert scope.not_measured >= 1  # those met: a digest one rule touches is not searched by the others
    # Usually 2 (the rule met as the budget ran out, then rule 1 at the next text); 1 when it ran out at the last
    # rule of a text (about 1 run in 40: CI met it): "1 rule's", as the product says it.
    whose = "rule's" if scope.not_measured == 1 else "rules'"
    assert scope.said.endswith(
        f"({scope.not_measured} {whose} patterns too costly to test: every digest they might match counted)"
    ), scope.said


def test_ordinary_patterns_still_decide_which_digests_are_touched():
    scope = Scope([rule(1, "^INSERT INTO orders"), rule(2, "^update", "match_pattern")], {10}, rule_tester.PCRE, "")
    answers = covered(scope)
    assert [t for t, yes in zip(DIGEST_TEXTS, answers) if yes] == [
        t for t in DIGEST_TEXTS if t.startswith("INSERT INTO orders") or t.upper().startswith("UPDATE")
    ]
    assert scope.not_measured == 0


@hypothesis_settings(max_examples=40, deadline=None)
@given(
    patterns=st.lists(PATHOLOGICAL, min_size=1, max_size=4), engine=st.sampled_from([rule_tester.PCRE, rule_tester.RE2])
)
def test_fuzz_pathological_patterns_in_the_latency_gate_never_raise_and_stay_bounded(patterns, engine):
    scope = Scope([rule(i, p) for i, p in enumerate(patterns, 1)], set(), engine, "")
    with within(django_settings.RULE_WALK_BUDGET_S + 2):
        answers = covered(scope)
    assert len(answers) == len(DIGEST_TEXTS)


@pytest.mark.django_db
def test_the_readings_of_one_bake_judge_the_digests_once(settings, operator_user):
    """A bake reads the gate every GATE_STEP_S: before, each reading searched the costly patterns again, up to the
    whole budget at every reading (twice a second for the whole bake). Now the bake keeps what it judged (gates.Kept)."""
    settings.RULE_WALK_BUDGET_S = 0.5
    cluster, (node, _) = fleet(2, "gated")
    content = C.empty()
    content["roles"] = {"writer": 100, "reader": 101}
    version = config.record_version(cluster, content, actor=Actor.system(), reason="base", source="change")
    cs = ChangeSet.objects.create(
        cluster=cluster,
        base=version,
        author_name="x",
        edits=[
            {"op": "upsert", "table": "mysql_query_rules", "row": rule(i, f"{BELOW_THE_LIMIT}(?#{i})")}
            for i in range(1, 41)
        ],
    )
    rollout = Rollout.objects.create(reason="r", change={"edits": cs.edits}, waves_text="1", planner="x")
    RolloutCluster.objects.create(rollout=rollout, cluster=cluster, wave=0, position=0, change_set=cs)
    now = int(time.time())
    for i, text in enumerate(DIGEST_TEXTS):
        stat(source(node, 100), digest(text, h=f"0x{i:016X}"), now - 5, 10, 1000)
    started = datetime.now(timezone.utc) - timedelta(seconds=60)
    kept = gates.Kept()
    cpu = []
    for _ in range(3):
        reading = gates.Reading(
            rollout, [(node.pk, node.name, cluster.name)], started, started, timedelta(seconds=60), kept=kept
        )
        took = time.thread_time()
        with within(3):
            gates.latency(reading)
        cpu.append(time.thread_time() - took)
        assert "patterns too costly to test" in reading.clusters[cluster.name]["latency_digests"]
    assert cpu[0] < settings.RULE_WALK_BUDGET_S + 0.5
    assert cpu[1] < 0.2 and cpu[2] < 0.2, cpu  # before: each reading spent the budget again
