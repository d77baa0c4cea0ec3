"""The latency gate matches the change's query rules against the stored digest texts (gates.Scope.covers): an
operator's draft of costly patterns is bounded there as in the rule tester (one budget a gate read,
RULE_WALK_BUDGET_S), and a digest it cannot tell about counts as touched (issue 34: every place a pattern runs)."""
import time

from django.conf import settings as django_settings
from hypothesis import given, settings as hypothesis_settings, strategies as st

from apps.configuration import rule_tester
from apps.monitoring.tests.test_rule_regex import BELOW_THE_LIMIT, DIGEST_TEXTS, PATHOLOGICAL, within
from apps.rollouts.gates import Scope


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
    cpu = time.thread_time()
    with within(3):
        answers = covered(scope)
    assert time.thread_time() - cpu < settings.RULE_WALK_BUDGET_S + 0.5
    # The pattern matches no digest text: the few texts searched before the budget are told apart, the rest are not
    # known and counted as touched (never left out of the gate's figures).
    assert answers.count(False) < 20 and all(answers[20:])
    assert scope.not_measured >= 1  # those met: a digest one rule touches is not searched by the others
    assert scope.said.endswith(f"({scope.not_measured} rules' patterns too costly to test: every digest they might "
                               "match counted)")


def test_ordinary_patterns_still_decide_which_digests_are_touched():
    scope = Scope([rule(1, "^INSERT INTO orders"), rule(2, "^update", "match_pattern")], {10}, rule_tester.PCRE, "")
    answers = covered(scope)
    assert [t for t, yes in zip(DIGEST_TEXTS, answers) if yes] == [
        t for t in DIGEST_TEXTS if t.startswith("INSERT INTO orders") or t.upper().startswith("UPDATE")]
    assert scope.not_measured == 0


@hypothesis_settings(max_examples=40, deadline=None)
@given(patterns=st.lists(PATHOLOGICAL, min_size=1, max_size=4), engine=st.sampled_from([rule_tester.PCRE,
                                                                                        rule_tester.RE2]))
def test_fuzz_pathological_patterns_in_the_latency_gate_never_raise_and_stay_bounded(patterns, engine):
    scope = Scope([rule(i, p) for i, p in enumerate(patterns, 1)], set(), engine, "")
    with within(django_settings.RULE_WALK_BUDGET_S + 2):
        answers = covered(scope)
    assert len(answers) == len(DIGEST_TEXTS)
