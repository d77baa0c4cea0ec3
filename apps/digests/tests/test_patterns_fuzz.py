"""Issue 34, every place a pattern is evaluated: pathological query-rule patterns as a cluster's current rules and in
a draft, through the digest pages a viewer reads (the digest's routes, the rule tester), and as mirror rules through
the digest poll's marking of copies (mirroring.mark_copies): never a 500, never an unbounded request or poll."""

from types import SimpleNamespace

from django.conf import settings as django_settings
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from apps.audit.actor import Actor
from apps.configuration import services
from apps.digests import mirroring
from apps.monitoring.tests.test_rule_regex import DIGEST_TEXTS, PATHOLOGICAL, mirror_rule, within

from .test_rule_test_page import rule, shop  # noqa: F401 (the fixture)


def test_fuzz_pathological_rules_on_the_digest_pages(client, viewer_user, operator_user, shop):  # noqa: F811
    client.force_login(viewer_user)
    cluster, cs, d = shop["cluster"], shop["cs"], shop["digest"]

    @hypothesis_settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        patterns=st.lists(PATHOLOGICAL, min_size=1, max_size=3),
        column=st.sampled_from(["match_digest", "match_pattern"]),
    )
    def check(patterns, column):
        content = dict(shop["version"].content)
        content["mysql_query_rules"] = [
            rule(10 + i, **{column: p}, destination_hostgroup=100, apply=0) for i, p in enumerate(patterns)
        ] + content["mysql_query_rules"]
        services.record_version(cluster, content, actor=Actor.system(), reason="fuzz", source="change")
        services.add_edit(
            cs,
            {
                "op": "upsert",
                "table": "mysql_query_rules",
                "row": rule(4, match_digest=patterns[0], destination_hostgroup=101, apply=1),
            },
            actor=Actor.command(operator_user),
        )
        with within(2 * django_settings.RULE_WALK_BUDGET_S + 2):
            detail = client.get(f"/digests/{d.pk}/")
            tester = client.get(
                "/digests/rules/",
                {
                    "cluster": cluster.pk,
                    "user": "app",
                    "change_set": cs.pk,
                    "digest": d.pk,
                    "query": "SELECT c FROM sbtest1 WHERE id = 1",
                },
            )
        assert detail.status_code == 200 and tester.status_code == 200
        assert "Traceback" not in tester.content.decode()

    check()


@hypothesis_settings(max_examples=40, deadline=None)
@given(patterns=st.lists(PATHOLOGICAL, min_size=1, max_size=4), caseless=st.booleans())
def test_fuzz_pathological_mirror_rules_in_the_digest_polls_marking_of_copies(patterns, caseless):
    rules = [mirror_rule(i, p, re_modifiers="CASELESS" if caseless else "") for i, p in enumerate(patterns, 1)]
    texts = {f"0x{i:016X}": text for i, text in enumerate(DIGEST_TEXTS)}
    deltas = [SimpleNamespace(digest=h, hostgroup=101, schemaname="sbtest", username="app") for h in texts]
    with within(django_settings.MIRROR_POLL_BUDGET_S + 2):
        marks = mirroring.mark_copies(rules, deltas, texts)
    assert len(marks) == len(deltas) and set(marks) <= {True, False, None}
