"""One filter, two doors (issue 35 item 4): a list the console shows as a page and the API answers must give the same
rows, in the same order, for the same filter. Each pair below reads one selector; these tests hold it from outside."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from apps.accounts.roles import VIEWER
from apps.alerts.models import Channel, Notification, Silence
from apps.configuration import content
from apps.configuration.models import ChangeSet, ConfigVersion
from apps.fleet.models import Cluster, ClusterTag, ProxySQLNode, Server
from apps.operations.models import Operation
from apps.plans.vocabulary import Plan
from apps.reports.models import Report

from .conftest import token_client


@pytest.fixture
def viewer(client, django_user_model):
    user = django_user_model.objects.create_user(username="doors", password="x")
    user.groups.add(Group.objects.get_or_create(name=VIEWER)[0])
    client.force_login(user)
    return client, token_client(user)


def _api_ids(api, url, **params):
    response = api.get(url, params)
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def _page_ids(client, url, **params):
    response = client.get(url, params)
    assert response.status_code == 200
    return [row.pk for row in response.context["page"]]


def test_operations_page_and_api_list_the_same_operations_for_each_filter(db, viewer):
    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    beta = Cluster.objects.create(name="beta", writer_hostgroup=100, reader_hostgroup=101)
    for cluster, kind, state in [
        (alpha, "switchover", "done"),
        (beta, "drain", "failed"),
        (alpha, "drain", "done"),
        (beta, "switchover", "planned"),
        (alpha, "switchover", "failed"),
    ]:
        Operation.objects.create(
            cluster=cluster,
            kind=kind,
            state=state,
            title=f"{kind} {state}",
            actor="x",
            plan=Plan(kind, cluster.pk, "t", [], []).to_json(),
        )
    for params in [
        {},
        {"cluster": alpha.pk},
        {"kind": "drain"},
        {"state": "done"},
        {"cluster": alpha.pk, "kind": "switchover", "state": "failed"},
        {"cluster": beta.pk, "state": "done"},
    ]:
        page = _page_ids(client, "/operations/", **params)
        assert page == _api_ids(api, "/api/v1/operations/", **params), params
    assert len(_page_ids(client, "/operations/", cluster=alpha.pk)) == 3


def test_reports_page_and_api_list_the_same_reports_for_each_filter(db, viewer):
    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    beta = Cluster.objects.create(name="beta", writer_hostgroup=100, reader_hostgroup=101)
    end = timezone.now().replace(microsecond=0)
    for i, (cluster, period) in enumerate(
        [(alpha, "daily"), (beta, "weekly"), (None, "daily"), (alpha, "weekly"), (beta, "daily")]
    ):
        Report.objects.create(
            scope="cluster" if cluster else "fleet",
            cluster=cluster,
            scope_name=cluster.name if cluster else "fleet",
            period=period,
            start=end - timedelta(days=i + 1),
            end=end - timedelta(days=i),
            built_at=end,
            built_by="x",
            headline="h",
            data={"title": f"r{i}"},
            html="",
        )
    for params in [{}, {"cluster": alpha.pk}, {"period": "weekly"}, {"cluster": beta.pk, "period": "daily"}]:
        page = _page_ids(client, "/reports/", **params)
        assert page == _api_ids(api, "/api/v1/reports/", **params), params
    assert len(_page_ids(client, "/reports/", cluster=alpha.pk)) == 2
    assert len(_page_ids(client, "/reports/", period="weekly")) == 2


def test_the_fleet_page_and_the_cluster_api_narrow_clusters_by_tag_alike(db, viewer):
    client, api = viewer
    for name, env in [("b-prod", "prod"), ("a-prod", "prod"), ("c-test", "test"), ("d-none", None)]:
        cluster = Cluster.objects.create(name=name, writer_hostgroup=100, reader_hostgroup=101)
        if env:
            ClusterTag.objects.create(cluster=cluster, key="env", value=env)
    for tag in ["env=prod", "env=test"]:
        response = client.get("/", {"tag": tag})
        assert response.status_code == 200
        page = [c["name"] for c in response.context["clusters"]]
        answer = api.get("/api/v1/clusters/", {"tag": tag}).json()["results"]
        assert page == [c["name"] for c in answer], tag
    assert [c["name"] for c in api.get("/api/v1/clusters/", {"tag": "env=prod"}).json()["results"]] == [
        "a-prod",
        "b-prod",
    ]


def _api_all_ids(api, url, **params):
    """Every page of an API list, in order (the page shows more rows than the API's default page)."""
    return _api_ids(api, url, page_size=500, **params)


def test_silences_page_and_api_list_the_same_silences_active_and_ended(db, viewer):
    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    now = timezone.now()
    for i, (ends_in, ended_early) in enumerate([(60, False), (-60, False), (120, True), (30, False), (-5, False)]):
        Silence.objects.create(
            cluster=alpha if i % 2 else None,
            rule="writer_none",
            reason=f"s{i}",
            starts_at=now - timedelta(minutes=90),
            ends_at=now + timedelta(minutes=ends_in),
            created_by="x",
            expired_at=now - timedelta(minutes=1) if ended_early else None,
            expired_by="x" if ended_early else "",
        )
    response = client.get("/alerts/silences/")
    assert response.status_code == 200
    current, past = [s.pk for s in response.context["current"]], [s.pk for s in response.context["past"]]
    assert current == _api_all_ids(api, "/api/v1/silences/", active="true")
    assert past == _api_all_ids(api, "/api/v1/silences/", active="false")
    assert [Silence.objects.get(pk=pk).reason for pk in current] == ["s0", "s3"]
    assert sorted(current + past) == sorted(_api_all_ids(api, "/api/v1/silences/"))
    bad = api.get("/api/v1/silences/", {"active": "sometimes"})
    assert bad.status_code == 400 and "active" in bad.json()["error"]["fields"]


def test_channels_page_and_api_list_the_same_channels(db, viewer):
    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    for name in ["pager", "mail", "chat"]:
        channel = Channel.objects.create(name=name, kind="email", recipients="ops@example.com")
        channel.clusters.add(alpha)
    response = client.get("/alerts/channels/")
    assert response.status_code == 200
    page = [c.pk for c in response.context["channels"]]
    assert page == _api_all_ids(api, "/api/v1/alert-channels/")
    assert [Channel.objects.get(pk=pk).name for pk in page] == ["chat", "mail", "pager"]


def test_the_configuration_page_and_api_list_the_same_versions_and_change_sets(db, viewer, django_user_model):
    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    beta = Cluster.objects.create(name="beta", writer_hostgroup=100, reader_hostgroup=101)
    parent = None
    for number in range(1, 31):  # more than one page of the page's 25
        parent = ConfigVersion.objects.create(
            cluster=alpha,
            number=number,
            parent=parent,
            author="x",
            reason="r",
            source="change",
            content=content.empty(),
        )
    other = ConfigVersion.objects.create(
        cluster=beta, number=1, author="x", reason="r", source="adopt", content=content.empty()
    )
    author = django_user_model.objects.get(username="doors")
    for cluster, base, state in [
        (alpha, parent, "draft"),
        (alpha, parent, "applied"),
        (beta, other, "draft"),
        (alpha, parent, "planned"),
        (alpha, parent, "discarded"),
        (alpha, parent, "draft"),
    ]:
        ChangeSet.objects.create(cluster=cluster, base=base, author=author, author_name="doors", state=state, edits=[])
    url = f"/configuration/clusters/{alpha.pk}/"
    versions = f"/api/v1/clusters/{alpha.pk}/config/versions/"
    for page in [1, 2]:
        response = client.get(url, {"page": page})
        assert response.status_code == 200
        shown = [v.pk for v in response.context["versions"]]
        assert shown == _api_ids(api, versions, page=page, page_size=25), page
    assert len(shown) == 5

    drafts = [cs.pk for cs in client.get(url).context["drafts"]]
    change_sets = f"/api/v1/clusters/{alpha.pk}/config/change-sets/"
    assert drafts == _api_all_ids(api, change_sets, state=["draft", "planned"])
    assert [ChangeSet.objects.get(pk=pk).state for pk in drafts] == ["draft", "planned", "draft"]
    assert len(_api_all_ids(api, change_sets)) == 5
    bad = api.get(change_sets, {"state": "burning"})
    assert bad.status_code == 400 and "state" in bad.json()["error"]["fields"]


def test_the_cluster_page_and_the_api_list_the_same_backends_and_proxysql_nodes(db, viewer):
    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    beta = Cluster.objects.create(name="beta", writer_hostgroup=100, reader_hostgroup=101)
    for cluster, host, port in [
        (alpha, "db-b", 3306),
        (beta, "db-a", 3308),
        (alpha, "db-a", 3307),
        (alpha, "db-a", 3306),
        (beta, "db-c", 3306),
    ]:
        Server.objects.create(cluster=cluster, hostname=host, port=port)
    for cluster, name, port in [(alpha, "px-2", 6032), (beta, "px-1", 6033), (alpha, "px-1", 6034)]:
        ProxySQLNode.objects.create(cluster=cluster, name=name, admin_host="127.0.0.1", admin_port=port)
    for cluster in [alpha, beta]:
        response = client.get(f"/clusters/{cluster.pk}/")
        assert response.status_code == 200
        backends = [b["server"].pk for b in response.context["backends"]]
        assert backends == _api_all_ids(api, "/api/v1/servers/", cluster=cluster.pk), cluster.name
        nodes = [v["node"].pk for v in response.context["node_views"]]
        assert nodes == _api_all_ids(api, "/api/v1/proxysql-nodes/", cluster=cluster.pk), cluster.name
    shown = [(b["server"].hostname, b["server"].port) for b in client.get(f"/clusters/{alpha.pk}/").context["backends"]]
    assert shown == [("db-a", 3306), ("db-a", 3307), ("db-b", 3306)]
    bad = api.get("/api/v1/servers/", {"cluster": "alpha"})
    assert bad.status_code == 400 and "cluster" in bad.json()["error"]["fields"]


def _backend_ids(response):
    assert response.status_code == 200
    return [b["server"].pk for b in response.context_data["backends"]]  # a fragment too (a partial: no .context)


def test_the_cluster_page_filters_its_backends_as_the_servers_api_does(db, viewer):
    """hostname, port and maintenance: the page, its live fragment and GET /api/v1/servers/ list the same backends;
    a value the API refuses (400) leaves the page's list whole, with a message saying why."""
    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    beta = Cluster.objects.create(name="beta", writer_hostgroup=100, reader_hostgroup=101)
    for cluster, host, port, maintenance in [
        (alpha, "db-b", 3306, False),
        (beta, "db-a", 3309, True),
        (alpha, "db-a", 3307, True),
        (alpha, "db-a", 3306, False),
        (alpha, "db-c", 3308, True),
    ]:
        Server.objects.create(cluster=cluster, hostname=host, port=port, maintenance=maintenance)
    page, fragment = f"/clusters/{alpha.pk}/", f"/monitoring/clusters/{alpha.pk}/live/"
    for params in [
        {},
        {"hostname": "db-a"},
        {"port": 3306},
        {"maintenance": "true"},
        {"maintenance": "false"},
        {"hostname": "db-a", "port": 3307, "maintenance": "true"},
        {"hostname": "db-a", "maintenance": "no"},
        {"hostname": "nowhere"},
    ]:
        answer = _api_all_ids(api, "/api/v1/servers/", cluster=alpha.pk, **params)
        assert _backend_ids(client.get(page, params)) == answer, params
        assert _backend_ids(client.get(fragment, params)) == answer, params
    shown = client.get(page, {"hostname": "db-a"})
    assert [(b["server"].hostname, b["server"].port) for b in shown.context["backends"]] == [
        ("db-a", 3306),
        ("db-a", 3307),
    ]
    html = shown.content.decode()
    assert "2 of the cluster's 4 backends match" in html
    assert f'hx-get="/monitoring/clusters/{alpha.pk}/live/?hostname=db-a"' in html  # the refresh keeps the filter
    assert 'value="db-a"' in html and "data-backend-filter-error" not in html

    every = _api_all_ids(api, "/api/v1/servers/", cluster=alpha.pk)
    for bad, words in [
        ({"port": "abc"}, "Port &#x27;abc&#x27;: a port is a whole number from 1 to 65535"),
        ({"port": "70000"}, "Port &#x27;70000&#x27;: a port is a whole number from 1 to 65535"),
        ({"port": "0", "hostname": "db-a"}, "Port &#x27;0&#x27;: a port is a whole number from 1 to 65535"),
        ({"maintenance": "sometimes"}, "Maintenance &#x27;sometimes&#x27;: true or false (empty: any backend)"),
        ({"hostname": "db\x00a"}, "Null characters are not allowed"),
    ]:
        assert api.get("/api/v1/servers/", {"cluster": alpha.pk, **bad}).status_code == 400, bad
        for url in (page, fragment):
            response = client.get(url, bad)
            assert _backend_ids(response) == every, (url, bad)
            html = response.content.decode()
            assert "Backends not filtered (every backend of the cluster is listed)" in html and words in html, bad


def test_each_door_reads_its_list_in_queries_bounded_by_the_page_not_the_rows(db, viewer, django_user_model):
    """The selectors carry the list's joins and prefetches: twice the rows, the same number of queries."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    author = django_user_model.objects.get(username="doors")
    now = timezone.now()

    def add_rows(first, count):
        for i in range(first, first + count):
            Silence.objects.create(
                cluster=alpha, reason="r", starts_at=now, ends_at=now + timedelta(hours=1), created_by="x"
            )
            channel = Channel.objects.create(name=f"ch{i}", kind="email", recipients="ops@example.com")
            channel.clusters.add(alpha)
            for state in ["sent", "failed"]:
                Notification.objects.create(channel=channel, reason="test", status="firing", payload={}, state=state)
            parent = ConfigVersion.objects.filter(cluster=alpha).order_by("-number").first()
            version = ConfigVersion.objects.create(
                cluster=alpha,
                number=i + 1,
                parent=parent,
                author="x",
                reason="r",
                source="change",
                content=content.empty(),
            )
            ChangeSet.objects.create(cluster=alpha, base=version, author=author, author_name="doors", edits=[])

    urls = [
        "/api/v1/silences/",
        "/api/v1/alert-channels/",
        f"/api/v1/clusters/{alpha.pk}/config/versions/",
        f"/api/v1/clusters/{alpha.pk}/config/change-sets/",
        "/alerts/silences/",
        "/alerts/channels/",
        f"/configuration/clusters/{alpha.pk}/",
    ]

    def queries():
        counts = []
        for url in urls:
            door = api if url.startswith("/api/") else client
            door.get(url)  # the first request of a door also reads its session or token once
            with CaptureQueriesContext(connection) as read:
                assert door.get(url).status_code == 200, url
            counts.append(len(read))
        return counts

    add_rows(0, 3)
    few = queries()
    add_rows(3, 6)
    assert queries() == few, list(zip(urls, few))
    shown = client.get("/alerts/channels/").context["channels"]
    assert len(shown) == 9 and {(ch.last.channel_id, ch.last.state) for ch in shown} == {
        (ch.pk, "failed") for ch in shown
    }  # each channel's own newest notification


def test_the_cluster_page_reads_its_filtered_backends_in_queries_bounded_by_the_page(db, viewer):
    """The backend filter costs the cluster page and its live fragment one query (the filtered list beside the whole
    one), at any number of backends; the API's list too."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client, api = viewer
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    ProxySQLNode.objects.create(cluster=alpha, name="px-1", admin_host="127.0.0.1", admin_port=6032)

    def add_servers(first, count):
        for i in range(first, first + count):
            Server.objects.create(cluster=alpha, hostname="db-a" if i % 3 else "db-b", port=3306 + i)

    filtered = {"hostname": "db-a", "maintenance": "false"}
    doors = [
        (client, f"/clusters/{alpha.pk}/", {}),
        (client, f"/clusters/{alpha.pk}/", filtered),
        (client, f"/monitoring/clusters/{alpha.pk}/live/", {}),
        (client, f"/monitoring/clusters/{alpha.pk}/live/", filtered),
        (api, "/api/v1/servers/", {"cluster": alpha.pk, **filtered}),
    ]

    def queries():
        counts = []
        for door, url, params in doors:
            door.get(url, params)  # the first request of a door also reads its session or token once
            with CaptureQueriesContext(connection) as read:
                assert door.get(url, params).status_code == 200, url
            counts.append(len(read))
        return counts

    add_servers(0, 3)
    few = queries()
    add_servers(3, 6)
    assert queries() == few, few
    assert few[1] == few[0] + 1 and few[3] == few[2] + 1, few  # the filtered list: one query more
    assert len(client.get(f"/clusters/{alpha.pk}/", filtered).context["backends"]) == 6


def test_dr_channels_report_schedules_and_rollouts_are_listed_alike_by_page_and_api(db, viewer):
    """The last three lists that built their own querysets in the API (issue 35 item 4): a cluster page's DR channels
    and GET /api/v1/channels/?cluster= (dr.selectors.channels), the schedules page and /api/v1/report-schedules/
    (reports.selectors.schedules), the rollouts page and /api/v1/rollouts/ (rollouts.selectors.latest)."""
    from apps.dr.models import ChannelCandidate, ReplicationChannel
    from apps.reports.models import ReportSchedule
    from apps.rollouts.models import Rollout

    client, api = viewer
    dc = [Cluster.objects.create(name=f"dc{i}", writer_hostgroup=10, reader_hostgroup=11) for i in (1, 2, 3)]
    servers = [Server.objects.create(cluster=c, hostname=f"db.{c.name}", port=3306) for c in dc]
    for name, a, b in [("zeta", 0, 1), ("alpha", 1, 2), ("mid", 0, 2)]:
        channel = ReplicationChannel.objects.create(
            name=name,
            source_cluster=dc[a],
            replica_cluster=dc[b],
            source_server=servers[a],
            replica_server=servers[b],
            replication_user="repl",
        )
        ChannelCandidate.objects.create(channel=channel, side="source", server=servers[a], weight=50)
    for cluster in dc:
        page = [row["channel"].pk for row in client.get(f"/clusters/{cluster.pk}/").context["dr_channels"]]
        assert page == _api_all_ids(api, "/api/v1/channels/", cluster=cluster.pk), cluster.name
    assert [
        ReplicationChannel.objects.get(pk=pk).name for pk in _api_all_ids(api, "/api/v1/channels/", cluster=dc[0].pk)
    ] == ["mid", "zeta"]

    for cluster, period in [(dc[2], "daily"), (None, "weekly"), (dc[0], "daily")]:
        ReportSchedule.objects.create(cluster=cluster, period=period, recipients="ops@example.com")
    response = client.get("/reports/schedules/")
    assert response.status_code == 200
    assert [s.pk for s in response.context["schedules"]] == _api_all_ids(api, "/api/v1/report-schedules/")

    for reason in ["first", "second", "third"]:
        Rollout.objects.create(reason=reason, change={"edits": []}, waves_text="1", planner="x")
    response = client.get("/rollouts/")
    assert response.status_code == 200
    page = [row["rollout"] for row in response.context["rows"]]
    answered = api.get("/api/v1/rollouts/")
    assert answered.status_code == 200
    assert page == [row["rollout"] for row in answered.json()] and len(page) == 3
