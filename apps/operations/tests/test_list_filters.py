"""The operations list filtered by cluster, kind and state, the filter kept across pages; a title links too."""

import pytest
from django.urls import reverse

from apps.fleet.models import Cluster
from apps.operations.models import Operation

pytestmark = pytest.mark.django_db


def test_operations_filter_by_cluster_kind_and_state(viewer_client):
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=10, reader_hostgroup=20)
    beta = Cluster.objects.create(name="beta", writer_hostgroup=10, reader_hostgroup=20)
    for cluster, kind, state, title in (
        (alpha, "drain", "done", "Drain alpha-db-1"),
        (alpha, "switchover", "failed", "Switchover alpha to db-2"),
        (beta, "drain", "done", "Drain beta-db-3"),
    ):
        Operation.objects.create(cluster=cluster, kind=kind, state=state, title=title, actor="otto", plan={})
    url = reverse("operations:list")

    def titles(query):
        page = viewer_client.get(url, query).content.decode()
        return {t for t in ("Drain alpha-db-1", "Switchover alpha to db-2", "Drain beta-db-3") if t in page}

    assert titles({"cluster": alpha.pk}) == {"Drain alpha-db-1", "Switchover alpha to db-2"}
    assert titles({"kind": "drain"}) == {"Drain alpha-db-1", "Drain beta-db-3"}
    assert titles({"cluster": alpha.pk, "state": "failed"}) == {"Switchover alpha to db-2"}
    assert len(titles({"kind": "no-such-kind"})) == 3  # a filter not understood narrows nothing
    page = viewer_client.get(url, {"kind": "drain"}).content.decode()
    assert 'data-form="operation-filter"' in page and '<option value="drain" selected>' in page
