"""Tags on clusters (issue 23 §5): free key=value labels, checked (short, no control characters), edited by
operators on the cluster page (audited), filtering the fleet page and the API (?tag=env:prod)."""

import pytest
from django.urls import reverse

from apps.api.tests.conftest import error_of, token_client
from apps.audit.models import AuditEvent
from apps.fleet import tags
from apps.fleet.models import Cluster, ClusterTag

pytestmark = pytest.mark.django_db


def make(name, **labels):
    cluster = Cluster.objects.create(name=name, writer_hostgroup=100, reader_hostgroup=101)
    ClusterTag.objects.bulk_create([ClusterTag(cluster=cluster, key=k, value=v) for k, v in labels.items()])
    return cluster


def test_tags_are_short_plain_key_value_pairs():
    assert tags.parse(" env=prod , region = eu-west,, team=payments ") == {
        "env": "prod",
        "region": "eu-west",
        "team": "payments",
    }
    assert tags.parse("") == {}
    for bad, why in (
        ("env", "key=value"),
        ("=prod", "Tag key"),
        ("env=", "a value of 1 to"),
        ("env=a\x00b", "without control characters"),
        ("env=a\u2028b", "without control"),
        ("e nv=prod", "Tag key"),
        ("env=prod, env=test", "given twice"),
        ("k=" + "v" * 101, "1 to 100"),
        ("x" * 41 + "=v", "Tag key"),
        (",".join(f"k{i}=v" for i in range(21)), "At most 20"),
    ):
        with pytest.raises(tags.BadTag, match=why):
            tags.parse(bad)
    assert tags.parse_filter("env:prod") == tags.parse_filter("env=prod") == ("env", "prod")
    with pytest.raises(tags.BadTag):
        tags.parse_filter("prod")


def test_operators_edit_tags_on_the_cluster_page_viewers_only_read(client, viewer_user, operator_user):
    cluster = make("c1", env="test")
    save = reverse("pages:cluster_tags", args=[cluster.pk])
    client.force_login(viewer_user)
    page = client.get(cluster.get_absolute_url()).content.decode()
    assert 'data-tag="env=test"' in page and 'data-form="tags"' not in page
    assert client.post(save, {"tags": "env=prod"}).status_code == 403

    client.force_login(operator_user)
    assert 'data-form="tags"' in client.get(cluster.get_absolute_url()).content.decode()
    done = client.post(save, {"tags": "env=prod, region=eu-west"}, follow=True)
    assert "Tags saved." in done.content.decode() and tags.of(cluster) == {"env": "prod", "region": "eu-west"}
    refused = client.post(save, {"tags": "env=prod, team=a\x07b"}, follow=True)
    assert "Tags not saved: Tag team" in refused.content.decode()
    assert tags.of(cluster) == {"env": "prod", "region": "eu-west"}  # a bad tag changes nothing
    events = list(
        AuditEvent.objects.filter(action="cluster tags changed").order_by("id").values_list("outcome", "details")
    )
    assert events[0] == ("success", {"before": {"env": "test"}, "after": {"env": "prod", "region": "eu-west"}})
    assert events[1][0] == "invalid" and len(events) == 2


def test_the_fleet_page_and_the_api_filter_by_tag(client, viewer_user):
    make("prod-a", env="prod", team="payments")
    make("prod-b", env="prod")
    make("test-a", env="test")
    client.force_login(viewer_user)
    page = client.get("/", {"tag": "env:prod"}).content.decode()
    assert "prod-a" in page and "prod-b" in page and "test-a" not in page and "tagged env=prod" in page
    page = client.get("/", {"tag": "team:payments"}).content.decode()
    assert "prod-a" in page and "prod-b" not in page
    none = client.get("/", {"tag": "env:staging"})
    assert none.status_code == 200 and "prod-a" not in none.content.decode()
    odd = client.get("/", {"tag": "env\x00:x"})
    assert odd.status_code == 200 and "data-tag-error" in odd.content.decode() and "test-a" in odd.content.decode()

    api = token_client(viewer_user)
    listed = api.get("/api/v1/clusters/", {"tag": "env:prod"}).json()["results"]
    assert [(c["name"], c["tags"]) for c in listed] == [
        ("prod-a", {"env": "prod", "team": "payments"}),
        ("prod-b", {"env": "prod"}),
    ]
    assert "key=value" in error_of(api.get("/api/v1/clusters/", {"tag": "prod"}), 400)["fields"]["tag"][0]
    one = api.get(f"/api/v1/clusters/{Cluster.objects.get(name='test-a').pk}/").json()
    assert one["tags"] == {"env": "test"}


def test_the_tag_filter_costs_the_overview_no_query(live_redis, viewer_client, django_assert_max_num_queries):
    """The filtered overview reads the same tables, each narrowed by the tag: as many queries as the whole fleet's."""
    from apps.monitoring.tests import synthetic

    clusters, nodes, servers = synthetic.fleet(12, 2, 3, prefix="tg")
    synthetic.publish(nodes, servers, trouble_every=5)
    for cluster in Cluster.objects.filter(name__in=["tg-0001", "tg-0005"]):
        ClusterTag.objects.create(cluster=cluster, key="env", value="prod")
    url = reverse("monitoring:overview_live")
    viewer_client.get(url)  # warm the session
    with django_assert_max_num_queries(9) as whole:
        viewer_client.get(url)
    with django_assert_max_num_queries(9) as tagged:
        page = viewer_client.get(url, {"tag": "env:prod"}).content.decode()
    assert len(tagged.captured_queries) == len(whole.captured_queries)
    assert "tg-0001" in page and "tg-0005" in page and "tg-0002" not in page


def test_operators_replace_tags_through_the_api_with_the_pages_rules(viewer_user, operator_user):
    """Issue 23 §5: tags were read-only in the API. PUT replaces them, checked and audited as the page does."""
    cluster = make("api-tagged", env="test")
    url = f"/api/v1/clusters/{cluster.pk}/tags/"
    assert token_client(viewer_user).put(url, {"tags": {"env": "prod"}}).status_code == 403
    api = token_client(operator_user, "gitops")
    done = api.put(url, {"tags": {"env": "prod", "region": " eu-west "}})
    assert done.status_code == 200, done.content
    assert done.json()["tags"] == {"env": "prod", "region": "eu-west"} == tags.of(cluster)
    for bad, why in (
        ({"team": "a\x07b"}, "without control characters"),
        ({"e nv": "x"}, "Tag key"),
        ({f"k{i}": "v" for i in range(21)}, "At most 20"),
        ({"env": ""}, "a value of 1 to"),
    ):
        refused = api.put(url, {"tags": bad})
        assert why in error_of(refused, 400)["fields"]["tags"][0], bad
    assert error_of(api.put(url, {"tags": ["env=prod"]}), 400)["fields"]["tags"]
    assert tags.of(cluster) == {"env": "prod", "region": "eu-west"}  # a bad tag changes nothing
    assert api.put(url, {"tags": {}}).json()["tags"] == {} == tags.of(cluster)
    events = list(
        AuditEvent.objects.filter(action="cluster tags changed").order_by("id").values_list("actor", "outcome")
    )
    assert events[0] == ("otto-operator (token gitops)", "success") and events[-1][1] == "success"
    assert [o for _, o in events[1:-1]] == ["invalid"] * 4  # (the list body is refused by its type, before the rules)


def test_the_fleet_page_shows_each_clusters_tags_as_chips_that_filter(
    live_redis, viewer_client, django_assert_max_num_queries
):
    """Issue 23 §5: tags were on the cluster page only. The overview shows them on each cluster's row, read in the
    clusters' own query (the overview's query budget holds: tests/test_pages_states.py), each a link to its filter."""
    from apps.monitoring.tests import synthetic

    synthetic.fleet(3, 1, 1, prefix="chip")
    cluster = Cluster.objects.get(name="chip-0001")
    for key, value in (("team", "payments"), ("env", "prod")):
        ClusterTag.objects.create(cluster=cluster, key=key, value=value)
    page = viewer_client.get(reverse("pages:overview")).content.decode()
    page = page[page.index("<h2>Clusters") :]  # (the attention list above names the clusters too)
    row = page[page.index(">chip-0001<") : page.index(">chip-0002<")]
    assert row.index('data-cluster-tag="env=prod"') < row.index('data-cluster-tag="team=payments"')
    assert 'href="?tag=env%3Dprod"' in row and "data-cluster-tag" not in page[page.index(">chip-0002<") :]
    filtered = viewer_client.get(reverse("pages:overview"), {"tag": "env=prod"}).content.decode()
    assert "chip-0001" in filtered and "chip-0002" not in filtered


def test_a_tag_list_cut_by_the_database_ends_with_an_ellipsis():
    assert tags.from_text(None) == [] and tags.from_text("team=a,env=b") == ["env=b", "team=a"]
    cut = ",".join(f"k{i:02d}={'v' * 90}" for i in range(11))[: tags.GROUP_CONCAT_CUT]
    shown = tags.from_text(cut)
    assert shown[-1] == "…" and len(shown) == 11 and all(len(t) == 94 for t in shown[:-1])


def test_the_editor_takes_both_ways_of_writing_a_tag_and_every_page_shows_one(client, operator_user):
    """Issue 36 item 12: the filter and the search said env:prod, the editor env=prod (and refused env:prod)."""
    assert tags.parse("env:prod, region=eu-west, url=http://x:1") == {
        "env": "prod",
        "region": "eu-west",
        "url": "http://x:1",
    }
    cluster = make("c1")
    client.force_login(operator_user)
    done = client.post(
        reverse("pages:cluster_tags", args=[cluster.pk]), {"tags": "env:prod, team=payments"}, follow=True
    ).content.decode()
    assert "Tags saved." in done and tags.of(cluster) == {"env": "prod", "team": "payments"}
    assert 'data-tag="env=prod"' in done and f'href="{reverse("pages:overview")}?tag=env=prod"' in done
    overview = client.get("/", {"tag": "env:prod"}).content.decode()
    assert "tagged env=prod" in overview and 'placeholder="env=prod"' in overview
    assert 'value="env=prod"' in overview and "env:prod" not in overview
    assert "tag (env=prod)" in client.get(reverse("search"), {"q": "x"}).content.decode()
