"""The API says which clusters a ProxySQL serves (conftest.adopted_shared: one pair fronting the Galera lab
and the DR lab's dc1)."""

import pytest

from .conftest import token_client

pytestmark = pytest.mark.django_db


def test_a_node_says_every_cluster_its_proxysql_serves(adopted_shared, viewer_user):
    lab, dc1, (first, second) = adopted_shared
    api = token_client(viewer_user)
    node = dc1.proxysql_nodes.get(name="proxysql-1")
    twin = lab.proxysql_nodes.get(name="proxysql-1")
    one = api.get(f"/api/v1/proxysql-nodes/{node.pk}/")
    assert one.status_code == 200
    assert one.json()["clusters_served"] == [
        {"cluster": dc1.pk, "name": "dc1", "node": node.pk},
        {"cluster": lab.pk, "name": "galera-lab", "node": twin.pk},
    ]
    page = api.get("/api/v1/proxysql-nodes/").json()["results"]
    assert len(page) == 4
    served = {row["id"]: [c["name"] for c in row["clusters_served"]] for row in page}
    assert served[node.pk] == ["dc1", "galera-lab"] and served[twin.pk] == ["galera-lab", "dc1"]
    # A ProxySQL of one cluster serves that cluster only.
    dc1.proxysql_nodes.all().delete()
    assert api.get(f"/api/v1/proxysql-nodes/{twin.pk}/").json()["clusters_served"] == [
        {"cluster": lab.pk, "name": "galera-lab", "node": twin.pk}
    ]
