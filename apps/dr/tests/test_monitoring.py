"""Channels polled on the DR lab's real servers: state, lag, GTID positions, history, the pages."""

import time

import pytest

from apps.dr import polling
from apps.dr.models import ChannelSample, ReplicationChannel
from apps.fleet.secrets import PREFIX
from lab.dr import WriteLoad, gtid_map


def _poll(channel, now=None):
    channel = ReplicationChannel.objects.select_related(
        "source_server__cluster", "replica_server__cluster", "replica_cluster"
    ).get(pk=channel.pk)
    return polling.poll([channel], now)[channel.pk][1]


def test_the_replication_password_is_stored_encrypted(dr_inventory):
    from django.db import connection

    channel, _, _ = dr_inventory
    with connection.cursor() as cur:
        cur.execute("SELECT replication_password FROM dr_replicationchannel WHERE id = %s", [channel.pk])
        stored = cur.fetchone()[0]
    assert stored.startswith(PREFIX) and "repl" not in stored[len(PREFIX) :]
    assert ReplicationChannel.objects.get(pk=channel.pk).replication_password == "repl"


def test_a_poll_reads_threads_lag_and_gtid_positions_of_both_ends(dr_inventory, live_redis):
    channel, _, _ = dr_inventory
    doc = _poll(channel)
    assert doc["state"] == "running", doc
    assert doc["replica"]["io_running"] == "Yes" and doc["replica"]["sql_running"] == "Yes"
    assert doc["domain"] == 1
    assert doc["source"]["seq"] == gtid_map(doc["source"]["binlog_pos"])[1]
    assert doc["applied_seq"] == gtid_map(doc["replica"]["gtid_slave_pos"])[1]
    assert doc["lag_seconds"] is not None and doc["failing_polls"] == {"source": 0, "replica": 0}
    sample = ChannelSample.objects.get(channel=channel)
    assert (sample.io_running, sample.sql_running, sample.source_seq) == (True, True, doc["source"]["seq"])


def test_a_stopped_sql_thread_shows_and_its_history_is_kept(dr_inventory, dr_healthy, live_redis):
    channel, _, dc2_servers = dr_inventory
    n = dc2_servers.index(channel.replica_server) + 1
    from contextlib import closing

    with closing(dr_healthy.dc2.root_connection(n)) as conn:
        conn.cursor().execute("STOP SLAVE SQL_THREAD")
    with WriteLoad(dr_healthy) as load:
        time.sleep(0.5)
    assert load.committed > 0
    doc = _poll(channel, now=time.time())
    assert doc["state"] == "stopped" and doc["replica"]["sql_running"] == "No"
    assert doc["behind_trx"] >= load.committed, doc
    with closing(dr_healthy.dc2.root_connection(n)) as conn:
        conn.cursor().execute("START SLAVE SQL_THREAD")
    dr_healthy.wait_caught_up()
    doc = _poll(channel, now=time.time() + 1)
    assert doc["state"] == "running" and doc["behind_trx"] == 0
    assert list(ChannelSample.objects.filter(channel=channel).order_by("ts").values_list("sql_running", flat=True)) == [
        False,
        True,
    ]


def test_a_dead_replica_node_counts_failing_polls(dr_inventory, dr_healthy, live_redis):
    channel, _, dc2_servers = dr_inventory
    n = dc2_servers.index(channel.replica_server) + 1
    dr_healthy.dc2.kill(n)
    first = _poll(channel, now=time.time())
    second = _poll(channel, now=time.time() + 1)
    assert first["state"] == second["state"] == "unreachable"
    assert (first["failing_polls"]["replica"], second["failing_polls"]["replica"]) == (1, 2)
    assert second["source"]["ok"] and second["failing_polls"]["source"] == 0


@pytest.mark.parametrize("side", ["source", "replica"])
def test_the_channel_shows_on_both_clusters_pages(dr_inventory, live_redis, viewer_client, side):
    channel, _, _ = dr_inventory
    _poll(channel)
    cluster = channel.source_cluster if side == "source" else channel.replica_cluster
    page = viewer_client.get(cluster.get_absolute_url()).content.decode()
    assert 'data-channel="dc1_to_dc2"' in page and 'data-state="running"' in page and "data-lag" in page
    detail = viewer_client.get(f"/dr/channels/{channel.pk}/").content.decode()
    assert 'data-state="running"' in detail and "gtid_slave_pos" in detail


def test_redis_down_the_last_stored_poll_stands_in(dr_inventory, live_redis, viewer_client, settings):
    """The pages and the API show the last ChannelSample when Redis does not answer: its state and lag, and what a
    sample does not keep (lag_high, failing_polls) as unknown."""
    from apps.dr import selectors

    channel, _, _ = dr_inventory
    _poll(channel)
    assert selectors.rows([channel])[0]["from_history"] is False
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    [row] = selectors.rows([channel])
    assert row["from_history"] and row["unavailable"] and row["doc"].state == "running" and not row["problem"]
    latest = selectors.latest(row)
    assert latest["state"] == "running" and latest["lag_seconds"] is not None and latest["from_history"]
    assert type(latest["lag_seconds"]) is int  # whole seconds, as the live document's (the column is a float)
    assert latest["lag_high"] is None and latest["failing_polls"] is None and latest["io_running"] is None
    detail = viewer_client.get(f"/dr/channels/{channel.pk}/").content.decode()
    assert 'data-state="running"' in detail and "Live data unavailable" in detail


def test_the_lag_and_state_charts_hold_the_polls(dr_inventory, live_redis, viewer_client):
    channel, _, _ = dr_inventory
    now = time.time()
    _poll(channel, now=now - 5)  # 4 s apart: an hour at a 1 s interval is drawn in 2 s buckets
    _poll(channel, now=now - 1)
    lag = viewer_client.get(f"/dr/channels/{channel.pk}/charts/lag.json").json()
    state = viewer_client.get(f"/dr/channels/{channel.pk}/charts/state.json").json()
    assert len([v for v in lag["series"][0]["values"] if v is not None]) == 2
    assert state["series"][0]["values"][-1] == 1 and state["series"][1]["values"][-1] == 1
    assert viewer_client.get(f"/dr/channels/{channel.pk}/charts/nope.json").status_code == 404


def test_the_backend_task_polls_due_channels_only(dr_inventory, live_redis):
    channel, _, _ = dr_inventory
    now = time.time()
    assert channel.pk in polling.run_shard(channel.pk % 4, 4, now=now)
    assert polling.run_shard(channel.pk % 4, 4, now=now + 0.1) == {}  # polled 0.1 s ago: not due
    assert polling.run_shard((channel.pk + 1) % 4, 4, now=now + 5) == {}  # another shard's
    assert channel.pk in polling.run_shard(channel.pk % 4, 4, now=now + 1)


def test_history_is_rolled_up_and_pruned_with_the_monitoring_tables(dr_inventory, live_redis, settings):
    from datetime import timedelta

    from django.utils import timezone

    from apps.monitoring import rollups

    channel, _, _ = dr_inventory
    now = time.time()
    for offset in (180, 170, 60):
        _poll(channel, now=now - offset)
    ChannelSample.objects.filter(channel=channel, ts__lt=timezone.now() - timedelta(seconds=120)).update(
        io_running=False
    )  # one minute where the IO thread was down
    result = rollups.run_all()
    minutes = ChannelSample.objects.filter(channel=channel, resolution=60).order_by("ts")
    assert result["written"]["channelsample:60"] >= 2 and minutes.exists()
    assert minutes.first().io_running is False  # the worst of its minute
    settings.MONITOR_RETENTION_RAW_H = 100 / 3600  # raw rows older than 100 s go
    rollups.prune()
    assert ChannelSample.objects.filter(channel=channel, resolution=0).count() == 1
