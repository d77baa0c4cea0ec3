"""The DR lab (lab/dr.py) in the inventory: clusters dc1 and dc2, their servers, and the channel
dc1 -> dc2 as the lab runs it now (wherever a previous test left it), with every node a candidate."""
import pytest

from apps.dr.models import REPLICA, SOURCE, ChannelCandidate, ReplicationChannel
from apps.fleet.models import Cluster, Server
from lab.dr import REPL_PASSWORD, REPL_USER


def _cluster(name, site, writer):
    cluster = Cluster.objects.create(name=name, writer_hostgroup=writer, reader_hostgroup=writer + 1,
                                     monitor_user="monitor", monitor_password="monitor")
    servers = [Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=node.port) for node in site.nodes]
    return cluster, servers


@pytest.fixture
def dr_inventory(db, dr_healthy):
    """(channel, dc1 servers, dc2 servers) with the channel's ends where the lab's channel runs."""
    lab = dr_healthy
    dc1, dc1_servers = _cluster("dc1", lab.dc1, 100)
    dc2, dc2_servers = _cluster("dc2", lab.dc2, 200)
    status = lab.channel()
    source = next(s for s in dc1_servers if s.port == status.source_port)
    replica = dc2_servers[status.replica - 1]
    channel = ReplicationChannel.objects.create(
        name="dc1_to_dc2", source_cluster=dc1, replica_cluster=dc2, source_server=source, replica_server=replica,
        replication_user=REPL_USER, replication_password=REPL_PASSWORD)
    for i, server in enumerate(dc1_servers):
        ChannelCandidate.objects.create(channel=channel, side=SOURCE, server=server, weight=100 - 10 * i)
    for i, server in enumerate(dc2_servers):
        ChannelCandidate.objects.create(channel=channel, side=REPLICA, server=server, weight=100 - 10 * i)
    return channel, dc1_servers, dc2_servers
