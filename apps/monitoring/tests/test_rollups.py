"""Rollups keep every bucket's extremes: a real SHUNNED row (conftest.shun_backend) and a one-poll ConnUsed
spike polled from the lab survive raw -> 1 minute -> 1 hour, and the connections chart shows both at each
resolution."""
import time
from datetime import datetime, timezone

import pytest

from apps.fleet.models import ProxySQLNode
from apps.monitoring import charts, pollers, rollups
from apps.monitoring.models import HOUR, MINUTE, RAW, PoolSample
from conftest import shun_backend

pytestmark = pytest.mark.django_db
WRITER = (100, "127.0.0.1", 3311)
SHUNNED = (101, "127.0.0.1", 3313)


def dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def label(key):
    return f"hg {key[0]} · {key[1]}:{key[2]}"


def pool_row(key, resolution):
    return PoolSample.objects.get(resolution=resolution, hostgroup=key[0], srv_host=key[1], srv_port=key[2])


def test_a_shunned_blip_and_a_one_poll_spike_survive_every_rollup(adopted_lab, galera_healthy, live_redis):
    cluster, (first, _) = adopted_lab
    node = ProxySQLNode.objects.select_related("cluster").get(admin_port=first.port)
    hour = (int(time.time()) // HOUR - 2) * HOUR  # a complete hour, two hours ago
    stamps = iter(range(hour + 600, hour + 660, 5))  # every poll in one minute

    def poll():
        ts = next(stamps)
        assert pollers.proxysql_round([node], now=ts)["failed"] == 0
        return ts

    for _ in range(4):
        poll()
    first.traffic.set_sessions(hostgroup=100, count=40, kind="write", pinned_reason="auto_increment")
    spike_ts = poll()
    first.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
    for _ in range(4):
        poll()
    assert shun_backend(first, galera_healthy, 3, hostgroups=(101,)) == {SHUNNED}
    poll()  # one poll of ten sees 3313 SHUNNED in hostgroup 101

    raw = PoolSample.objects.filter(resolution=RAW, hostgroup=WRITER[0], srv_port=WRITER[2])
    spike = raw.get(ts=dt(spike_ts)).conn_used
    usual = max(raw.exclude(ts=dt(spike_ts)).values_list("conn_used", flat=True))
    assert spike > usual
    statuses = list(PoolSample.objects.filter(resolution=RAW, hostgroup=101, srv_port=3313)
                    .values_list("status", flat=True))
    assert statuses.count("SHUNNED") == 1 and statuses.count("ONLINE") == 9

    assert rollups.rollup(PoolSample, RAW, MINUTE, now=dt(hour + HOUR)) > 0
    assert rollups.rollup(PoolSample, MINUTE, HOUR, now=dt(hour + 2 * HOUR)) > 0
    for resolution in (MINUTE, HOUR):
        assert pool_row(SHUNNED, resolution).status == "SHUNNED", f"the blip vanished at resolution {resolution}"
        writer = pool_row(WRITER, resolution)
        assert writer.conn_used_max == spike and writer.conn_used < spike
        assert writer.conn_used_min <= usual

    # The charts: 24 h is drawn from the minute rollups, 30 days from the hourly ones.
    for range_key, resolution, point in (("24h", MINUTE, hour + 600), ("30d", HOUR, hour)):
        data = charts.chart("proxysql", "connections", node, range_key, now=hour + 2 * HOUR)
        assert data["resolution"] == resolution
        at = data["t"].index(point * 1000)
        assert data["status"][label(SHUNNED)][at] == "SHUNNED"
        assert data["status"][label(WRITER)][at] == "ONLINE"
        most_used = next(s for s in data["series"] if s["label"] == f"most used in a bucket · {label(WRITER)}")
        assert most_used["values"][at] == spike
