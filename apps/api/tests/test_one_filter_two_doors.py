"""One filter, two doors (issue 35 item 4): a list the console shows as a page and the API answers must give the same
rows, in the same order, for the same filter. Each pair below reads one selector; these tests hold it from outside."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from apps.accounts.roles import VIEWER
from apps.fleet.models import Cluster, ClusterTag
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
