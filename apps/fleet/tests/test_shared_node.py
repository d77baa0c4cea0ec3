"""One ProxySQL pair fronting two Galera clusters (the Galera lab in hostgroups 100-102, the DR lab's dc1 in
200-202): adopted as two clusters, each seeing only its own rows."""

import pytest

from apps.clients.proxysql import ProxySQLAdmin
from apps.configuration import adoption as adopt
from apps.configuration.drift import cluster_drift
from apps.fleet.models import HostgroupMembership, ProxySQLNode

from .conftest import admin_sql

pytestmark = pytest.mark.django_db


def snapshot_of(double):
    with ProxySQLAdmin("127.0.0.1", double.port, double.user, double.password) as admin:
        return adopt.read_snapshot(admin)


def test_adoption_proposes_one_group_of_hostgroups_per_cluster(shared_pair):
    snapshot = snapshot_of(shared_pair[0])
    assert adopt.split_hostgroups(snapshot) == [[100, 101, 102], [200, 201, 202]]
    plan = adopt.plan_adoption(
        snapshot, cluster_name="a", node_name="p1", admin_host="127.0.0.1", admin_port=shared_pair[0].port
    )
    assert plan.ok, plan.errors
    assert plan.hostgroups == [100, 101, 102] and plan.roles["writer"] == 100
    assert {(r.hostgroup_id // 100) for r in plan.rows} == {1}
    assert any("seems to front 2 clusters" in w for w in plan.warnings)
    # The operator edits the proposal: the other group.
    other = adopt.plan_adoption(
        snapshot,
        cluster_name="b",
        node_name="p1",
        admin_host="127.0.0.1",
        admin_port=shared_pair[0].port,
        hostgroups=[200, 201, 202],
    )
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
    plan = adopt.plan_adoption(
        snapshot_of(first),
        cluster_name="third",
        node_name="p",
        admin_host="127.0.0.1",
        admin_port=first.port,
        roles={"writer": 100, "reader": 101},
    )
    assert not plan.ok and "owns hostgroup(s) 100, 101" in plan.errors[0]


def test_drift_of_one_cluster_shows_nothing_of_the_other(adopted_shared):
    lab, dc1, (first, second) = adopted_shared
    assert cluster_drift(lab).in_sync and cluster_drift(dc1).in_sync
    admin_sql(
        first, "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=201 AND port=3332", "LOAD MYSQL SERVERS TO RUNTIME"
    )
    lab_drift, dc1_drift = cluster_drift(lab), cluster_drift(dc1)
    assert lab_drift.in_sync
    assert all(r["hostgroup_id"] < 200 for n in lab_drift.nodes for r in n.runtime_rows)
    assert [(d["where"], d["field"], d["runtime"]) for n in dc1_drift.nodes for d in n.differences] == [
        ("hg 201 127.0.0.1:3332", "weight", 7)
    ]
    assert [b["key"] for b in dc1_drift.between_nodes] == [(201, "127.0.0.1", 3332)]


def test_the_adopt_form_proposes_the_split_and_takes_the_hostgroups_the_operator_enters(operator_client, shared_pair):
    from django.urls import reverse

    from apps.fleet.models import Cluster

    first = shared_pair[0]
    data = {
        "admin_host": "127.0.0.1",
        "admin_port": first.port,
        "admin_user": first.user,
        "admin_password": first.password,
        "node_name": "proxysql-1",
        "preview": "1",
    }
    preview = operator_client.post(reverse("fleet:adopt"), {**data, "new_cluster_name": "lab"})
    html = preview.content.decode()
    assert preview.status_code == 200 and 'data-group="100,101,102"' in html and 'data-group="200,201,202"' in html
    assert "hostgroups 100, 101, 102 <strong>taken by this adoption</strong>" in html
    # The operator edits the proposal: dc1's hostgroups as a cluster of their own, first.
    bad = operator_client.post(reverse("fleet:adopt"), {**data, "new_cluster_name": "dc1", "hostgroups": "200, x"})
    assert bad.status_code == 400 and "&#x27;x&#x27; is not a hostgroup id" in bad.content.decode()
    preview = operator_client.post(
        reverse("fleet:adopt"), {**data, "new_cluster_name": "dc1", "hostgroups": "200 201,202"}
    )
    assert "hostgroups 200, 201, 202 <strong>taken by this adoption</strong>" in preview.content.decode()
    assert operator_client.post(reverse("fleet:adopt"), {"confirm": "1"}).status_code == 302
    dc1 = Cluster.objects.get(name="dc1")
    assert (dc1.writer_hostgroup, dc1.reader_hostgroup, dc1.backup_writer_hostgroup) == (200, 201, 202)
    # The next adoption of the same endpoint proposes what no cluster on it owns yet.
    operator_client.post(reverse("fleet:adopt"), {**data, "new_cluster_name": "lab"})
    assert operator_client.post(reverse("fleet:adopt"), {"confirm": "1"}).status_code == 302
    lab = Cluster.objects.get(name="lab")
    assert lab.writer_hostgroup == 100 and {s.port for s in lab.servers.all()} == {3311, 3312, 3313}
    # Every page that shows the node says which clusters it serves.
    node = lab.proxysql_nodes.get()
    page = operator_client.get(node.get_absolute_url()).content.decode()
    assert 'data-also-serves="dc1"' in page
    page = operator_client.get(dc1.get_absolute_url()).content.decode()
    assert 'data-also-serves="lab"' in page


def test_adoption_reads_once_then_judges_and_builds_from_the_read_alone(adopted_shared, django_assert_num_queries):
    lab, dc1, (first, second) = adopted_shared
    snapshot = snapshot_of(first)
    cases = [
        # the cluster exists and has this node: memberships, backends known, credentials asked
        {"cluster_name": "galera-lab", "node_name": "proxysql-1"},
        # a new cluster on a ProxySQL already serving two: the hostgroups they own, the overlap refused
        {"cluster_name": "third", "node_name": "p", "roles": {"writer": 100, "reader": 101}},
        # a new cluster, no hostgroups entered: the group proposed from what the others own
        {"cluster_name": "fourth", "node_name": "p"},
    ]
    plans = []
    for options in cases:
        options = {**options, "admin_host": "127.0.0.1", "admin_port": first.port}
        planned = adopt.plan_adoption(snapshot, **options)
        read = adopt.read_adoption(snapshot, options["cluster_name"], "127.0.0.1", first.port)
        with django_assert_num_queries(0):
            judged = adopt.judge_adoption(snapshot, read, **options)
        assert judged == planned
        plans.append(planned)
    existing, overlapping, new = plans
    assert existing.node_exists and existing.rows and {r.action for r in existing.rows} == {"unchanged"}
    assert "owns hostgroup(s) 100, 101" in overlapping.errors[0]
    assert sorted(new.shared_with) == ["dc1", "galera-lab"] and new.rows
