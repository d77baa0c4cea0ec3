"""Issue 35 item 3: intent in one record. A change to a cluster without a configuration version (none is made
without one now; a row written around the product) is refused: the inventory never takes a change alone."""

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import services as config
from apps.configuration.models import ChangeSet, ConfigVersion
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server

pytestmark = pytest.mark.django_db


def test_an_admin_edit_of_a_cluster_without_a_version_is_refused_and_writes_nothing():
    cluster = Cluster.objects.create(name="around", writer_hostgroup=10, reader_hostgroup=11)
    server = Server.objects.create(cluster=cluster, hostname="10.0.0.1", port=3306)
    HostgroupMembership.objects.create(server=server, hostgroup_id=10, weight=1)
    with pytest.raises(config.NoVersion, match="around has no configuration version yet: adopt a node first"):
        config.record_admin_edit(
            cluster, lambda content: config.with_roles(content, {"writer": 20}), actor=Actor.system()
        )
    cluster.refresh_from_db()
    assert cluster.writer_hostgroup == 10 and not ConfigVersion.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="inventory changed").exists()


def test_taking_a_nodes_runtime_into_a_cluster_without_a_version_is_refused(proxysql_double):
    """Found by mypy (issue 35 item 6): take_runtime read the node, then the content of a latest version the cluster
    did not have: an AttributeError (a 500 on the page) where every other change to it is refused."""
    cluster = Cluster.objects.create(name="around", writer_hostgroup=10, reader_hostgroup=11)
    node = ProxySQLNode.objects.create(
        cluster=cluster,
        name="proxysql-1",
        admin_host=proxysql_double.host,
        admin_port=proxysql_double.port,
        admin_user=proxysql_double.user,
        admin_password=proxysql_double.password,
    )
    with pytest.raises(config.Refused, match="around has no configuration version yet: adopt a node first"):
        config.take_runtime(cluster, node, actor=Actor.system(), reason="")
    assert not ChangeSet.objects.exists()
