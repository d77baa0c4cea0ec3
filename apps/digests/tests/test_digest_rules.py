"""A query rule made from a digest (route to readers, cache, mirror, block) lands in a draft change set, exact
on the digest in both regex engines, placed where it is reached; never applied from the digest page."""

import re
import time

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import content as C
from apps.configuration import rule_tester, services
from apps.configuration.models import ChangeSet
from apps.configuration.tables import MYSQL_USERS, typed_row
from apps.digests import rules

from .factories import digest, fleet, source, stat
from .test_rule_test_page import rule

pytestmark = pytest.mark.django_db

TEXT = "SELECT c FROM sbtest1 WHERE id IN (?,?,?,...) AND (k+?)*2 > ? /* $x */"


def content(*query_rules):
    out = C.empty()
    out["roles"] = {"writer": 100, "reader": 101}
    out["mysql_users"] = [typed_row(MYSQL_USERS, {"username": "app", "default_hostgroup": 100}, strict=False)]
    out["mysql_query_rules"] = list(query_rules)
    return C.sort(out)


@pytest.fixture
def shop():
    cluster, (node,) = fleet(1, "shop")
    version = services.record_version(
        cluster,
        content(rule(10, match_digest="^SELECT", destination_hostgroup=101, apply=1)),
        actor=Actor.system(),
        reason="rules",
        source="change",
    )
    d = digest(TEXT, h="0x00000000000000D1")
    stat(source(node), d, int(time.time()) - 60, 3, 30)
    return cluster, version, d


def walk(content_, d, **kw):
    return rule_tester.on_content(content_, digest_text=d.digest_text, digest=d.digest, username="app", **kw)


@pytest.mark.parametrize(
    "action, values, expect",
    [
        ("readers", {}, {"destination_hostgroup": 101, "apply": 1}),
        ("cache", {"ttl": 5000}, {"cache_ttl": 5000, "apply": 0}),
        ("mirror", {"mirror_hostgroup": 200}, {"mirror_hostgroup": 200, "apply": 0}),
        ("block", {}, {"error_msg": "Query blocked by the console (digest 0x00000000000000D1)", "apply": 1}),
        ("block", {"error_msg": "not now"}, {"error_msg": "not now", "apply": 1}),
    ],
)
def test_each_action_makes_its_rule(shop, action, values, expect):
    _, version, d = shop
    row = rules.rule_for(version.content, d, action, **values)
    assert {k: row[k] for k in expect} == expect
    assert row["rule_id"] == 9 and row["active"] == 1 and row["flagIN"] == 0  # before rule 10, which catches it today


@pytest.mark.parametrize("engine", ["1", "2"])
def test_the_text_match_is_exact_in_both_engines(shop, engine):
    _, version, d = shop
    base = {**version.content, "global_variables": {"mysql-query_processor_regex": engine}}
    row = rules.rule_for(base, d, "block")
    assert row["match_digest"].startswith("^SELECT c FROM sbtest1 WHERE id IN \\(\\?,\\?,\\?,\\.\\.\\.\\)")
    target = {**base, "mysql_query_rules": base["mysql_query_rules"] + [row]}
    out = walk(target, d)
    assert [s.rule_id for s in out.matched] == [9] and out.error_msg
    other = digest(TEXT + " LIMIT ?", h="0x00000000000000D2")  # a longer digest is not caught
    assert [s.rule_id for s in walk(target, other).matched] == [10]


def test_by_hash_and_placement(shop):
    _, version, d = shop
    row = rules.rule_for(version.content, d, "readers", by="hash")
    assert row["digest"] == "0x00000000000000D1" and row["match_digest"] is None
    crowded = content(rule(1, match_digest="^SELECT", destination_hostgroup=101, apply=1), rule(7))
    assert rules.rule_for(crowded, d, "cache", ttl=10)["rule_id"] == 8  # nothing free before rule 1: after the last
    assert rules.rule_for(content(), d, "cache", ttl=10)["rule_id"] == 1


@pytest.mark.parametrize(
    "action, values, message",
    [
        ("cache", {}, "a cache needs a TTL"),
        ("mirror", {}, "a mirror needs the hostgroup"),
        ("drop", {}, "unknown action"),
    ],
)
def test_missing_values_are_refused(shop, action, values, message):
    with pytest.raises(rules.RuleRefused, match=message):
        rules.rule_for(shop[1].content, shop[2], action, **values)


def test_propose_makes_an_audited_draft_that_routes_the_digest(shop, operator_user):
    cluster, version, d = shop
    cs = rules.propose(cluster, d, "cache", actor=Actor.command(operator_user), ttl=3000)
    assert cs.state == ChangeSet.State.DRAFT and cs.base == version and len(cs.edits) == 1
    assert cs.reason.startswith("cache digest 0x00000000000000D1: SELECT c FROM sbtest1")
    out = walk(services.target_of(cs), d)
    assert [s.rule_id for s in out.matched] == [9, 10] and (out.cache_ttl, out.hostgroup) == (3000, 101)
    assert AuditEvent.objects.filter(action="change set created", cluster_id=cluster.pk).count() == 1
    assert services.latest(cluster) == version  # nothing applied


def test_no_version_is_refused(operator_user):
    cluster, _ = fleet(1, "bare")
    with pytest.raises(rules.RuleRefused, match="no configuration version"):
        rules.propose(cluster, digest("SELECT 1"), "readers", actor=Actor.command(operator_user))


def test_the_page_makes_the_draft(client, operator_user, viewer_user, shop):
    cluster, _, d = shop
    client.force_login(viewer_user)
    page = client.get(f"/digests/{d.pk}/").content.decode()
    assert 'id="make-rule"' not in page
    assert client.post(f"/digests/{d.pk}/rule/", {"cluster": cluster.pk, "action": "readers"}).status_code == 403
    assert not ChangeSet.objects.exists()

    client.force_login(operator_user)
    listed = client.get("/digests/", {"cluster": cluster.pk}).content.decode()
    assert f'/digests/{d.pk}/?cluster={cluster.pk}#make-rule" data-make-rule' in listed
    page = client.get(f"/digests/{d.pk}/", {"cluster": cluster.pk}).content.decode()
    assert re.search(rf'<option value="{cluster.pk}" selected>shop</option>', page)
    response = client.post(
        f"/digests/{d.pk}/rule/", {"cluster": cluster.pk, "action": "mirror", "by": "text", "mirror_hostgroup": "200"}
    )
    cs = ChangeSet.objects.get()
    assert response.status_code == 302 and response["Location"] == cs.get_absolute_url()
    assert cs.edits[0]["row"]["mirror_hostgroup"] == 200 and cs.author == operator_user

    response = client.post(
        f"/digests/{d.pk}/rule/", {"cluster": cluster.pk, "action": "mirror", "by": "text"}, follow=True
    )
    assert "No rule made: a mirror needs the hostgroup to mirror to." in response.content.decode()
    assert ChangeSet.objects.count() == 1
