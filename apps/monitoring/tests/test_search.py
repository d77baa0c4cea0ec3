"""The header's search (issue 23 §5): clusters (and their tags), ProxySQL nodes, backends and query digests in one
small page, grouped, bounded, case-insensitive, and never a 500 whatever is typed."""

from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accounts.tests.hostile import hostile_text
from apps.digests.tests.factories import digest
from apps.fleet.models import Cluster, ClusterTag, ProxySQLNode, Server
from apps.pages import search

pytestmark = pytest.mark.django_db


@pytest.fixture
def fleet():
    pay = Cluster.objects.create(name="Payments-EU", writer_hostgroup=100, reader_hostgroup=101)
    ClusterTag.objects.create(cluster=pay, key="env", value="prod")
    other = Cluster.objects.create(name="reporting", writer_hostgroup=100, reader_hostgroup=101)
    ProxySQLNode.objects.create(cluster=pay, name="proxy-pay-1", admin_host="10.0.0.5", admin_port=6032, admin_user="a")
    Server.objects.create(cluster=pay, hostname="db-pay-1.example.net", port=3306)
    Server.objects.create(cluster=other, hostname="db-rep-1.example.net", port=3307)
    digest("SELECT * FROM orders WHERE id = ?", "0x00000000000000AB")
    digest("UPDATE payments SET state = ? WHERE id = ?")
    return pay, other


def names(found):
    return {g["name"]: [row[0] for row in g["rows"]] for g in found["groups"]}


def test_each_kind_of_object_is_found_in_any_case(fleet, client, viewer_user):
    assert names(search.search("PAYMENTS")) == {
        "Clusters": ["Payments-EU"],
        "ProxySQL nodes": [],
        "Backends": [],
        "Query digests": [digest("UPDATE payments SET state = ? WHERE id = ?").digest],
    }
    assert names(search.search("env:prod"))["Clusters"] == ["Payments-EU"]
    assert names(search.search("pay-1")) == {
        "Clusters": [],
        "ProxySQL nodes": ["proxy-pay-1"],
        "Backends": ["db-pay-1.example.net:3306"],
        "Query digests": [],
    }
    assert names(search.search("db-rep-1.example.net:3307"))["Backends"] == ["db-rep-1.example.net:3307"]
    assert names(search.search("10.0.0.5"))["ProxySQL nodes"] == ["proxy-pay-1"]
    assert names(search.search("0x00000000000000ab"))["Query digests"] == ["0x00000000000000AB"]
    assert search.search("   ")["groups"] == []

    client.force_login(viewer_user)
    page = client.get("/search/", {"q": "Orders"}).content.decode()
    assert 'data-group="Query digests"' in page and "SELECT * FROM orders" in page and 'value="Orders"' in page


def test_each_group_is_bounded(client, viewer_user):
    cluster = Cluster.objects.create(name="big", writer_hostgroup=100, reader_hostgroup=101)
    Server.objects.bulk_create([Server(cluster=cluster, hostname=f"node{i:02}.db", port=3306) for i in range(30)])
    for i in range(30):
        digest(f"SELECT c{i} FROM big_table")
    found = {g["name"]: g for g in search.search("node")["groups"]}
    assert len(found["Backends"]["rows"]) == search.SHOWN and found["Backends"]["more"]
    found = {g["name"]: g for g in search.search("big_table")["groups"]}
    assert len(found["Query digests"]["rows"]) == search.SHOWN and found["Query digests"]["more"]
    client.force_login(viewer_user)
    assert "more than 20" in client.get("/search/", {"q": "node"}).content.decode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    q=st.one_of(
        hostile_text.filter(lambda t: len(t) < 5000),
        st.sampled_from(
            ["%", "_", "\\", "'", "%%_\\'", "\x00", "\ud800", "a:b:c", "[::1]:99999", "=", ":", "0x", "0x" + "f" * 40]
        ),
    )
)
def test_no_input_is_a_500(fleet, client, viewer_user, q):
    client.force_login(viewer_user)
    client.raise_request_exception = False
    raw = quote(q.encode("utf-8", "surrogatepass"))
    assert client.get(f"/search/?q={raw}").status_code == 200
