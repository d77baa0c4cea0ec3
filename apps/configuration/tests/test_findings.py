"""Every effect finding, triggered: pure on configurations (the nodes' layers as plain data), then on real
doubles through the planner (a regex ProxySQL cannot compile, edits never loaded, an invalid variable)."""

import pytest

from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import services
from apps.configuration.findings import effect_findings, shadowed_rules
from apps.configuration.nodes import NodeConfig
from apps.configuration.change_set import plan_change_set
from apps.configuration.tables import MYSQL_QUERY_RULES, MYSQL_SERVERS, MYSQL_USERS, typed_row
from apps.fleet.models import Cluster
from lab import demo


def server(hg, port, status="ONLINE", **over):
    return typed_row(
        MYSQL_SERVERS,
        {"hostgroup_id": hg, "hostname": "10.0.0.1", "port": port, "status": status, **over},
        strict=False,
    )


def rule(rule_id, **over):
    return typed_row(MYSQL_QUERY_RULES, {"rule_id": rule_id, "active": 1, **over}, strict=False)


def user(name, hg):
    return typed_row(MYSQL_USERS, {"username": name, "default_hostgroup": hg}, strict=False)


def config(servers=(), rules=(), users=(), variables=None):
    out = C.empty()
    out["roles"] = {"writer": 100, "reader": 101, "backup_writer": 102, "offline": 9101}
    out["mysql_servers"], out["mysql_query_rules"], out["mysql_users"] = list(servers), list(rules), list(users)
    out["global_variables"] = dict(variables or {})
    out["hostgroups"] = sorted(C.claimed_hostgroups(out))
    return C.sort(out)


BASE_SERVERS = [server(100, 1), server(101, 1, weight=100), server(101, 2), server(101, 3), server(102, 2)]
BASE = config(BASE_SERVERS, [rule(10, match_digest="^SELECT", destination_hostgroup=101, apply=1)], [user("app", 100)])


def node(layer=None, memory=None, name="p1"):
    layer = layer or {
        t: list(BASE.get(t) or [])
        for t in (
            "mysql_servers",
            "mysql_galera_hostgroups",
            "mysql_replication_hostgroups",
            "mysql_users",
            "mysql_query_rules",
            "scheduler",
        )
    }
    layer.setdefault(
        "global_variables",
        {"mysql-query_processor_regex": "1", "mysql-max_connections": "2048", "mysql-mirror_max_concurrency": "16"},
    )
    return NodeConfig(1, name, {"runtime": layer, "memory": memory or layer})


@pytest.fixture
def cluster(db):
    return Cluster.objects.create(name="c", writer_hostgroup=100, reader_hostgroup=101, min_available_readers=2)


def keys(findings):
    return {f.key for f in findings}


def findings(cluster, target, nodes=None, docs=None):
    return effect_findings(cluster, BASE, target, nodes or {1: node()}, docs or {})


def test_nothing_found_in_a_harmless_change(cluster):
    target = C.apply_edits(
        BASE,
        [
            {
                "op": "upsert",
                "table": "mysql_servers",
                "key": [101, "10.0.0.1", 2],
                "row": {**server(101, 2), "weight": 5000},
            }
        ],
    )
    assert findings(cluster, target) == []


def test_hostgroup_left_with_no_online_server(cluster):
    target = config(
        [s for s in BASE_SERVERS if s["hostgroup_id"] != 100], BASE["mysql_query_rules"], BASE["mysql_users"]
    )
    found = findings(cluster, target)
    assert "hostgroup_empty" in keys(found)
    assert next(f for f in found if f.key == "hostgroup_empty").value.startswith("1 ONLINE → 0")


def test_second_writer(cluster):
    target = config(BASE_SERVERS + [server(100, 2)], BASE["mysql_query_rules"], BASE["mysql_users"])
    found = [f for f in findings(cluster, target) if f.key == "two_writers"]
    assert found and "10.0.0.1:1" in found[0].value and "10.0.0.1:2" in found[0].value


def test_several_writer_rows_under_a_native_manager_are_told_not_refused(cluster):
    """The usual native Galera setup lists every node in the writer hostgroup and lets ProxySQL keep max_writers of
    them writing: a change set there (even one of query rules only) is not refused for "two writers"; the plan
    says what ProxySQL does with the rows. An inactive manager, or one on other hostgroups, changes nothing."""
    every_node = config(BASE_SERVERS + [server(100, 2), server(100, 3)], BASE["mysql_query_rules"], BASE["mysql_users"])
    rules_only = C.apply_edits(
        every_node,
        [
            {
                "op": "upsert",
                "table": "mysql_query_rules",
                "key": [11],
                "row": rule(11, match_digest="^UPDATE", destination_hostgroup=100),
            }
        ],
    )
    galera = {
        "kind": "galera",
        "writer_hostgroup": 100,
        "backup_writer_hostgroup": 102,
        "reader_hostgroup": 101,
        "offline_hostgroup": 9101,
        "max_writers": 1,
        "active": True,
    }
    for native in ([], [{**galera, "active": False}], [{**galera, "writer_hostgroup": 200}]):
        cluster.native_hostgroups = native
        assert "two_writers" in keys(effect_findings(cluster, every_node, rules_only, {1: node()}, {})), native
    cluster.native_hostgroups = [galera]
    found = effect_findings(cluster, every_node, rules_only, {1: node()}, {})
    assert "two_writers" not in keys(found) and not any(f.blocking for f in found), found
    told = next(f for f in found if f.key == "native_writers")
    assert told.label == "Writer hostgroup 100 lists 3 ONLINE servers, under ProxySQL's native galera manager"
    assert told.value == (
        "10.0.0.1:1, 10.0.0.1:2, 10.0.0.1:3: ProxySQL keeps max_writers=1 of them writing and "
        "moves the others to backup writer hostgroup 102"
    )
    cluster.native_hostgroups = [
        {"kind": "replication", "writer_hostgroup": 100, "reader_hostgroup": 101, "active": True}
    ]
    told = next(
        f for f in effect_findings(cluster, every_node, rules_only, {1: node()}, {}) if f.key == "native_writers"
    )
    assert told.value.endswith(
        "ProxySQL keeps writing only those whose read_only is OFF and moves the others to reader hostgroup 101"
    )


def test_reader_pool_below_the_minimum(cluster):
    servers = [
        s if not (s["hostgroup_id"] == 101 and s["port"] in (2, 3)) else {**s, "status": "OFFLINE_SOFT"}
        for s in BASE_SERVERS
    ]
    found = [
        f
        for f in findings(cluster, config(servers, BASE["mysql_query_rules"], BASE["mysql_users"]))
        if f.key == "readers_below_minimum"
    ]
    assert found and found[0].value == "3 ONLINE → 1"


def test_rule_after_a_catch_all_prefix_never_matches(cluster):
    rules = BASE["mysql_query_rules"] + [
        rule(20, match_digest="^SELECT.*FOR UPDATE", destination_hostgroup=100, apply=1)
    ]
    found = [
        f for f in findings(cluster, config(BASE_SERVERS, rules, BASE["mysql_users"])) if f.key == "rule_never_matches"
    ]
    assert found and found[0].label == "Rule 20 can never match" and "rule 10" in found[0].value
    # In the right order (FOR UPDATE first), nothing is shadowed; another flagIN or apply=0 does not shadow.
    fixed = [rule(5, match_digest="^SELECT.*FOR UPDATE", destination_hostgroup=100, apply=1)] + BASE[
        "mysql_query_rules"
    ]
    assert shadowed_rules(fixed) == []
    assert (
        shadowed_rules([rule(1, match_digest="^SELECT", apply=0), rule(2, match_digest="^SELECT .* FOR UPDATE")]) == []
    )
    assert shadowed_rules([rule(1, match_digest="^SELECT", apply=1), rule(2, match_digest="^SELECT", flagIN=5)]) == []
    assert (
        shadowed_rules([rule(1, apply=1), rule(2, match_pattern="^INSERT")])[0][0]["rule_id"] == 2
    )  # no condition at all
    assert shadowed_rules([rule(1, match_digest="^SELECT|^SHOW", apply=1), rule(2, match_digest="^SELECT c")]) == []
    assert (
        shadowed_rules(
            [rule(1, match_digest="^select", apply=1, re_modifiers="CASELESS"), rule(2, match_digest="^SELECT c FROM")]
        )[0][1]["rule_id"]
        == 1
    )


def test_regex_proxysql_cannot_compile_is_blocking_and_cannot_be_overridden(cluster):
    rules = BASE["mysql_query_rules"] + [rule(30, match_pattern="^(SELECT", destination_hostgroup=101)]
    found = [f for f in findings(cluster, config(BASE_SERVERS, rules, BASE["mysql_users"])) if f.key == "regex_invalid"]
    assert found and found[0].blocking and not found[0].overridable and "PCRE" in found[0].label
    # RE2 (mysql-query_processor_regex=2) refuses a lookbehind that PCRE accepts.
    lookbehind = BASE["mysql_query_rules"] + [rule(31, match_pattern="(?<=a)b", destination_hostgroup=101)]
    target = config(BASE_SERVERS, lookbehind, BASE["mysql_users"], {"mysql-query_processor_regex": "2"})
    assert "regex_invalid" in keys(findings(cluster, target))
    target = config(BASE_SERVERS, lookbehind, BASE["mysql_users"], {"mysql-query_processor_regex": "1"})
    assert "regex_invalid" not in keys(findings(cluster, target))


def test_rule_to_a_hostgroup_with_no_server(cluster):
    rules = BASE["mysql_query_rules"] + [rule(40, match_digest="^INSERT", mirror_hostgroup=555)]
    found = [
        f
        for f in findings(cluster, config(BASE_SERVERS, rules, BASE["mysql_users"]))
        if f.key == "rule_hostgroup_empty"
    ]
    assert found and "hostgroup 555" in found[0].label
    # A hostgroup of another cluster on the same node counts as having servers.
    other = node()
    other.layers["runtime"]["mysql_servers"] = BASE_SERVERS + [server(555, 9)]
    assert "rule_hostgroup_empty" not in keys(
        findings(cluster, config(BASE_SERVERS, rules, BASE["mysql_users"]), {1: other})
    )


def test_mirror_rule_on_a_prepared_statement_load_and_limit_below_use(cluster):
    rules = BASE["mysql_query_rules"] + [rule(50, match_digest="^INSERT", mirror_hostgroup=102)]
    docs = {"p1": {"questions_ps": 1000.0, "prepared_ps": 960.0, "mirror_concurrency": 40}}  # p1's polled figures
    target = config(BASE_SERVERS, rules, BASE["mysql_users"], {"mysql-mirror_max_concurrency": "20"})
    found = {f.key: f for f in findings(cluster, target, docs=docs)}
    assert "96%" in found["mirror_prepared"].value and not found["mirror_prepared"].blocking
    assert "Mirror_concurrency 40" in found["mirror_limit_below_use"].value


def test_user_whose_default_hostgroup_has_no_server(cluster):
    found = findings(cluster, config(BASE_SERVERS, BASE["mysql_query_rules"], [user("app", 100), user("etl", 77)]))
    assert [f.label for f in found if f.key == "user_default_hostgroup"] == [
        "User etl's default hostgroup 77 has no server"
    ]


def test_variable_out_of_range_unknown_or_restart_only_is_refused_at_the_edit():
    for name, value, why in (
        ("mysql-auto_increment_delay_multiplex", "1000001", "between 0 and 1000000"),
        ("mysql-max_connections", "-1", "between 1 and 1000000"),
        ("mysql-mirror_max_concurrency", "many", "integer"),
        ("mysql-no_such_thing", "1", "not a ProxySQL 2.7 variable"),
        ("mysql-threads", "8", "only when it starts"),
        ("admin-admin_credentials", "x:y", "not managed"),
    ):
        with pytest.raises(C.EditError) as error:
            C.apply_edits(BASE, [{"op": "set", "table": "global_variables", "name": name, "value": value}])
        assert why in str(error.value), (name, str(error.value))
    ok = C.apply_edits(BASE, [{"op": "set", "table": "global_variables", "name": "mysql-have_compress", "value": "1"}])
    assert ok["global_variables"]["mysql-have_compress"] == "true"


def test_unloaded_edits_and_unreachable_nodes(cluster):
    memory = {k: (list(v) if isinstance(v, list) else dict(v)) for k, v in node().layers["runtime"].items()}
    memory["mysql_servers"] = memory["mysql_servers"] + [server(101, 9)]
    target = C.apply_edits(
        BASE,
        [
            {
                "op": "upsert",
                "table": "mysql_servers",
                "key": [101, "10.0.0.1", 2],
                "row": {**server(101, 2), "weight": 7},
            }
        ],
    )
    found = {
        f.key: f for f in findings(cluster, target, {1: node(memory=memory), 2: NodeConfig(2, "p2", error="timeout")})
    }
    assert "[101, '10.0.0.1', 9]" in found["unloaded_edits"].value and found["unloaded_edits"].blocking
    assert not found["node_unreachable"].overridable


def test_operational_changes_between_two_configurations():
    """The writer (servers entering or leaving the writer hostgroup ONLINE) and drains are told apart from the
    rest: a weight change is none of them, a renumbered writer hostgroup with the same server neither."""

    def servers(changes):
        return config([{**s, **changes.get((s["hostgroup_id"], s["port"]), {})} for s in BASE_SERVERS])

    assert C.operational_changes(BASE, servers({(101, 2): {"weight": 7}})) == []
    moved = config([server(100, 2)] + BASE_SERVERS[1:])
    assert [(c.kind, c.text) for c in C.operational_changes(BASE, moved)] == [
        ("writer", "moves the writer from 10.0.0.1:1 to 10.0.0.1:2")
    ]
    assert C.operational_changes(BASE, moved)[0].way == (
        "use a switchover to 10.0.0.1:2 (the cluster's page → Planned switchover) instead"  # the switchover offered
    )
    drained = servers({(101, 3): {"status": "OFFLINE_SOFT"}})
    assert [(c.kind, c.text) for c in C.operational_changes(BASE, drained)] == [
        ("drain", "drains 10.0.0.1:3 in hostgroup 101 (ONLINE → OFFLINE_SOFT)")
    ]
    assert [(c.kind, c.text) for c in C.operational_changes(drained, BASE)] == [
        ("restore", "puts 10.0.0.1:3 in hostgroup 101 back ONLINE (OFFLINE_SOFT → ONLINE)")
    ]
    writer_off = servers({(100, 1): {"status": "OFFLINE_HARD"}})
    assert {c.kind for c in C.operational_changes(BASE, writer_off)} == {"writer", "drain"}


def test_under_the_galera_manager_the_writer_is_the_candidate_of_highest_weight():
    """Issue 33: with mysql_galera_hostgroups active on the writer hostgroup, every configured row there is a candidate
    and Monitor makes the writer of the highest weight. A new candidate of lower weight (a third Galera node, as an
    operator adds one) moves no writer; a weight that puts another candidate first does (Monitor would move the
    writer at its next check: a switchover's work); tied at the top, either may write, so a tie counts as a move. Under
    the replication manager (the writer placed by read_only) a backend added to the writer hostgroup moves no writer,
    one taken out may."""

    def galera(*weights, max_writers=1):
        out = config([server(100, port, weight=w) for port, w in weights])
        out["mysql_galera_hostgroups"] = [
            {
                "writer_hostgroup": 100,
                "backup_writer_hostgroup": 102,
                "reader_hostgroup": 101,
                "offline_hostgroup": 9101,
                "active": 1,
                "max_writers": max_writers,
            }
        ]
        return out

    base = galera((1, 1000), (2, 900))
    assert C.chosen_writers(base) == [("10.0.0.1", 1)]
    assert C.operational_changes(base, galera((1, 1000), (2, 900), (3, 800))) == []
    assert C.operational_changes(base, galera((1, 1000), (2, 700))) == []
    assert [(c.kind, c.text) for c in C.operational_changes(base, galera((1, 1000), (2, 1100)))] == [
        ("writer", "moves the writer from 10.0.0.1:1 to 10.0.0.1:2")
    ]
    tied = C.operational_changes(base, galera((1, 1000), (2, 900), (3, 1000)))
    assert [c.kind for c in tied] == ["writer"]
    assert tied[0].way.startswith("use a switchover (")  # two writers tied: no one switchover target to offer
    heavier = C.operational_changes(base, galera((1, 1000), (2, 1100)))[0].way
    assert heavier.startswith("use a switchover to 10.0.0.1:2 (")  # a backup writer made heavier: its switchover
    assert C.chosen_writers(galera((1, 1000), (2, 900), (3, 800), max_writers=2)) == [("10.0.0.1", 1), ("10.0.0.1", 2)]
    replication = config([server(100, 1), server(100, 2)])
    replication["mysql_replication_hostgroups"] = [{"writer_hostgroup": 100, "reader_hostgroup": 101, "active": 1}]
    more = {**replication, "mysql_servers": [*replication["mysql_servers"], server(100, 3)]}
    assert C.operational_changes(replication, more) == []  # Monitor places it by read_only: no writer move
    fewer = {**replication, "mysql_servers": replication["mysql_servers"][:1]}
    assert [c.kind for c in C.operational_changes(replication, fewer)] == ["writer"]  # it may be the writer
    inactive = galera((1, 1000), (2, 900))
    inactive["mysql_galera_hostgroups"][0]["active"] = 0  # no manager: every ONLINE row in 100 writes
    assert C.chosen_writers(inactive) == [("10.0.0.1", 1), ("10.0.0.1", 2)]
    renumbered = C.apply_edits(
        BASE,
        [
            {"op": "roles", "roles": {"writer": 110}},
            {"op": "delete", "table": "mysql_servers", "key": [100, "10.0.0.1", 1]},
            {"op": "upsert", "table": "mysql_servers", "row": server(110, 1)},
        ],
    )
    assert C.operational_changes(BASE, renumbered) == []


def test_a_change_that_moves_the_writer_or_drains_is_refused_with_the_operation_to_use(cluster):
    moved = config([server(100, 2)] + BASE_SERVERS[1:], BASE["mysql_query_rules"], BASE["mysql_users"])
    found = [f for f in findings(cluster, moved) if f.key == "operational_writer"]
    assert len(found) == 1 and found[0].blocking and not found[0].overridable
    assert found[0].label.startswith("Moves the writer from 10.0.0.1:1 to 10.0.0.1:2: use a switchover")
    drained = C.apply_edits(
        BASE,
        [
            {
                "op": "upsert",
                "table": "mysql_servers",
                "key": [101, "10.0.0.1", 3],
                "row": {**server(101, 3), "status": "OFFLINE_SOFT"},
            }
        ],
    )
    found = [f for f in findings(cluster, drained) if f.key.startswith("operational")]
    assert [f.label for f in found] == [
        "Drains 10.0.0.1:3 in hostgroup 101 (ONLINE → OFFLINE_SOFT): use a "
        "maintenance drain (the server's page → Maintenance drain) instead"
    ]
    assert found[0].blocking and not found[0].overridable
    found = [f for f in effect_findings(cluster, drained, BASE, {1: node()}, {}) if f.key.startswith("operational")]
    assert len(found) == 1 and "back ONLINE" in found[0].label and "use restore" in found[0].label


def test_a_node_running_another_writer_is_a_writer_change_even_when_the_version_agrees(cluster):
    """The version says writer :1, a node's runtime runs :2 (moved by hand): a change that loads that node's
    mysql_servers would move its writer back. Refused; a write-back (the repair) is told, not refused; a node
    the change does not load is not concerned; under ProxySQL's native manager, which picks the writer itself,
    it is told."""
    layer = {
        t: list(BASE.get(t) or [])
        for t in (
            "mysql_servers",
            "mysql_galera_hostgroups",
            "mysql_replication_hostgroups",
            "mysql_users",
            "mysql_query_rules",
            "scheduler",
        )
    }
    layer["mysql_servers"] = [server(100, 2)] + BASE_SERVERS[1:]
    moved_by_hand = node(layer, name="p2")
    weight = C.apply_edits(
        BASE,
        [
            {
                "op": "upsert",
                "table": "mysql_servers",
                "key": [101, "10.0.0.1", 2],
                "row": {**server(101, 2), "weight": 5000},
            }
        ],
    )
    found = [f for f in findings(cluster, weight, {1: node(), 2: moved_by_hand}) if f.key == "operational_writer"]
    assert [f.label for f in found] == [
        "On p2, this change moves the writer from 10.0.0.1:2 to 10.0.0.1:1: use a "
        "switchover to 10.0.0.1:1 (the cluster's page → Planned switchover) instead"
    ]
    assert found[0].blocking and not found[0].overridable and "p2's runtime has the writer 10.0.0.1:2" in found[0].value
    told = [
        f
        for f in effect_findings(cluster, BASE, BASE, {2: moved_by_hand}, {}, write_back=True)
        if f.key == "operational_writer"
    ]
    assert len(told) == 1 and not told[0].blocking
    moved_by_hand.plan = type("Plan", (), {"modules": ["MYSQL VARIABLES"]})()
    assert "operational_writer" not in keys(findings(cluster, weight, {2: moved_by_hand}))
    moved_by_hand.plan = None
    cluster.native_hostgroups = [{"kind": "galera", "writer_hostgroup": 100, "reader_hostgroup": 101, "active": 1}]
    found = [f for f in findings(cluster, weight, {2: moved_by_hand}) if f.key == "operational_writer"]
    assert len(found) == 1 and not found[0].blocking


def test_a_change_to_the_live_writers_row_is_named(cluster):
    target = C.apply_edits(
        BASE,
        [
            {
                "op": "upsert",
                "table": "mysql_servers",
                "key": [100, "10.0.0.1", 1],
                "row": {**server(100, 1), "max_connections": 10},
            }
        ],
    )
    found = [f for f in findings(cluster, target) if f.key == "writer_row_changed"]
    assert len(found) == 1 and not found[0].blocking and found[0].value == "max_connections 1000 → 10"
    assert "10.0.0.1:1" in found[0].label


# -- on real doubles, through the planner --------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_planner_finds_a_bad_regex_and_a_nodes_unloaded_edit(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    demo.admin_sql(
        second.port,
        "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313",
        user=second.user,
        password=second.password,
    )  # edited by hand, never loaded
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="rules")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 1, "active": 1, "match_digest": "^SELECT (", "destination_hostgroup": 101},
        },
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_servers",
            "key": [101, "127.0.0.1", 3312],
            "row": {
                **next(r for r in cs.base.content["mysql_servers"] if (r["hostgroup_id"], r["port"]) == (101, 3312)),
                "weight": 9000,
            },
        },
        actor=Actor.command(operator_user),
    )
    plan, _ = plan_change_set(cs)
    failed = {g.key: g for g in plan.failed_guards}
    assert (
        failed["regex_invalid"].overridable is False and "missing closing parenthesis" in failed["regex_invalid"].value
    )
    assert "proxysql-2" in failed["unloaded_edits"].label and "3313" in failed["unloaded_edits"].value
    # The plan still shows the exact statements for both nodes, with their undo.
    apply = plan.steps[0].nodes
    assert {n["name"] for n in apply.values()} == {"proxysql-1", "proxysql-2"}
    assert all(any("REPLACE INTO mysql_query_rules" in s for s in n["sql"]) for n in apply.values())
    assert all(any("DELETE FROM mysql_query_rules WHERE rule_id=1" in s for s in n["rollback"]) for n in apply.values())
