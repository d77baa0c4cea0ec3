"""Issue 35 item 3: intent in one record. A change to a cluster without a configuration version (none is made
without one now; a row written around the product) is refused: the inventory never takes a change alone."""

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import services as config
from apps.configuration.models import ConfigVersion
from apps.fleet.models import Cluster, HostgroupMembership, Server

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
