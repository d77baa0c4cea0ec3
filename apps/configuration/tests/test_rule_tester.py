"""The rule tester walks the rules as ProxySQL's query processor does: tables of cases (pure, no network)."""

import pytest

from apps.configuration.rule_tester import PCRE, RE2, evaluate, normalise
from apps.configuration.tables import MYSQL_QUERY_RULES, MYSQL_USERS, typed_row


def rule(rule_id, **over):
    return typed_row(MYSQL_QUERY_RULES, {"rule_id": rule_id, "active": 1, **over}, strict=False)


USERS = [
    typed_row(MYSQL_USERS, {"username": "app", "default_hostgroup": 100}, strict=False),
    typed_row(MYSQL_USERS, {"username": "report", "default_hostgroup": 300}, strict=False),
]

READ_SPLIT = [
    rule(10, match_digest="^SELECT.*FOR UPDATE", destination_hostgroup=100, apply=1),
    rule(20, match_digest="^SELECT", destination_hostgroup=101, apply=1),
]


@pytest.mark.parametrize(
    "query, hostgroup, hits, source",
    [
        ("SELECT c FROM sbtest1 WHERE id=5", 101, [20], "rule 20"),
        ("select c from sbtest1 where id=5", 101, [20], "rule 20"),  # re_modifiers CASELESS (the default)
        ("SELECT c FROM t WHERE id=1 FOR UPDATE", 100, [10], "rule 10"),  # the earlier rule wins, apply stops
        ("UPDATE sbtest1 SET k=k+1 WHERE id=5", 100, [], "default hostgroup of user 'app'"),
        ("  /* app */ SELECT 1", 101, [20], "rule 20"),  # comments are not in the digest text
    ],
)
def test_read_write_split(query, hostgroup, hits, source):
    out = evaluate(READ_SPLIT, query, username="app", users=USERS)
    assert (out.hostgroup, [s.rule_id for s in out.matched]) == (hostgroup, hits)
    assert source in out.hostgroup_from


def test_case_sensitive_without_caseless_in_both_engines():
    rules = [rule(10, match_pattern="^SELECT", re_modifiers="", destination_hostgroup=101, apply=1)]
    for engine in (PCRE, RE2):
        assert evaluate(rules, "select 1", username="app", users=USERS, engine=engine).hostgroup == 100
        assert evaluate(rules, "SELECT 1", username="app", users=USERS, engine=engine).hostgroup == 101


def test_engine_decides_what_compiles():
    # a lookahead is PCRE only: in RE2 the rule never matches, as in ProxySQL with mysql-query_processor_regex=2
    rules = [rule(10, match_digest="^SELECT(?!.*FOR UPDATE)", destination_hostgroup=101, apply=1)]
    assert evaluate(rules, "SELECT 1", username="app", users=USERS, engine=PCRE).hostgroup == 101
    out = evaluate(rules, "SELECT 1", username="app", users=USERS, engine=RE2)
    assert out.hostgroup == 100 and "does not compile in RE2" in out.steps[0].reason


@pytest.mark.parametrize(
    "rule_kw, kwargs, matched, reason",
    [
        ({"username": "report"}, {"username": "app"}, False, "for user 'report', not 'app'"),
        ({"username": "report"}, {"username": "report"}, True, ""),
        ({"schemaname": "sales"}, {"schemaname": "hr"}, False, "for schema 'sales', not 'hr'"),
        ({"schemaname": "sales"}, {}, False, "(no schema given)"),
        ({"client_addr": "10.0.0.5"}, {"client_addr": "10.0.0.5"}, True, ""),
        ({"client_addr": "10.0.0.5"}, {"client_addr": "10.0.0.50"}, False, "for client address"),
        ({"client_addr": "10.0.%"}, {"client_addr": "10.0.7.1"}, True, ""),  # a trailing % is a prefix
        ({"client_addr": "10.0.%"}, {"client_addr": "10.1.7.1"}, False, "for client address"),
        ({"client_addr": "%"}, {"client_addr": "192.168.1.1"}, True, ""),
        ({"digest": "0x695FBF255DBEB0DD"}, {"digest": "0x695fbf255dbeb0dd"}, True, ""),
        ({"digest": "0x695FBF255DBEB0DD"}, {"digest": "0xBF001A0C13781C1D"}, False, "for digest"),
        ({"digest": "0x695FBF255DBEB0DD"}, {}, False, "hash is not known"),
        ({"match_pattern": "^SELECT", "negate_match_pattern": 1}, {}, False, "matches the query (negated)"),
        ({"match_digest": "^UPDATE", "negate_match_pattern": 1}, {}, True, ""),  # negate applies to match_digest too
        ({"match_digest": "id=\\?"}, {}, True, ""),  # the digest text has ?, not 5
        ({"match_pattern": "id=\\?"}, {}, False, "does not match the query"),  # the raw query has 5
        ({"match_pattern": "id=5"}, {}, True, ""),
        ({"active": 0}, {}, False, "inactive"),
    ],
)
def test_conditions(rule_kw, kwargs, matched, reason):
    rules = [rule(10, destination_hostgroup=101, **rule_kw)]
    out = evaluate(rules, "SELECT c FROM t WHERE id=5", users=USERS, **kwargs)
    assert out.steps[0].matched is matched
    assert reason in out.steps[0].reason


FLAGS = [
    rule(1, match_digest="^SELECT", flagOUT=5),
    rule(2, match_digest="^SELECT", destination_hostgroup=999, apply=1),  # flagIN 0: skipped once the flag is 5
    rule(3, flagIN=5, username="report", destination_hostgroup=300, apply=1),
    rule(4, flagIN=5, match_digest="FOR UPDATE", destination_hostgroup=100, apply=1),
    rule(5, flagIN=5, destination_hostgroup=101, cache_ttl=5000),
    rule(6, flagIN=5, match_digest="sbtest1", mirror_hostgroup=200),
    rule(7, flagIN=9, destination_hostgroup=666),
]


@pytest.mark.parametrize(
    "query, user, hits, hostgroup, cache, mirror, stopped",
    [
        ("SELECT c FROM sbtest1 WHERE id=1", "app", [1, 5, 6], 101, 5000, 200, None),
        ("SELECT c FROM sbtest2 WHERE id=1", "app", [1, 5], 101, 5000, None, None),
        ("SELECT c FROM sbtest2 WHERE id=1", "report", [1, 3], 300, None, None, 3),
        ("SELECT c FROM sbtest1 WHERE id=1 FOR UPDATE", "app", [1, 4], 100, None, None, 4),
        ("DELETE FROM sbtest1 WHERE id=1", "app", [], 100, None, None, None),
    ],
)
def test_flag_chains(query, user, hits, hostgroup, cache, mirror, stopped):
    out = evaluate(FLAGS, query, username=user, users=USERS)
    assert [s.rule_id for s in out.matched] == hits
    assert (out.hostgroup, out.cache_ttl, out.mirror_hostgroup, out.stopped_by) == (hostgroup, cache, mirror, stopped)
    assert (
        next(s for s in out.steps if s.rule_id == 2).reason.startswith("flagIN 0 is not the current flag 5") or not hits
    )
    assert all(s.rule_id != 7 or not s.matched for s in out.steps)


def test_later_rule_overrides_and_error_blocks():
    rules = [
        rule(1, match_digest="^DELETE", destination_hostgroup=101),
        rule(2, match_digest="^DELETE", destination_hostgroup=100, error_msg="deletes are not allowed"),
    ]
    out = evaluate(rules, "DELETE FROM t", username="app", users=USERS)
    assert out.hostgroup == 100 and out.hostgroup_from == "rule 2"
    assert out.summary == "blocked: ProxySQL answers with the error 'deletes are not allowed'"


def test_rewrite_feeds_later_match_pattern():
    rules = [
        rule(1, match_pattern="sbtest1", replace_pattern="sbtest9"),
        rule(2, match_pattern="sbtest9", destination_hostgroup=101, apply=1),
    ]
    out = evaluate(rules, "SELECT * FROM sbtest1", username="app", users=USERS)
    assert out.rewritten == "SELECT * FROM sbtest9" and out.hostgroup == 101


def test_iterations_restart_from_the_first_rule():
    # mysql-query_processor_iterations > 0: after a flagOUT the walk starts again at the first rule
    rules = [rule(1, flagIN=5, destination_hostgroup=101, apply=1), rule(2, flagOUT=5)]
    assert evaluate(rules, "SELECT 1", username="app", users=USERS).hostgroup == 100
    again = evaluate(rules, "SELECT 1", username="app", users=USERS, iterations=1)
    assert again.hostgroup == 101 and [s.rule_id for s in again.matched] == [2, 1]


def test_unknown_user_and_digest_given():
    out = evaluate(READ_SPLIT, digest_text="UPDATE t SET a=? WHERE id=?", digest="0x1", username="nobody", users=USERS)
    assert out.hostgroup is None and "'nobody' is not in mysql_users" in out.hostgroup_from
    assert any("match_pattern was tested on the digest text" in n for n in out.notes)


@pytest.mark.parametrize(
    "query, text",
    [
        ("SELECT c FROM sbtest1 WHERE id=5000", "SELECT c FROM sbtest1 WHERE id=?"),
        ("UPDATE sbtest1 SET c='abc' WHERE id=12", "UPDATE sbtest1 SET c=? WHERE id=?"),
        ("SELECT * FROM t WHERE id IN (1, 2, 3, 4, 5);", "SELECT * FROM t WHERE id IN (?,?,?,...)"),
        ("SELECT a  FROM   t1 -- tail\n WHERE x = 1.5", "SELECT a FROM t1 WHERE x = ?"),
        ('SELECT "x", 0xFF FROM t2', "SELECT ?, ? FROM t2"),
    ],
)
def test_normalise(query, text):
    assert normalise(query) == text


def test_rules_after_apply_are_not_reached():
    out = evaluate(READ_SPLIT, "SELECT 1 FOR UPDATE", username="app", users=USERS)
    assert [(s.rule_id, s.reason) for s in out.steps] == [
        (10, "match_digest '^SELECT.*FOR UPDATE' matches the digest text"),
        (20, "not reached: rule 10 stopped the walk"),
    ]
