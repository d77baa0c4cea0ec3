"""The rule tester's page (/digests/rules/): a digest or a typed query walked through the cluster's current
rules and, beside them, a draft change set's; reached from the digest list and the digest's detail."""

import re
import time

import pytest

from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import services
from apps.configuration.tables import MYSQL_QUERY_RULES, MYSQL_USERS, typed_row

from .factories import digest, fleet, source, stat

pytestmark = pytest.mark.django_db


def rule(rule_id, **over):
    return typed_row(MYSQL_QUERY_RULES, {"rule_id": rule_id, "active": 1, **over}, strict=False)


@pytest.fixture
def shop(operator_user):
    cluster, (n1, _) = fleet(2, "shop")
    content = C.empty()
    content["roles"] = {"writer": 100, "reader": 101}
    content["mysql_users"] = [typed_row(MYSQL_USERS, {"username": "app", "default_hostgroup": 100}, strict=False)]
    content["mysql_query_rules"] = [
        rule(1, match_digest="^SELECT", flagOUT=5),
        rule(2, flagIN=5, match_digest="FOR UPDATE", destination_hostgroup=100, apply=1),
        rule(3, flagIN=5, destination_hostgroup=101, apply=1),
    ]
    version = services.record_version(cluster, content, actor=Actor.system(), reason="rules", source="change")
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="cache the orders lookup")
    cached = rule(2, flagIN=5, match_digest="FROM orders", cache_ttl=5000, destination_hostgroup=101, apply=1)
    services.add_edit(
        cs, {"op": "upsert", "table": "mysql_query_rules", "row": cached}, actor=Actor.command(operator_user)
    )
    d = digest("SELECT * FROM orders WHERE id = ?", h="0x00000000000000B1")
    stat(source(n1, 101, "app", "shop"), d, int(time.time()) - 600, 10, 1000)
    return {"cluster": cluster, "version": version, "cs": cs, "digest": d}


def hits(html, column):
    part = re.search(rf'data-column="{column}">(.*?)</section>', html, re.S).group(1)
    return [int(r) for r in re.findall(r'data-rule="(\d+)" data-hit="1"', part)]


def outcome(html, column):
    part = re.search(rf'data-column="{column}">(.*?)</section>', html, re.S).group(1)
    return re.sub(r"<[^>]+>", "", re.search(r"<p data-outcome>(.*?)</p>", part, re.S).group(1))


def test_typed_query_on_the_current_rules(client, viewer_user, shop):
    client.force_login(viewer_user)
    response = client.get(
        "/digests/rules/",
        {"cluster": shop["cluster"].pk, "user": "app", "query": "SELECT c FROM t WHERE id=5 FOR UPDATE"},
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert hits(html, 0) == [1, 2]
    assert "Sent to hostgroup 100 (rule 2)" in outcome(html, 0)
    assert "flag 0 → 5" in html
    assert 'data-column="1"' not in html


def test_digest_against_a_draft_side_by_side(client, viewer_user, shop):
    client.force_login(viewer_user)
    response = client.get(
        "/digests/rules/",
        {"cluster": shop["cluster"].pk, "digest": shop["digest"].pk, "user": "app", "change_set": shop["cs"].pk},
    )
    html = response.content.decode()
    assert hits(html, 0) == [1, 3] and "Sent to hostgroup 101 (rule 3)" in outcome(html, 0)
    assert hits(html, 1) == [1, 2] and "cached for 5000 ms" in outcome(html, 1)
    assert f"With change set #{shop['cs'].pk}" in html
    assert "No query text: match_pattern was tested on the digest text" in html


def test_reached_from_the_list_and_the_detail(client, viewer_user, shop):
    client.force_login(viewer_user)
    listed = client.get("/digests/", {"cluster": shop["cluster"].pk}).content.decode()
    assert f"/digests/rules/?cluster={shop['cluster'].pk}&amp;digest={shop['digest'].pk}" in listed
    detail = client.get(f"/digests/{shop['digest'].pk}/").content.decode()
    link = re.search(r'href="(/digests/rules/\?[^"]+)" data-test-rules', detail).group(1).replace("&amp;", "&")
    page = client.get(link).content.decode()
    assert hits(page, 0) == [1, 3]
    assert 'value="app"' in page and 'value="shop"' in page


@pytest.mark.parametrize(
    "params, note",
    [
        ({"cluster": "x"}, "Ignored cluster"),
        ({"cluster": "999999"}, "No such cluster"),
        ({"change_set": "999999", "query": "SELECT 1"}, "not a draft of this cluster"),
    ],
)
def test_bad_input_is_a_note(client, viewer_user, shop, params, note):
    client.force_login(viewer_user)
    if "change_set" in params:
        params = {**params, "cluster": shop["cluster"].pk}
    response = client.get("/digests/rules/", params)
    assert response.status_code == 200 and note in response.content.decode()


def test_a_cluster_without_a_version_says_so(client, viewer_user, db):
    client.force_login(viewer_user)
    cluster, _ = fleet(1, "bare")
    response = client.get("/digests/rules/", {"cluster": cluster.pk, "query": "SELECT 1"})
    assert "has no configuration version yet" in response.content.decode()


def test_a_draft_rule_at_pcres_match_limit_is_told_on_the_page_not_a_500(client, viewer_user, operator_user, shop):
    """Issue 34: a draft rule reaching PCRE2's match limit made the page answer 500 (LibraryError in the walk)."""
    backtracking = rule(2, flagIN=5, match_digest=r"^(\w+\s?)*$", destination_hostgroup=101, apply=1)
    services.add_edit(
        shop["cs"],
        {"op": "upsert", "table": "mysql_query_rules", "row": backtracking},
        actor=Actor.command(operator_user),
    )
    client.force_login(viewer_user)
    response = client.get(
        "/digests/rules/",
        {
            "cluster": shop["cluster"].pk,
            "user": "app",
            "change_set": shop["cs"].pk,
            "query": "SELECT c FROM sbtest1 WHERE id BETWEEN 1 AND 5 ORDER BY c",
        },
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "this pattern reaches the match limit on" in html and "counted as no match" in html
    assert hits(html, 1) == [1, 3] and "Sent to hostgroup 101 (rule 3)" in outcome(html, 1)
