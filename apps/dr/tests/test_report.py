"""Channels in the health reports, from real polls of the DR lab's channel: both clusters' reports and the
fleet's show the channel with its lag, the time it was stopped and its moves in the window."""

import time
from contextlib import closing
from datetime import timedelta

from django.utils import timezone

from apps.audit.actor import Actor
from apps.dr import moves, polling
from apps.dr.models import ReplicationChannel
from apps.operations import executor, services
from apps.reports import periods
from apps.reports import services as reports


def _poll(channel, now):
    polling.poll(
        [
            ReplicationChannel.objects.select_related(
                "source_server__cluster", "replica_server__cluster", "replica_cluster"
            ).get(pk=channel.pk)
        ],
        now,
    )


def test_the_cluster_and_fleet_reports_show_the_channel_lag_stopped_time_and_moves(
    dr_inventory, dr_healthy, live_redis
):
    channel, dc1, dc2 = dr_inventory
    n = [s.pk for s in dc2].index(channel.replica_server_id) + 1
    now = time.time()
    _poll(channel, now - 10)
    _poll(channel, now - 9)
    with closing(dr_healthy.dc2.root_connection(n)) as conn:
        conn.cursor().execute("STOP SLAVE")
    _poll(channel, now - 8)  # stopped for two polls at a 1 s interval: 2 s
    _poll(channel, now - 7)
    with closing(dr_healthy.dc2.root_connection(n)) as conn:
        conn.cursor().execute("START SLAVE")
    dr_healthy.wait_caught_up()
    _poll(channel, now - 6)
    new_source = next(s for s in dc1 if s.pk != channel.source_server_id)
    op = services.save_plan(
        moves.plan_move(channel, new_source=new_source, reason="planned move"), actor=Actor.rule("test")
    )
    services.confirm(op, actor=Actor.rule("test"), enqueue=False)
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == "done", op.error
    _poll(channel, now - 5)

    span = periods.Span(timezone.now() - timedelta(hours=1), timezone.now() + timedelta(minutes=1))
    for cluster in (channel.source_cluster, channel.replica_cluster):
        section = reports.build_data(cluster, "daily", span)["clusters"][0]
        [row] = section["dr_channels"]
        assert row["name"] == "dc1_to_dc2" and row["polls"] == 6
        assert row["stopped_s"] == 2.0, row
        assert row["lag_avg_s"] is not None and row["lag_max_s"] is not None
        assert (row["moves"], row["moves_done"]) == (1, 1) and row["move_list"][0]["reason"] == "planned move"
    report = reports.build_report(None, "daily", span, actor=Actor.system())
    assert any(
        p["text"].startswith("DR channels: stopped dc1_to_dc2 2") and "one channel move" in p["text"]
        for p in report.data["summary"]["points"]
    ), report.data["summary"]
    assert report.data["fleet"]["dr_channels"][0]["stopped_s"] == 2.0
    assert 'data-channel="dc1_to_dc2" data-stopped-s="2.0" data-moves="1"' in report.html
