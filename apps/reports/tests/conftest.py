"""Report fixtures: a cluster shaped like the lab's (writer 100, readers 101, backup writers 102; three
backends, two ProxySQL nodes) in the database, and writers of history rows with known figures.

report_cluster   the cluster (poll interval 10 s, so a day of raw polls is 8,640 rows per thing)
history          history(...) helpers writing BackendSample / ProxySQLSample rows and PoolSnapshot (packed pool) rows
day              (start, end) of a fixed local day, 2026-03-10, as a periods.Span
"""

from datetime import date, timedelta

import pytest

from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.monitoring.models import MINUTE, RAW, BackendSample, PoolSnapshot, ProxySQLSample
from apps.monitoring.pool import snapshot as pool_snapshot
from apps.reports import periods
from apps.reports.history import as_dt

DAY = date(2026, 3, 11)  # the daily report "ending on" the 11th covers the 10th
INTERVAL = 10.0


@pytest.fixture
def day():
    return periods.ending_on("daily", DAY)


@pytest.fixture
def report_cluster(db):
    c = Cluster.objects.create(
        name="lab-east",
        writer_hostgroup=100,
        reader_hostgroup=101,
        backup_writer_hostgroup=102,
        poll_interval_s=INTERVAL,
    )
    nodes = [
        ProxySQLNode.objects.create(
            cluster=c, name=f"px-{i}", admin_host="127.0.0.1", admin_port=26032 + i, admin_user="admin"
        )
        for i in (1, 2)
    ]
    servers = [Server.objects.create(cluster=c, hostname="127.0.0.1", port=port) for port in (3311, 3312, 3313)]
    for hg, s, w in [
        (100, servers[0], 1000000),
        (101, servers[0], 100),
        (101, servers[1], 10000),
        (101, servers[2], 10000),
        (102, servers[1], 1000),
        (102, servers[2], 100),
    ]:
        HostgroupMembership.objects.create(server=s, hostgroup_id=hg, weight=w)
    c.nodes_, c.servers_ = nodes, servers
    return c


class History:
    """Rows every `step` seconds over [start, end); `fn(t)` gives the varying fields at each instant."""

    def __init__(self, cluster):
        self.c = cluster

    @staticmethod
    def _times(start, end, step):
        t = start
        while t < end:
            yield t
            t += step

    def backend(self, server, start, end, step=INTERVAL, resolution=RAW, fn=None):
        base = {"reachable": True, "local_state": 4, "primary": True, "ready": True, "cluster_size": 3, "recv_queue": 0}
        rows = [
            BackendSample(server=server, ts=as_dt(t), resolution=resolution, **{**base, **(fn(t) if fn else {})})
            for t in self._times(start, end, step)
        ]
        BackendSample.objects.bulk_create(rows, batch_size=2000)

    def proxysql(self, node, start, end, step=INTERVAL, resolution=RAW, fn=None):
        base = {"reachable": True, "questions_ps": 100.0, "conn_err_ps": 0.0}
        rows = [
            ProxySQLSample(node=node, ts=as_dt(t), resolution=resolution, **{**base, **(fn(t) if fn else {})})
            for t in self._times(start, end, step)
        ]
        ProxySQLSample.objects.bulk_create(rows, batch_size=2000)

    def pool(self, node, start, end, step=INTERVAL, resolution=RAW, writer=None, fn=None):
        """The seeds' layout: writer in 100, all in 101, the others in 102; fn(t, hg, server) -> overrides."""
        s1, s2, s3 = self.c.servers_
        writer = writer or s1
        rows = []
        for t in self._times(start, end, step):
            w = writer(t) if callable(writer) else writer
            layout = [(100, w), (101, s1), (101, s2), (101, s3)] + [(102, s) for s in (s1, s2, s3) if s != w]
            servers = []
            for hg, s in layout:
                extra = fn(t, hg, s) if fn else {}
                if extra is None:
                    continue
                servers.append(
                    {
                        "hostgroup": hg,
                        "srv_host": s.hostname,
                        "srv_port": s.port,
                        "status": "ONLINE",
                        "conn_used": 1,
                        "conn_free": 4,
                        "conn_err_ps": 0.0,
                        **extra,
                    }
                )
            if servers:
                rows.append(pool_snapshot(node.pk, as_dt(t), servers, resolution))
        PoolSnapshot.objects.bulk_create(rows, batch_size=2000)

    def healthy(self, start, end, step=INTERVAL, resolution=RAW):
        """Every backend Synced, every node reachable, every pool row ONLINE."""
        for s in self.c.servers_:
            self.backend(s, start, end, step, resolution)
        for n in self.c.nodes_:
            self.proxysql(n, start, end, step, resolution)
            self.pool(n, start, end, step, resolution)


@pytest.fixture
def history(report_cluster):
    return History(report_cluster)


def epoch(span):
    return span.start.timestamp(), span.end.timestamp()


MINUTE_ROWS = MINUTE
ONE_DAY = timedelta(days=1)
