"""The rule tester and the effect check run rule patterns bounded (apps/monitoring/rule_regex.py): a pattern that
reaches PCRE's match limit is told (a step's reason, a blocking finding), never an exception, never a stall."""

import re
import time

import pytest
from hypothesis import given, settings, strategies as st

from apps.audit.actor import Actor
from apps.configuration import services
from apps.configuration.findings import regex_error, traffic_findings
from apps.configuration.rule_tester import BATCH_BUDGET_S, CHEAP_S, PCRE, RE2, Batch, OverBudget, compiled, evaluate
from apps.configuration.tests.test_findings import BASE, BASE_SERVERS, config, rule
from apps.digests.selectors import Traffic, TrafficRow
from apps.digests.tests.factories import digest, source, stat
from apps.fleet.models import ProxySQLNode
from apps.monitoring.tests.test_rule_regex import (
    AT_THE_LIMIT,
    BELOW_THE_LIMIT,
    DIGEST_TEXTS,
    PATHOLOGICAL,
    STALLING,
    cpu_spent,
    within,
)


def traffic():
    return Traffic(
        rows=[
            TrafficRow(f"0x{i:016X}", text, "app", "sbtest", "10.0.0.5", 100, 10_000)
            for i, text in enumerate(DIGEST_TEXTS)
        ],
        seconds=3600,
    )


def test_a_pattern_at_the_match_limit_is_no_match_with_its_reason_not_an_error():
    rules = [
        rule(5, match_digest=AT_THE_LIMIT, destination_hostgroup=101, apply=1),
        rule(10, match_digest="^SELECT", destination_hostgroup=100, apply=1),
    ]
    with within(2):
        out = evaluate(rules, digest_text="SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c=?")
    assert not out.steps[0].matched and out.hostgroup == 100
    assert "reaches the match limit on 'SELECT c FROM sbtest1" in out.steps[0].reason
    assert out.steps[0].limit.startswith(f"match_digest {AT_THE_LIMIT!r}: this pattern reaches the match limit")
    # A global rewrite that matches once, then reaches the limit further on, leaves the query as it was.
    rewrite = [
        rule(5, match_pattern="^SELECT", replace_pattern="SELECT /* x */"),
        rule(6, match_pattern=r"^S|(\w+\s?)*;$", replace_pattern="z", re_modifiers="GLOBAL"),
    ]
    with within(2):
        out = evaluate(rewrite, "SELECT c FROM sbtest1 WHERE id BETWEEN a AND b ORDER BY c; x")
    assert out.rewritten == "SELECT /* x */ c FROM sbtest1 WHERE id BETWEEN a AND b ORDER BY c; x"
    assert out.steps[1].matched and "no rewrite: this pattern reaches the match limit" in out.steps[1].sets[-1]


def test_the_effect_check_over_a_polls_digests_ends_in_time_with_a_blocking_finding():
    target = config(
        BASE_SERVERS,
        BASE["mysql_query_rules"]
        + [
            rule(5, match_digest=AT_THE_LIMIT, destination_hostgroup=101, apply=1),
            rule(6, match_digest=STALLING, mirror_hostgroup=101),
        ],
        BASE["mysql_users"],
    )
    start = time.monotonic()
    with within(2):
        found = traffic_findings(target, {(5,), (6,)}, traffic(), {})
    assert time.monotonic() - start < 2
    limits = [f for f in found if f.key == "regex_match_limit"]
    assert [f.label for f in limits] == ["Rule 5's pattern reaches PCRE's match limit on the stored traffic"]
    assert limits[0].blocking and "this pattern reaches the match limit on 'SELECT c FROM sbtest1" in limits[0].value


@settings(max_examples=60, deadline=None)
@given(
    pattern=PATHOLOGICAL,
    column=st.sampled_from(["match_digest", "match_pattern"]),
    engine=st.sampled_from([PCRE, RE2]),
    negate=st.booleans(),
    caseless=st.booleans(),
)
def test_fuzz_pathological_patterns_in_the_rule_tester_and_the_effect_check(pattern, column, engine, negate, caseless):
    modifiers = "CASELESS" if caseless else ""
    rules = BASE["mysql_query_rules"] + [
        rule(
            5,
            **{column: pattern},
            negate_match_pattern=int(negate),
            re_modifiers=modifiers,
            replace_pattern="x" if column == "match_pattern" else None,
            destination_hostgroup=101,
            apply=1,
        )
    ]
    target = config(BASE_SERVERS, rules, BASE["mysql_users"], {"mysql-query_processor_regex": str(engine)})
    with within(3):
        assert regex_error(pattern, modifiers, engine) in (None, regex_error(pattern, modifiers, engine))
        for text in DIGEST_TEXTS[::10]:
            out = evaluate(rules, text + " =", engine=engine, username="app", users=BASE["mysql_users"])
            assert out.steps and out.hostgroup is not None
        found = traffic_findings(target, {(5,)}, traffic(), {})
    assert all(f.key in ("regex_match_limit", "rule_traffic_share", "mirror_load", "mirror_overload") for f in found)


@pytest.mark.django_db
def test_the_plan_of_a_draft_rule_at_the_match_limit_answers_with_the_finding(client, adopted_lab, operator_user):
    """Issue 34: the plan of such a draft answered 500 (LibraryError in the effect check's walk over the traffic)."""
    cluster, _ = adopted_lab
    now = int(time.time())
    for n in ProxySQLNode.objects.filter(cluster=cluster):
        src = source(n, hostgroup=100, username="utest", schemaname="sbtest")
        for i, text in enumerate(DIGEST_TEXTS[:60]):
            stat(src, digest(text, h=f"0x{i + 1:016X}"), now - 600, 10, 1000)
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="a backtracking rule")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 5, "active": 1, "match_digest": AT_THE_LIMIT, "destination_hostgroup": 101, "apply": 1},
        },
        actor=Actor.command(operator_user),
    )
    client.force_login(operator_user)
    start = time.monotonic()
    response = client.post(f"/configuration/change-sets/{cs.pk}/plan/", {"reason": "a backtracking rule"}, follow=True)
    assert response.status_code == 200 and time.monotonic() - start < 30
    html = response.content.decode()
    assert "Rule 5&#x27;s pattern reaches PCRE&#x27;s match limit on the stored traffic" in html
    assert "this pattern reaches the match limit on" in html


def test_a_pattern_just_under_the_match_limit_stops_at_its_budget_over_the_stored_traffic():
    """Hostile input, third round: BELOW_THE_LIMIT reaches no match limit but takes about 2.5 ms a search; over a
    few hundred stored digests the effect check spent seconds of a request on it. Now its searches stop after
    BATCH_BUDGET_S of CPU over the batch and the plan says so (blocking)."""
    rows = [
        TrafficRow(f"0x{i:016X}", f"{text} /* {i} */", "app", "sbtest", "10.0.0.5", 100, 10_000)
        for i, text in enumerate(DIGEST_TEXTS * 20)
    ]
    target = config(
        BASE_SERVERS,
        BASE["mysql_query_rules"] + [rule(5, match_digest=BELOW_THE_LIMIT, destination_hostgroup=101, apply=1)],
        BASE["mysql_users"],
    )
    with cpu_spent() as cpu:
        found = traffic_findings(target, {(5,)}, Traffic(rows=rows, seconds=3600), {})
    assert cpu.seconds < BATCH_BUDGET_S + 0.3, cpu.seconds
    costly = [f for f in found if f.key == "regex_match_limit"]
    assert [f.label for f in costly] == ["Rule 5's pattern is too costly to measure on the stored traffic"]
    assert costly[0].blocking and "this pattern took more than 200 ms of searches" in costly[0].value
    # One walk on its own tells the same in its step, never an exception.
    batch = Batch()
    for row in rows:
        out = evaluate(target["mysql_query_rules"], digest_text=row.digest_text, reached=batch)
    assert "not run: counted as no match here" in out.steps[[s.rule_id for s in out.steps].index(5)].reason


# -- the budget of one request's walks (issue 34: the per-pattern budget left a request's cost at the number of costly
# patterns times 200 ms: a draft of a thousand such rules took minutes to plan) --------------------------------------
def stored_rows(n=5000):
    texts = [f"{text} /* {i} */" for i, text in enumerate(DIGEST_TEXTS * (n // len(DIGEST_TEXTS) + 1))]
    return [TrafficRow(f"0x{i:016X}", texts[i], "app", "sbtest", "10.0.0.5", 100, 10_000) for i in range(n)]


def test_a_draft_of_many_costly_patterns_is_planned_within_the_request_budget_and_says_what_was_not_measured(settings):
    """300 distinct patterns just under the match limit (2.4 ms a search each): 0.7 s a stored row, so the old code
    spent its 200 ms per pattern on each, a minute of CPU. Now the walks stop at the request's budget and every rule
    is said as not measured (never a share of 0 %)."""
    settings.RULE_WALK_BUDGET_S = 1.0
    costly = [
        rule(
            100 + i,
            match_digest=BELOW_THE_LIMIT.replace("(;|=|$)", f"(;|=|$|{i}z)"),
            apply=0,
            destination_hostgroup=101,
        )
        for i in range(300)
    ]
    ordinary = [rule(1, match_digest="^UPDATE", destination_hostgroup=100), rule(2, match_digest="^SELECT")]
    target = config(BASE_SERVERS, ordinary + costly, BASE["mysql_users"])
    changed = {(r["rule_id"],) for r in ordinary + costly}
    with cpu_spent() as cpu, within(2.5):
        found = traffic_findings(target, changed, Traffic(rows=stored_rows(), seconds=3600), {})
    assert cpu.seconds < 1.0 + 0.5, cpu.seconds
    assert not [f for f in found if f.key == "rule_traffic_share"]
    [missing] = [f for f in found if f.key == "rules_not_measured"]
    assert missing.blocking and missing.label == "302 new or changed rule(s) not measured on the stored traffic"
    assert "passed their budget of 1 s of CPU (RULE_WALK_BUDGET_S) after " in missing.value
    assert " of 5,000 stored digest rows, so what rules 1, 2, 100, 101, " in missing.value
    assert "not reported as capturing nothing" in missing.value and "(rule 1" in missing.value.split("costliest")[1]


def test_one_walk_through_a_thousand_costly_rules_stops_at_the_budget_and_tells_which_were_not_tested(settings):
    """The rule tester and the digest page walk a few queries through every rule: a thousand costly patterns took
    2.4 s a walk (each under its own budget); the page's columns share one Batch and so one budget."""
    settings.RULE_WALK_BUDGET_S = 0.5
    rules = [
        rule(100 + i, match_digest=BELOW_THE_LIMIT.replace("(;|=|$)", f"(;|=|$|{i}z)"), destination_hostgroup=101)
        for i in range(1000)
    ] + [rule(5000, match_digest="^SELECT", destination_hostgroup=100)]
    batch = Batch()
    text = "SELECT c FROM sbtest1 WHERE id BETWEEN ? AND ? ORDER BY c"
    with within(1.5):
        first = evaluate(rules, digest_text=text, reached=batch)
        second = evaluate(rules, digest_text=text, reached=batch)  # the tester's second column: nothing left to run
    skipped = [s for s in first.steps if "not run: this request's rule walks passed their budget of 0.5 s" in s.reason]
    assert 0 < len(skipped) < 1000 and all(not s.matched and s.limit for s in skipped)
    assert f"{len(skipped)} rule(s) were not tested (" in " ".join(first.notes)
    assert first.steps[-1].rule_id == 5000 and not first.steps[-1].matched  # not run: not said as "does not match"
    assert "so the rules after it may not be walked as ProxySQL would" in first.steps[-1].reason
    assert "1001 rule(s) were not tested (100, 101, " in " ".join(second.notes)


def test_an_ordinary_big_rule_set_over_the_stored_traffic_is_measured_in_full():
    """5,000 stored rows x 50 ordinary rules (1-3 us a search; 1.5 s of CPU for the whole check on a quiet 2-core
    machine) stay under the default budget. Half the rules share the read/write split's `^SELECT` (as a generated
    rule set does, each with its own cache or comment): 125,000 cheap searches of one pattern, which the old
    per-pattern budget cut as "too costly" (its 200 ms were spent, at 2 us a search)."""
    from django.conf import settings

    assert settings.RULE_WALK_BUDGET_S == 5.0
    shared = [rule(10 + i, match_digest="^SELECT", cache_ttl=1000 + i) for i in range(25)]
    tables = [rule(100 + t, match_digest=rf"\bsbtest{t}\b", destination_hostgroup=101) for t in range(1, 26)]
    rows = stored_rows()
    target = config(BASE_SERVERS, shared + tables, BASE["mysql_users"])
    with within(5):
        found = traffic_findings(target, {(r["rule_id"],) for r in shared + tables}, Traffic(rows, 3600), {})
    assert not [f for f in found if f.blocking], [f.label for f in found if f.blocking][:3]
    shares = {f.label.split()[1]: f for f in found if f.key == "rule_traffic_share"}
    assert len(shares) == 50
    selects = sum(r.digest_text.startswith("SELECT") for r in rows)
    assert shares["10"].value.startswith(f"{selects * 100:,} of {len(rows) * 100:,} queries")
    sbtest1 = sum(bool(re.search(r"\bsbtest1\b", r.digest_text)) for r in rows)
    assert shares["101"].value.startswith(f"{sbtest1 * 100:,} of ")


# -- the walk's own cost (issue 34, follow-up: the walk's Python took about 6 us a rule and row, so more than about 150
# ordinary rules over 5,000 stored rows were reported as not measured) ----------------------------------------------
ORDINARY = [
    r"^SELECT.*FOR UPDATE$",
    r"^SELECT",
    r"^(UPDATE|DELETE|INSERT)",
    r"sbtest{i}\b",
    r"FROM orders{i} ",
    r"^SELECT c FROM sbtest{i} WHERE id=\?$",
    r"(?i)^select .* from customers",
    r"JOIN customers c ON",
    r"^SELECT SUM\(k\) FROM sbtest{i}",
    r"WHERE id BETWEEN \? AND \? ORDER BY c$",
]


def test_two_hundred_ordinary_rules_over_5000_stored_rows_are_measured_in_full_within_the_default_budget():
    """200 ordinary routing rules (lab/bench_rule_patterns.py's mix: anchored verbs, table names, a few shared
    patterns) over 5,000 stored rows: about 5.2 s of CPU before, past the 5 s budget, so all 200 were said as not
    measured. Now rules that share a pattern search it once a row, and the walk's own work is read once a batch."""
    from django.conf import settings

    assert settings.RULE_WALK_BUDGET_S == 5.0
    patterns = [ORDINARY[i % len(ORDINARY)].format(i=i) for i in range(200)]
    rules = [rule(1000 + i, match_digest=p, destination_hostgroup=101) for i, p in enumerate(patterns)]
    rows = stored_rows()
    target = config(BASE_SERVERS, rules, BASE["mysql_users"])
    with within(8):
        found = traffic_findings(target, {(r["rule_id"],) for r in rules}, Traffic(rows, 3600), {})
    assert not [f for f in found if f.blocking], [f.label for f in found if f.blocking][:3]
    shares = {int(f.label.split()[1]): f for f in found if f.key == "rule_traffic_share"}
    assert len(shares) == 200
    for i in (1, 3, 6, 7):  # a shared pattern, a table's, a caseless one, a join: the same counts as Python's re
        hits = sum(bool(re.search(patterns[i], r.digest_text)) for r in rows)
        assert shares[1000 + i].value.startswith(f"{hits * 100:,} of {len(rows) * 100:,} queries"), i


def test_rules_that_share_a_pattern_search_it_once_a_row():
    rules = [rule(10 + i, match_digest="^SELECT", cache_ttl=1000 + i) for i in range(25)]
    batch = Batch()
    for text in DIGEST_TEXTS:
        out = evaluate(rules, digest_text=text, reached=batch)
        assert len(out.matched) == (25 if text.startswith("SELECT") else 0)
    assert batch.searches == {("^SELECT", True, PCRE): len(DIGEST_TEXTS)}  # re_modifiers: CASELESS by default


def _said(out, lean):
    """What an outcome decides, and its steps (all of them, or only those that matched or gave up)."""
    steps = [(s.rule_id, s.flag, s.matched, s.limit) for s in out.steps if not lean or s.matched or s.limit]
    return (
        out.hostgroup,
        out.hostgroup_from,
        out.cache_ttl,
        out.mirror_hostgroup,
        out.mirror_flag_out,
        out.error_msg,
        out.ok_msg,
        out.rewritten,
        out.flag,
        out.stopped_by,
        steps,
    )


def test_the_effect_checks_lean_walk_decides_as_the_rule_testers_walk():
    """explain=False (the effect check) builds no reasons nor steps that did not match: every decision is the same."""
    users = BASE["mysql_users"]
    rules = [
        rule(1, match_digest="^SELECT", flagOUT=7, cache_ttl=100),
        rule(2, flagIN=7, username="app", match_pattern=r"sbtest(\d+)", replace_pattern=r"sbt\1"),
        rule(3, flagIN=7, match_pattern="^SELECT c FROM sbt1 ", destination_hostgroup=101, apply=1),
        rule(4, match_digest="^SELECT", negate_match_pattern=1, destination_hostgroup=102, mirror_hostgroup=5),
        rule(5, active=0, match_digest="^UPDATE", destination_hostgroup=103),
        rule(6, schemaname="shop", match_digest="(?i)^select", re_modifiers="CASELESS", error_msg="no"),
        rule(7, digest="0x0000000000000003", OK_msg="ok"),
        rule(8, match_digest=AT_THE_LIMIT, destination_hostgroup=104),
        rule(9, flagIN=7, match_digest="^SELECT", flagOUT=8, apply=0),
        rule(10, flagIN=8, match_digest="^SELECT", client_addr="10.0.%", destination_hostgroup=105),
    ]
    seen = set()
    for iterations in (0, 1):
        batch, lean_batch = Batch(), Batch()
        for i, text in enumerate(DIGEST_TEXTS[::7]):
            sample = {
                "digest_text": text,
                "digest": f"0x{i:016X}",
                "username": "app",
                "schemaname": "sbtest",
                "client_addr": "10.0.0.5",
                "iterations": iterations,
                "users": users,
            }
            full = evaluate(rules, text + " /* q */", reached=batch, **sample)
            lean = evaluate(rules, text + " /* q */", reached=lean_batch, explain=False, **sample)
            assert _said(lean, True) == _said(full, True) and lean.notes == full.notes
            assert all(s.reason for s in full.steps)
            seen |= {full.hostgroup, full.rewritten is not None, full.stopped_by} | {bool(s.limit) for s in full.steps}
    assert {101, 102, True, 3} <= seen  # routed, negated, rewritten, stopped, limited: each path was walked


def test_a_pattern_timed_as_cheap_that_turns_costly_is_cut_on_its_cpu_as_before():
    """A pattern cheap on its first subjects is timed by the wall clock (rule_tester.CHEAP_S); once it meets subjects
    where it backtracks it is timed on the CPU clock again and cut after BATCH_BUDGET_S of CPU, as any costly one."""
    pattern = "^x |" + BELOW_THE_LIMIT
    rules = [rule(5, match_digest=pattern, destination_hostgroup=101)]
    key = (pattern, True, PCRE)
    batch = Batch()
    for i in range(200):
        assert evaluate(rules, digest_text=f"x cheap {i}", reached=batch, explain=False).hostgroup == 101
    assert key in batch.cheap and batch.spent[key] < 200 * CHEAP_S
    costly = [f"{text} /* {i} */" for i, text in enumerate(DIGEST_TEXTS * 3)]
    with within(3):
        for text in costly:
            out = evaluate(rules, digest_text=text, reached=batch, explain=False)
            if key in batch:
                break
    assert isinstance(batch[key], OverBudget) and key not in batch.cheap
    assert BATCH_BUDGET_S < batch.spent[key] < BATCH_BUDGET_S + 0.05
    assert batch.searches[key] - 200 < 0.3 / 1e-3  # cut after about 0.2 s / 2.4 ms searches, not later
    out = evaluate(rules, digest_text=costly[-1], reached=batch, explain=False)  # the next walk does not run it
    assert out.steps[0].limit.endswith(
        "this pattern took more than 200 ms of searches over this batch "
        f"({batch.searches[key]} searches, "
        f"{batch.spent[key] / batch.searches[key] * 1e6:.0f} us each): not run on the rest"
    )


def test_a_draft_of_more_patterns_than_the_compile_cache_holds_compiles_each_once_a_batch():
    """compiled() keeps 512 patterns: a draft of 600 distinct ones compiled every pattern again on every row."""
    rules = [rule(100 + i, match_digest=rf"\bsbtest{i}\b") for i in range(600)]
    compiled.cache_clear()
    batch = Batch()
    for text in DIGEST_TEXTS[:20]:
        evaluate(rules, digest_text=text, reached=batch, explain=False)
    assert compiled.cache_info().misses == 600
