"""Issue 35 item 3: the data migration that gives every cluster a configuration version, made of what the old
fallbacks read (the inventory; the variables recorded on the nodes at adoption), each version audited."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from apps.audit.models import AuditEvent
from apps.configuration import services as config
from apps.fleet.models import Cluster

BEFORE = [("configuration", "0001_initial"), ("fleet", "0016_cluster_tls_ca_and_verify")]  # the lead may renumber
AUTOINC = "mysql-auto_increment_delay_multiplex"


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_every_cluster_without_a_version_gets_one_and_recorded_variables_move_into_the_versions():
    old = migrate(BEFORE)
    try:
        clusters, nodes = old.get_model("fleet", "Cluster"), old.get_model("fleet", "ProxySQLNode")
        servers, memberships = old.get_model("fleet", "Server"), old.get_model("fleet", "HostgroupMembership")
        versions = old.get_model("configuration", "ConfigVersion")
        bare = clusters.objects.create(name="bare", writer_hostgroup=10, reader_hostgroup=11, offline_hostgroup=19)
        server = servers.objects.create(cluster=bare, hostname="10.0.0.1", port=3306)
        memberships.objects.create(server=server, hostgroup_id=10, weight=7, comment="the writer")
        nodes.objects.create(cluster=bare, name="p1", admin_host="10.0.1.1", admin_user="a", intended_variables={})
        nodes.objects.create(
            cluster=bare, name="p2", admin_host="10.0.1.2", admin_user="a", intended_variables={AUTOINC: "5"}
        )
        lacking = clusters.objects.create(name="lacking", writer_hostgroup=20, reader_hostgroup=21)
        nodes.objects.create(
            cluster=lacking, name="p3", admin_host="10.0.1.3", admin_user="a", intended_variables={AUTOINC: "3"}
        )
        versions.objects.create(
            cluster=lacking,
            number=1,
            author="x",
            reason="old",
            source="adopt",
            content={
                "roles": {"writer": 20, "reader": 21},
                "mysql_servers": [],
                "global_variables": {"mysql-max_connections": "100"},
            },
        )
        holding = clusters.objects.create(name="holding", writer_hostgroup=30, reader_hostgroup=31)
        nodes.objects.create(
            cluster=holding, name="p4", admin_host="10.0.1.4", admin_user="a", intended_variables={AUTOINC: "3"}
        )
        versions.objects.create(
            cluster=holding,
            number=1,
            author="x",
            reason="old",
            source="adopt",
            content={"roles": {"writer": 30, "reader": 31}, "global_variables": {AUTOINC: "0"}},
        )
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    bare = Cluster.objects.get(name="bare")
    first = config.latest(bare)
    assert (first.number, first.source, first.parent) == (1, "migration", None)
    assert first.content["roles"] == {
        "writer": 10,
        "reader": 11,
        "backup_writer": None,
        "offline": 19,
        "writer_is_also_reader": 1,
    }
    assert [(r["hostgroup_id"], r["hostname"], r["weight"], r["comment"]) for r in first.content["mysql_servers"]] == [
        (10, "10.0.0.1", 7, "the writer")
    ]
    assert first.content["global_variables"] == {AUTOINC: "5"}
    assert config.inventory_content(bare, base=first.content) == config.C.sort(first.content)  # the rows unchanged

    lacking = config.latest(Cluster.objects.get(name="lacking"))
    assert (lacking.number, lacking.parent.number) == (2, 1)
    assert lacking.content["global_variables"] == {"mysql-max_connections": "100", AUTOINC: "3"}
    assert config.latest(Cluster.objects.get(name="holding")).number == 1  # the version's own value stands

    audited = AuditEvent.objects.filter(action="configuration version recorded", details__source="migration")
    assert sorted(audited.values_list("target", flat=True)) == ["bare v1", "lacking v2"]
