"""Digests of a ProxySQL that serves two clusters (conftest.adopted_shared: the Galera lab in hostgroups
100-102, the DR lab's dc1 in 200-202): each cluster's node row keeps the digests of its own hostgroups, so a
digest is stored once, under the cluster it ran for, and the page's cluster filter shows only that cluster's."""

import time

import pytest

from apps.digests import services
from apps.digests.models import DigestSource, DigestStat
from apps.fleet.models import ProxySQLNode
from apps.monitoring import pollers

pytestmark = pytest.mark.django_db


def test_each_cluster_stores_only_the_digests_of_its_hostgroups(adopted_shared, live_redis):
    lab, dc1, (first, second) = adopted_shared
    for double in (first, second):
        double.traffic.set_sessions(hostgroup=201, count=2, kind="read")  # dc1's own traffic
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    services.poll_round(nodes, now=time.time() - 10)
    time.sleep(1.1)
    services.poll_round(nodes, now=time.time())
    sources = {
        c: set(DigestSource.objects.filter(node__cluster=c).values_list("hostgroup", flat=True)) for c in (lab, dc1)
    }
    assert sources[lab] and sources[lab] <= {100, 101, 102}
    assert sources[dc1] == {201}
    # No digest row twice: a (digest, hostgroup, user, schema, client) of one ProxySQL under one row only.
    seen = list(
        DigestStat.objects.values_list(
            "ts",
            "digest_id",
            "source__hostgroup",
            "source__username",
            "source__schemaname",
            "source__client_address",
            "source__node__admin_port",
        )
    )
    assert len(seen) == len(set(seen)) > 0


def test_a_shared_proxysql_is_read_once_per_digest_round(adopted_shared, live_redis):
    lab, dc1, (first, second) = adopted_shared
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    assert len(nodes) == 4  # two ProxySQL, two clusters each
    first.clear_statements()
    summary = services.poll_round(nodes, now=time.time())
    assert summary["polled"] == 4 and summary["failed"] == 0
    reads = [s for s in first.statements() if "stats_mysql_query_digest" in s and "digest_text" not in s]
    assert len(reads) == 1, reads  # not once per cluster it serves
    assert services.nodes_for_shard(0, 2) and services.nodes_for_shard(1, 2)
    for shard in (0, 1):  # the digest shards deal the ProxySQLs as the monitoring rounds do
        assert {n.endpoint for n in services.nodes_for_shard(shard, 2)} == {
            n.endpoint for n in pollers.proxysql_nodes_for_shard(shard, 2)
        }
