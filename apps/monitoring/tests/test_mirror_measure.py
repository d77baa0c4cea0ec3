"""Measured mirror loss from one window's reads (apps/monitoring/mirror.py): which digests count for which
rule, the prepared share, counters that went down, what is not measured. Pure: no I/O."""

import pytest

from apps.monitoring import mirror


def rule(
    rule_id,
    *,
    mirror_hostgroup=None,
    destination=100,
    match_digest=None,
    match_pattern=None,
    username=None,
    mirror_flag_out=None,
    negate=0,
    modifiers="CASELESS",
):
    return {
        "rule_id": rule_id,
        "active": 1,
        "username": username,
        "schemaname": None,
        "flagIN": 0,
        "match_digest": match_digest,
        "match_pattern": match_pattern,
        "negate_match_pattern": negate,
        "re_modifiers": modifiers,
        "destination_hostgroup": destination,
        "mirror_hostgroup": mirror_hostgroup,
        "mirror_flagOUT": mirror_flag_out,
        "apply": 1,
    }


INSERT1, INSERT2 = (
    "INSERT INTO sbtest1 (id,k,c,pad) VALUES (?,?,?,?)",
    "INSERT INTO sbtest2 (id,k,c,pad) VALUES (?,?,?,?)",
)
UPDATE1 = "UPDATE sbtest1 SET k=k+? WHERE id=?"


def measure(rules, deltas, hits_now, hits_before=None, questions=(0, 10000), executes=(0, 0), interval=30.0):
    return mirror.measure(
        rules,
        hits_now,
        hits_before or {},
        {"questions": questions[1], "stmt_execute": executes[1]},
        {"questions": questions[0], "stmt_execute": executes[0]},
        deltas,
        interval,
    )


def test_the_real_pairs_figures_121k_hits_67k_copies():
    """The issue's figures (121k hits, 67k executions in the mirror hostgroup in 16 s): 55 % of the copies ran,
    45 % were lost, when none of the queries was a prepared statement."""
    w = measure(
        [rule(10, match_digest="^INSERT", mirror_hostgroup=101)],
        [
            (101, "sbtest", "app", INSERT1, 40000),
            (101, "sbtest", "app", INSERT2, 27000),
            (100, "sbtest", "app", INSERT1, 60500),
        ],  # the originals, in the writer hostgroup: not copies
        {10: 121000},
        questions=(0, 121000 + 67000 + 300000),
    )
    (r,) = w.rules
    assert (r.hits, r.mirrored, r.digests) == (121000, 67000, 2)
    assert r.prepared_share == 0 and r.expected == 121000
    assert r.loss == pytest.approx(0.446, abs=0.001) and r.dropped == 54000


def test_each_digest_goes_to_the_first_matching_rule_of_its_mirror_hostgroup_and_user():
    rules = [
        rule(10, match_digest="^INSERT INTO sbtest1", mirror_hostgroup=101),
        rule(20, match_digest="^(INSERT|UPDATE)", mirror_hostgroup=101, username="app"),
        rule(30, match_digest="^UPDATE", mirror_hostgroup=102, username="other"),
    ]
    w = measure(
        rules,
        [
            (101, "s", "app", INSERT1, 100),
            (101, "s", "app", INSERT2, 50),
            (101, "s", "app", UPDATE1, 30),
            (101, "s", "batch", UPDATE1, 7),
            (102, "s", "app", UPDATE1, 9),
        ],
        {10: 100, 20: 80, 30: 1},
    )
    by = {r.rule_id: r for r in w.rules}
    assert by[10].mirrored == 100 and by[20].mirrored == 80 and by[30].mirrored == 0  # user "app" is not "other"
    assert by[10].loss == 0 and by[20].loss == 0 and by[30].loss == pytest.approx(1.0)
    assert w.mirrored_total == 180


def test_prepared_share_is_taken_from_client_queries_without_the_mirrored_copies():
    """Questions counts client commands and mirrored copies; the share is of the client's queries."""
    w = measure(
        [rule(10, match_digest="^INSERT", mirror_hostgroup=101)],
        [(101, "s", "app", INSERT1, 600)],
        {10: 1000},
        questions=(500, 500 + 4000 + 600),
        executes=(100, 100 + 1600),
    )
    (r,) = w.rules
    assert r.prepared_share == pytest.approx(0.4) and r.expected == pytest.approx(600) and r.loss == 0


def test_a_routing_rule_into_the_mirror_hostgroup_makes_the_figure_a_lower_bound():
    rules = [
        rule(10, match_digest="^INSERT", mirror_hostgroup=101),
        rule(5, match_digest="^INSERT INTO sbtest2", destination=101),
    ]
    (r,) = measure(rules, [(101, "s", "app", INSERT1, 40), (101, "s", "app", INSERT2, 40)], {10: 100}).rules
    assert r.ambiguous and r.mirrored == 80 and r.loss == pytest.approx(0.2)
    (r,) = measure(rules[:1], [(101, "s", "app", INSERT1, 40)], {10: 100}).rules
    assert not r.ambiguous


def test_what_gives_no_figure():
    rules = [
        rule(10, match_digest="^INSERT", mirror_hostgroup=101),
        rule(11, mirror_flag_out=7, match_digest="^UPDATE"),
        rule(12, match_digest="([", mirror_hostgroup=101),
        rule(13, match_digest="^DELETE", mirror_hostgroup=101),
    ]
    w = measure(rules, [(101, "s", "app", INSERT1, 5)], {10: 50, 11: 9, 12: 9, 13: 0}, hits_before={10: 80, 13: 0})
    by = {r.rule_id: r for r in w.rules}
    assert by[10].hits is None and by[10].loss is None and "went down" in by[10].note  # rules loaded again
    assert by[11].loss is None and "mirror_flagOUT" in by[11].note
    assert by[12].loss is None and "pattern not readable" in by[12].note
    assert by[13].hits == 0 and by[13].loss is None and by[13].note == "nothing to mirror in this window"


def test_negated_and_pattern_free_rules():
    rules = [rule(10, match_digest="^SELECT", negate=1, mirror_hostgroup=101)]
    (r,) = measure(rules, [(101, "s", "app", INSERT1, 5), (101, "s", "app", "SELECT 1", 7)], {10: 5}).rules
    assert r.mirrored == 5
    (r,) = measure([rule(10, mirror_hostgroup=101)], [(101, "s", "app", "SELECT 1", 7)], {10: 7}).rules
    assert r.mirrored == 7 and r.loss == 0
    (r,) = measure(
        [rule(10, match_digest="^insert", modifiers="", mirror_hostgroup=101)], [(101, "s", "app", INSERT1, 5)], {10: 5}
    ).rules
    assert r.mirrored == 0  # without CASELESS the case counts
