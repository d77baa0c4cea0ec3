"""The channel's history charts (apps/monitoring/charts.py draws them the same way as the backends')."""

from apps.monitoring import charts

from .models import ChannelSample

CHANNEL_AGGS = {"lag_seconds": "max", "io_running": "min", "sql_running": "min", "behind": "max"}


def _load(window, channel, fields):
    return window.load(ChannelSample, {"channel_id": channel.pk}, fields, CHANNEL_AGGS, with_reachable=True)


def chart_lag(window, channel):
    base = _load(window, channel, ["lag_seconds"])
    limit = {ts: channel.max_lag_s for ts in base.reachable}
    return charts.assemble(
        window,
        base,
        [
            ("Seconds_Behind_Master (max in each bucket)", base.values[((), "lag_seconds")], "main"),
            ("channel's max lag", limit, "limit"),
        ],
        title="Lag",
        unit="s",
    )


def chart_state(window, channel):
    base = _load(window, channel, ["io_running", "sql_running"])
    return charts.assemble(
        window,
        base,
        [
            ("IO thread running", base.values[((), "io_running")], "stepped"),
            ("SQL thread running", base.values[((), "sql_running")], "stepped"),
        ],
        title="Replication threads (1 = running)",
        extra={"y": {"min": 0, "max": 1}},
    )


CHARTS = {"lag": chart_lag, "state": chart_state}


def chart(name, channel, range_key, now=None):
    if name not in CHARTS:
        raise charts.UnknownChart(name)
    window = charts.Window(range_key, channel.replica_cluster.backend_poll_interval_s, now)
    return CHARTS[name](window, channel)
