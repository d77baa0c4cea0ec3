"""Issue 34: a change set can no longer aim the pollers at a host of someone's choosing. A mysql_servers row on a host
outside the cluster's credential hosts is refused at every door (the editor, the API's edits, a YAML file) with the
host and the setting named; an empty setting allows the cluster's current hosts and loopback. And adoption reads a
node's backends with its monitor credentials only where allowed: the fake MySQL server outside the list gets nothing."""

import pytest

from apps.audit.actor import Actor
from apps.clients.tests.fake_mysql import FakeMySQL
from apps.configuration import adoption as adopt
from apps.configuration import content as C
from apps.configuration import services
from apps.digests.tests.factories import fleet
from apps.fleet.models import Cluster, Server
from lab import demo

pytestmark = pytest.mark.django_db


def server_edit(hostname, port=3306):
    return {"op": "upsert", "table": "mysql_servers", "row": {"hostgroup_id": 100, "hostname": hostname, "port": port}}


def shop(credential_hosts=""):
    cluster, _ = fleet(1, "shop")
    cluster.credential_hosts = credential_hosts
    cluster.save()
    content = C.empty()
    content["roles"] = {"writer": 100, "reader": 101}
    content["mysql_servers"] = [C.typed_row(C.MYSQL_SERVERS, server_edit("db1.example.net")["row"], strict=False)]
    services.record_version(cluster, content, actor=Actor.system(), reason="start", source="change")
    return cluster


def test_a_server_outside_the_list_is_refused_at_every_door(operator_user):
    cluster = shop("db-*.example.net 10.0.0.0/8")
    actor = Actor.command(operator_user)
    cs = services.start_change_set(cluster, actor=actor, reason="new backends")
    services.add_edit(cs, server_edit("db-2.example.net"), actor=actor)
    services.add_edit(cs, server_edit("10.1.2.3"), actor=actor)
    with pytest.raises(
        services.Refused,
        match=r"edit 3 \(.*evil\.example\.org.*\): evil\.example\.org:3306 is not in "
        r"shop's credential hosts \(Cluster\.credential_hosts, set by an admin\)",
    ):
        services.add_edit(cs, server_edit("evil.example.org"), actor=actor)
    cs.refresh_from_db()
    assert [e["row"]["hostname"] for e in cs.edits] == ["db-2.example.net", "10.1.2.3"]
    with pytest.raises(services.Refused, match="127.0.0.1:3306 is not in shop's credential hosts"):
        services.create_change_set(cluster, actor=actor, reason="api", edits=[server_edit("127.0.0.1")])
    text = services.preview_from_file(cluster, _file_with(cluster, "db-9.example.net")).edits
    assert text  # an allowed host in a file is a change like any other
    with pytest.raises(services.Refused, match="192.168.1.1:3306 is not in shop's credential hosts"):
        services.preview_from_file(cluster, _file_with(cluster, "192.168.1.1"))


def _file_with(cluster, hostname):
    """The current version exported as YAML, with one more mysql_servers row."""
    from types import SimpleNamespace

    from apps.configuration import files

    current = services.latest(cluster)
    content = C.apply_edits(current.content, [server_edit(hostname)])
    return files.export(SimpleNamespace(content=content, cluster=cluster, number=current.number))


def test_an_empty_list_allows_the_clusters_hosts_and_loopback_only(operator_user):
    cluster = shop()
    assert Server.objects.filter(cluster=cluster, hostname="db1.example.net").exists()  # the version's row
    actor = Actor.command(operator_user)
    cs = services.start_change_set(cluster, actor=actor, reason="weights")
    services.add_edit(cs, server_edit("DB1.example.net.", 3307), actor=actor)  # a host it has, another port
    services.add_edit(cs, server_edit("127.0.0.1", 3310), actor=actor)
    with pytest.raises(
        services.Refused,
        match="db2.example.net:3306 is not a host of shop's .*its credential hosts "
        ".* is empty: only its current backends, nodes and loopback",
    ):
        services.add_edit(cs, server_edit("db2.example.net"), actor=actor)


def test_adoption_preview_sends_no_monitor_credentials_outside_the_list(proxysql_double):
    Cluster.objects.create(name="lab", writer_hostgroup=100, reader_hostgroup=101, credential_hosts="127.0.0.1")
    with FakeMySQL(b"mysql_native_password", host="127.0.0.2") as fake:
        demo.admin_sql(
            proxysql_double.port,
            f"INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'127.0.0.2',{fake.port})",
            "LOAD MYSQL SERVERS TO RUNTIME",
            user=proxysql_double.user,
            password=proxysql_double.password,
        )
        plan, _ = adopt.preview(
            admin_host="127.0.0.1",
            admin_port=proxysql_double.port,
            admin_user="admin",
            admin_password="admin",
            cluster_name="lab",
            node_name="p1",
        )
        assert fake.received() == b""
        (facts,) = plan.backends
        assert f"127.0.0.2:{fake.port} is not in lab's credential hosts" in facts["error"]
        assert any(f"127.0.0.2:{fake.port} is not in lab's credential hosts" in e for e in plan.errors)  # not adopted
        # A new cluster: loopback is allowed, so 127.0.0.2 is read: the fake server proves it would have received
        adopt.preview(
            admin_host="127.0.0.1",
            admin_port=proxysql_double.port,
            admin_user="admin",
            admin_password="admin",
            cluster_name="fresh",
            node_name="p1",
        )
        assert b"monitor" in fake.received()


def test_adoption_of_a_new_cluster_reads_unconfirmed_hosts_never(proxysql_double):
    demo.admin_sql(
        proxysql_double.port,
        "INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'10.255.255.1',3306)",
        "INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'10.255.255.2',3306)",
        "LOAD MYSQL SERVERS TO RUNTIME",
        user=proxysql_double.user,
        password=proxysql_double.password,
    )
    plan, _ = adopt.preview(
        admin_host="127.0.0.1",
        admin_port=proxysql_double.port,
        admin_user="admin",
        admin_password="admin",
        cluster_name="fresh",
        node_name="p1",
        backend_hosts=[("10.255.255.2", 3306)],
    )
    said = {f["hostname"]: f["error"] or "" for f in plan.backends}
    assert set(said) == {"10.255.255.1", "10.255.255.2"}, plan.backends
    assert "10.255.255.1:3306 is not a host of a new cluster's" in said["10.255.255.1"]
    assert "not a host" not in said["10.255.255.2"]  # confirmed: tried (and not reachable from here)
    members = type(
        "Plan", (), {"members": [{"hostname": "10.255.255.3", "port": 6032, "name": "p3", "adopted_as": ""}]}
    )()
    snapshots, error = adopt.read_members(members, "admin", "typed-Adm1n", adopt.may_receive(None))
    assert snapshots is None and "p3, a node of this ProxySQL Cluster, was not confirmed" in error
