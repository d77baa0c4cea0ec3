"""Rollups keep every bucket's extremes: a real SHUNNED row (conftest.shun_backend) and a one-poll ConnUsed
spike polled from the lab survive raw -> 1 minute -> 1 hour, and the connections chart shows both at each
resolution."""

import time
from datetime import datetime, timezone

import pytest

from apps.fleet.models import ProxySQLNode
from apps.monitoring import charts, chunks, pollers, rollups
from apps.monitoring.models import HOUR, MINUTE, RAW, PoolSnapshot
from conftest import shun_backend

pytestmark = pytest.mark.django_db
WRITER = (100, "127.0.0.1", 3311)
SHUNNED = (101, "127.0.0.1", 3313)


def dt(epoch):
    return datetime.fromtimestamp(epoch, tz=timezone.utc)


def label(key):
    return f"hg {key[0]} · {key[1]}:{key[2]}"


FIELDS = ["status", "conn_used", "conn_used_min", "conn_used_max"]


def pool_rows(key, resolution):
    """[(ts, {field: value})] of one server in the pool snapshots at this resolution."""
    return [
        (ts, dict(zip(FIELDS, values)))
        for _, ts, _, server, values in chunks.read_pool({"resolution": resolution}, FIELDS)
        if server == key
    ]


def pool_row(key, resolution):
    ((_, row),) = pool_rows(key, resolution)
    return row


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

    raw = {ts.timestamp(): row["conn_used"] for ts, row in pool_rows(WRITER, RAW)}
    spike = raw.pop(spike_ts)
    usual = max(raw.values())
    assert spike > usual
    statuses = [row["status"] for _, row in pool_rows(SHUNNED, RAW)]
    assert statuses.count("SHUNNED") == 1 and statuses.count("ONLINE") == 9

    assert rollups.rollup(PoolSnapshot, RAW, MINUTE, now=dt(hour + HOUR)) == 1  # one snapshot per node
    assert rollups.rollup(PoolSnapshot, MINUTE, HOUR, now=dt(hour + 2 * HOUR)) == 1
    for resolution in (MINUTE, HOUR):
        assert pool_row(SHUNNED, resolution)["status"] == "SHUNNED", f"the blip vanished at resolution {resolution}"
        writer = pool_row(WRITER, resolution)
        assert writer["conn_used_max"] == spike and writer["conn_used"] < spike
        assert writer["conn_used_min"] <= usual

    # The charts: 24 h is drawn from the minute rollups, 30 days from the hourly ones.
    for range_key, resolution, point in (("24h", MINUTE, hour + 600), ("30d", HOUR, hour)):
        data = charts.chart("proxysql", "connections", node, range_key, now=hour + 2 * HOUR)
        assert data["resolution"] == resolution
        at = data["t"].index(point * 1000)
        assert data["status"][label(SHUNNED)][at] == "SHUNNED"
        assert data["status"][label(WRITER)][at] == "ONLINE"
        most_used = next(
            s for s in data["series"] if s["label"] == "most used by one server in a bucket · hg 100 (writer)"
        )
        assert most_used["values"][at] == spike


def test_backend_samples_roll_up_with_their_cluster_size_extremes(adopted_lab, live_redis):
    """Issue 36 (found by the 30 d chart test): the minute rollup of the backends' samples raised FieldError
    (cluster_size, a whole number, coalesced with its float extremes), so no backend history beyond raw."""
    from datetime import timedelta

    from django.utils import timezone as django_timezone

    from apps.monitoring.models import BackendSample
    from apps.monitoring.tests.test_pages import poll

    poll(rounds=2)
    raw = BackendSample.objects.filter(resolution=RAW, cluster_size__isnull=False)
    assert raw.exists()
    written = rollups.rollup(BackendSample, RAW, MINUTE, now=django_timezone.now() + timedelta(minutes=1))
    rolled = BackendSample.objects.filter(resolution=MINUTE, cluster_size_min__isnull=False)
    assert written >= raw.values("server").distinct().count() and rolled.exists()
    assert {(r.cluster_size_min, r.cluster_size_max) for r in rolled} == {(3.0, 3.0)}
