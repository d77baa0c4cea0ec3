"""Monitoring fixtures, chained on the lab's:

live_redis       settings.REDIS_URL pointed at the session's real redis-server, emptied for each test
adopted_lab      the lab cluster adopted through the product's own adopt service: two ProxySQL doubles
                 (seeds' layout) in front of the three Galera nodes, monitor credentials monitor/monitor
"""
import pytest

from apps.clients.proxysql import ProxySQLAdmin
from apps.fleet import adopt
from apps.fleet.models import Cluster
from apps.monitoring import live


@pytest.fixture
def live_redis(redis_server, settings):
    settings.REDIS_URL = redis_server
    live.client().flushdb()
    yield live.client()


def adopt_double(double, cluster_name, node_name):
    admin = ProxySQLAdmin("127.0.0.1", double.port, double.user, double.password)
    with admin:
        snapshot = adopt.read_snapshot(admin)
        monitor = adopt.read_monitor_credentials(admin)
    plan = adopt.plan_adoption(snapshot, cluster_name=cluster_name, node_name=node_name, admin_host="127.0.0.1",
                               admin_port=double.port)
    assert plan.ok, plan.errors
    return adopt.apply_adoption(plan, admin_user=double.user, admin_password=double.password, monitor=monitor)


@pytest.fixture
def adopted_lab(db, lab_pair, galera_lab):
    """(cluster, [double1, double2]) with the lab adopted; both doubles carry the demo's traffic."""
    first, second = lab_pair
    adopt_double(first, "galera-lab", "proxysql-1")
    adopt_double(second, "galera-lab", "proxysql-2")
    for double in lab_pair:
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
        double.traffic.set_sessions(hostgroup=101, count=8, kind="read")
    return Cluster.objects.get(name="galera-lab"), lab_pair
