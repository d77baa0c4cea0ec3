"""One ProxySQL pair fronting two Galera clusters (the Galera lab in hostgroups 100-102, the DR lab's dc1 in
200-202): adopted as two clusters, each seeing only its own rows."""
import pytest

from apps.clients.proxysql import ProxySQLAdmin
from apps.fleet import adopt
from apps.fleet.drift import cluster_drift
from apps.fleet.models import HostgroupMembership, ProxySQLNode
from conftest import adopt_double

from .conftest import admin_sql

pytestmark = pytest.mark.django_db


def snapshot_of(double):
    with ProxySQLAdmin("127.0.0.1", double.port, double.user, double.password) as admin:
        return adopt.read_snapshot(admin)


def test_adoption_proposes_one_group_of_hostgroups_per_cluster(shared_pair):
    snapshot = snapshot_of(shared_pair[0])
    assert adopt.split_hostgroups(snapshot) == [[100, 101, 102], [200, 201, 202]]
    plan = adopt.plan_adoption(snapshot, cluster_name="a", node_name="p1", admin_host="127.0.0.1",
                               admin_port=shared_pair[0].port)
    assert plan.ok, plan.errors
    assert plan.hostgroups == [100, 101, 102] and plan.roles["writer"] == 100
    assert {(r.hostgroup_id // 100) for r in plan.rows} == {1}
    assert any("seems to front 2 clusters" in w for w in plan.warnings)
    # The operator edits the proposal: the other group.
    other = adopt.plan_adoption(snapshot, cluster_name="b", node_name="p1", admin_host="127.0.0.1",
                                admin_port=shared_pair[0].port, hostgroups=[200, 201, 202])
    assert other.ok and other.roles == {"writer": 200, "reader": 201, "backup_writer": 202, "offline": None}
    assert {r.port for r in other.rows} == {3331, 3332, 3333}


def test_a_pair_fronting_two_clusters_is_adopted_as_two(adopted_shared):
    lab, dc1, (first, second) = adopted_shared
    assert (lab.writer_hostgroup, dc1.writer_hostgroup) == (100, 200)
    assert {m.server.port for m in HostgroupMembership.objects.filter(server__cluster=dc1)} == {3331, 3332, 3333}
    assert {m.hostgroup_id for m in HostgroupMembership.objects.filter(server__cluster=lab)} == {100, 101, 102}
    node = lab.proxysql_nodes.get(name="proxysql-1")
    assert [n.cluster.name for n in node.shares_with()] == ["dc1"]
    assert [c.name for c in node.clusters_served()] == ["galera-lab", "dc1"]
    assert ProxySQLNode.objects.filter(admin_port=first.port).count() == 2


def test_an_endpoint_cannot_be_adopted_twice_into_the_same_hostgroups(adopted_shared):
    lab, dc1, (first, second) = adopted_shared
    plan = adopt.plan_adoption(snapshot_of(first), cluster_name="third", node_name="p", admin_host="127.0.0.1",
                               admin_port=first.port, roles={"writer": 100, "reader": 101})
    assert not plan.ok and "owns hostgroup(s) 100, 101" in plan.errors[0]


def test_drift_of_one_cluster_shows_nothing_of_the_other(adopted_shared):
    lab, dc1, (first, second) = adopted_shared
    assert cluster_drift(lab).in_sync and cluster_drift(dc1).in_sync
    admin_sql(first, "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=201 AND port=3332",
              "LOAD MYSQL SERVERS TO RUNTIME")
    lab_drift, dc1_drift = cluster_drift(lab), cluster_drift(dc1)
    assert lab_drift.in_sync
    assert all(r["hostgroup_id"] < 200 for n in lab_drift.nodes for r in n.runtime_rows)
    assert [(d.hostgroup_id, d.port, d.field, d.runtime) for n in dc1_drift.nodes for d in n.differences] == [
        (201, 3332, "weight", 7)]
    assert [b["key"] for b in dc1_drift.between_nodes] == [(201, "127.0.0.1", 3332)]
