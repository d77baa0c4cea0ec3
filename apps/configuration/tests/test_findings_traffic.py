"""The effect check with traffic: what a new or changed rule would capture of the last hour's stored digests
(the rule tester's walk over them), and the mirror load a mirror rule predicts against mysql-mirror_max_concurrency."""

import time

import pytest

from apps.audit.actor import Actor
from apps.configuration.findings import effect_findings
from apps.configuration.tests.test_findings import BASE, BASE_SERVERS, config, node, rule
from apps.digests.selectors import cluster_traffic
from apps.digests.tests.factories import digest, fleet, source, stat

pytestmark = pytest.mark.django_db

ORDERS = "SELECT * FROM orders WHERE id=?"
INVOICES = "SELECT * FROM invoices WHERE customer_id=?"
INSERT = "INSERT INTO events (kind,payload) VALUES (?,?)"


def stored_hour(hot_insert_per_s=0):
    """Two nodes' digests over the last hour: orders 3,000 queries (30 s), invoices 1,000 (10 s), and inserts."""
    cluster, nodes = fleet()
    now = int(time.time())
    for n in nodes:
        src = source(n, hostgroup=100)
        for seconds_ago in (3599, 1800, 600):  # the digest polls have run for the whole hour
            ts = now - seconds_ago
            stat(src, digest(ORDERS), ts, 500, 5_000_000)
            stat(src, digest(INVOICES), ts, 500 // 3, 5_000_000 // 3)
            if hot_insert_per_s:  # a third of the hour's inserts on each of the two nodes, every 20 min
                stat(src, digest(INSERT), ts, hot_insert_per_s * 1200 // 2, hot_insert_per_s * 1200 // 2 * 300)
    stat(source(nodes[0], hostgroup=100), digest(ORDERS), now - 7200, 10**6, 10**9)  # two hours ago: not counted
    return cluster


def test_a_new_rule_reports_the_share_of_the_last_hours_queries_and_time_it_would_capture():
    cluster = stored_hour()
    traffic = cluster_traffic(cluster.pk)
    assert traffic.count == 2 * 3 * (500 + 166)
    target = config(
        BASE_SERVERS,
        BASE["mysql_query_rules"] + [rule(5, match_digest="FROM orders", destination_hostgroup=101, apply=1)],
        BASE["mysql_users"],
    )
    found = [
        f
        for f in effect_findings(cluster, BASE, target, {1: node()}, {}, traffic=traffic)
        if f.key == "rule_traffic_share"
    ]
    assert len(found) == 1 and not found[0].blocking
    share = 3000 / 3996
    assert found[0].label.startswith(f"Rule 5 would capture {share:.1%} of the last ")
    assert f"3,000 of 3,996 queries, 30.0 s of {30 + 2 * 3 * 1_666_666 / 1e6:.1f} s, over 1 digest(s)" in found[0].value
    assert "FROM orders" in found[0].value
    # The unchanged rule 10 (^SELECT) is not reported; a rule behind it on the same flag captures nothing.
    behind = config(
        BASE_SERVERS, BASE["mysql_query_rules"] + [rule(20, match_digest="invoices", apply=1)], BASE["mysql_users"]
    )
    later = [
        f
        for f in effect_findings(cluster, BASE, behind, {1: node()}, {}, traffic=traffic)
        if f.key == "rule_traffic_share"
    ]
    assert [f.label.split(" of the")[0] for f in later] == ["Rule 20 would capture 0.0%"]


def test_a_mirror_rule_over_a_hot_digest_warns_it_would_exceed_the_mirror_concurrency():
    cluster = stored_hour(hot_insert_per_s=10_000)
    traffic = cluster_traffic(cluster.pk)
    target = config(
        BASE_SERVERS,
        BASE["mysql_query_rules"] + [rule(50, match_digest="^INSERT INTO events", mirror_hostgroup=102)],
        BASE["mysql_users"],
    )
    found = {f.key: f for f in effect_findings(cluster, BASE, target, {1: node()}, {}, traffic=traffic)}
    warning = found["mirror_overload"]
    assert warning.label == "Mirror rule 50 would exceed mysql-mirror_max_concurrency" and not warning.blocking
    assert "10,00" in warning.value.split(" copies/s")[0] and "mysql-mirror_max_concurrency 16" in warning.value
    assert "dropped" in warning.value
    # A mirror rule over the cool invoices digest stays within the limit: said, not warned.
    cool = config(
        BASE_SERVERS,
        BASE["mysql_query_rules"]
        + [rule(4, match_digest="FROM invoices", mirror_hostgroup=102, destination_hostgroup=100, apply=1)],
        BASE["mysql_users"],
    )
    found = {f.key: f for f in effect_findings(cluster, BASE, cool, {1: node()}, {}, traffic=traffic)}
    assert "mirror_overload" not in found and "within its limit" in found["mirror_load"].label


def test_the_change_set_plan_carries_the_captured_share_over_the_stored_digests(adopted_lab, operator_user):
    from apps.configuration import services
    from apps.configuration.change_set import plan_change_set
    from apps.fleet.models import ProxySQLNode

    cluster, _ = adopted_lab
    now = int(time.time())
    for proxysql in ProxySQLNode.objects.filter(cluster=cluster):
        src = source(proxysql, hostgroup=100, username="utest", schemaname="sbtest")
        stat(src, digest(ORDERS), now - 3000, 900, 9_000_000)
        stat(src, digest(INVOICES), now - 3000, 100, 1_000_000)
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="orders to the readers")
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 5, "active": 1, "match_digest": "FROM orders", "destination_hostgroup": 101, "apply": 1},
        },
        actor=Actor.command(operator_user),
    )
    plan, _ = plan_change_set(cs)
    share = [w for w in plan.facts["warnings"] if w["key"] == "rule_traffic_share"]
    assert share and share[0]["label"].startswith("Rule 5 would capture 90.0% of the last ")
    assert "1,800 of 2,000 queries" in share[0]["value"]


def test_the_config_plan_page_tells_information_from_risk_names_the_change_and_shows_its_sql_compactly(
    adopted_lab, operator_user, operator_client
):
    """Issue 36 item 11: a rule's traffic share and a real risk had the same "warning" badge; each query rule was a
    35-column REPLACE with ~30 NULLs, repeated for every node; the operation's title was the first edit's reason."""
    import re

    from apps.configuration import services
    from apps.fleet.models import ProxySQLNode
    from apps.configuration.change_set import plan_and_save

    cluster, _ = adopted_lab
    now = int(time.time())
    for proxysql in ProxySQLNode.objects.filter(cluster=cluster):
        stat(
            source(proxysql, hostgroup=100, username="utest", schemaname="sbtest"),
            digest(ORDERS),
            now - 3000,
            900,
            9_000_000,
        )
    actor = Actor.command(operator_user)
    cs = services.start_change_set(cluster, actor=actor, reason="orders to the readers")
    for rule_id, row in (
        (4, {"destination_hostgroup": 100}),
        (5, {"match_digest": "FROM orders", "destination_hostgroup": 101}),
    ):
        services.add_edit(
            cs,
            {"op": "upsert", "table": "mysql_query_rules", "row": {"rule_id": rule_id, "active": 1, "apply": 1, **row}},
            actor=actor,
        )
    op = plan_and_save(cs, actor=actor)
    assert (
        op.title
        == f"Change set #{cs.pk} on galera-lab: 2 query rules (version {cs.base.number} → {cs.base.number + 1})"
    )
    page = operator_client.get(op.get_absolute_url()).content.decode()
    assert f"<h1>{op.title}</h1>" in page and "orders to the readers" in page  # the reason stays, beside it
    # The share is information; rule 4 (a catch-all before rule 5) is a risk: the warning style is kept for it.
    levels = dict(re.findall(r'data-finding="(\w+)"><td>.*?data-level="(\w+)"', page))
    assert levels["rule_traffic_share"] == "info" and levels["rule_never_matches"] == "warning"
    # Each REPLACE shown without its NULL columns, saying how many; every column exactly as sent, folded below.
    sent = [s for s in op.plan["steps"][0]["nodes"].values()][0]["sql"]
    [full] = [s for s in sent if s.startswith("REPLACE INTO mysql_query_rules") and "'FROM orders'" in s]
    assert full.count("NULL") > 25
    shown = re.search(
        r"REPLACE INTO mysql_query_rules \(([\w,]+)\) VALUES \(([^)]*&#x27;FROM orders&#x27;[^)]*)\);"
        r" <span class=\"muted\" data-nulls-left-out>-- and (\d+) columns NULL</span>",
        page,
    )
    assert shown and "NULL" not in shown.group(2) and "match_digest" in shown.group(1)
    assert len(shown.group(1).split(",")) + int(shown.group(3)) == full.split(") VALUES")[0].count(",") + 1
    assert page.count(full.replace("'", "&#x27;")) == 1  # once, under "exactly as sent", for the first node only
    # The second node runs the same statements: said, not repeated.
    assert 'data-same-as="proxysql-1">proxysql-2: the same ' in page
