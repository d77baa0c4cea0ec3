"""The DR channel alerts on the DR lab: a stopped channel fires and resolves, a lagging one too, and a planned
move of the channel holds them like other planned work. Channels are polled and judged as the backend task
does (workers.monitoring.poll_channels: poll, then the alert rules on the channel's replica cluster)."""

import time
from contextlib import closing

import pytest

from apps.alerts.models import AlertState
from apps.alerts.tests.conftest import firing, fresh_caches, open_alerts, set_rule  # noqa: F401 (autouse fixture)
from apps.audit.actor import Actor
from lab.dr import WriteLoad
from workers.monitoring import poll_channels


_last = {"at": 0.0}


def _tick():
    """One channel round (shard 0 of 1), once the channel is due again (its cluster's 1 s backend interval)."""
    time.sleep(max(0.0, _last["at"] + 0.8 - time.time()))
    _last["at"] = time.time()
    results = poll_channels(0, 1, now=_last["at"])
    assert results, "no channel polled"
    return next(iter(results.values()))[1]


def _until(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while True:
        _tick()
        value = predicate()
        if value or time.monotonic() > deadline:
            return value


def _replica_sql(lab, channel, dc2_servers, *statements):
    n = [s.pk for s in dc2_servers].index(channel.replica_server_id) + 1
    with closing(lab.dc2.root_connection(n)) as conn:
        for sql in statements:
            conn.cursor().execute(sql)


@pytest.fixture
def channel_alerts(dr_inventory, dr_healthy, live_redis):
    channel, dc1, dc2 = dr_inventory
    set_rule("channel_stopped", for_s=0)
    set_rule("channel_lag", for_s=0, p_seconds=1)
    return channel, dc1, dc2, dr_healthy


def test_a_stopped_channel_fires_and_resolves_when_it_runs_again(channel_alerts):
    channel, _, dc2, lab = channel_alerts
    assert _tick()["state"] == "running"
    assert not open_alerts()
    _replica_sql(lab, channel, dc2, "STOP SLAVE")
    try:
        assert _until(lambda: firing("channel_stopped"))
        [alert] = firing("channel_stopped")
        assert alert.cluster == channel.replica_cluster and alert.subject == f"ch{channel.pk}"
        assert "IO thread No, SQL thread No" in alert.summary and alert.severity == "critical"
        assert alert.server_id == channel.replica_server_id
    finally:
        _replica_sql(lab, channel, dc2, "START SLAVE")
    assert _until(lambda: not open_alerts("channel_stopped"))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED


def test_a_sweep_judges_the_channels_stored_document(channel_alerts):
    """Between polls a sweep reads each channel's last document itself (evaluate._channel_passes through
    alerts/lean.py): a stale one is said to be stale, a stopped one is judged on its threads."""
    from apps.alerts import context, evaluate

    channel, _, dc2, lab = channel_alerts
    assert _tick()["state"] == "running"
    c = context.inventory(changed_after=time.time()).clusters[channel.replica_cluster_id]
    [judged] = evaluate._channel_passes([c], time.time(), full=True)
    assert judged.targets == {f"ch{channel.pk}"} and judged.observations == []
    assert evaluate._channel_passes([c], time.time(), full=False) == []  # fresh: its own poll judges it
    [stale] = evaluate._channel_passes([c], time.time() + 600, full=False)
    assert [o.rule for o in stale.observations] == ["channel_stopped"] and "is stale" in stale.observations[0].summary
    _replica_sql(lab, channel, dc2, "STOP SLAVE")
    try:
        assert _tick()["state"] == "stopped"
        [judged] = evaluate._channel_passes([c], time.time(), full=True)
        assert "IO thread No, SQL thread No" in judged.observations[0].summary
    finally:
        _replica_sql(lab, channel, dc2, "START SLAVE")


def test_a_lagging_channel_fires_above_the_rules_threshold_and_resolves(channel_alerts):
    """MASTER_DELAY holds the replica three seconds behind dc1, which keeps writing."""
    channel, _, dc2, lab = channel_alerts
    _replica_sql(lab, channel, dc2, "STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY=3", "START SLAVE")
    try:
        with WriteLoad(lab, pause=0.2):
            assert _until(lambda: firing("channel_lag"), 15), [a.summary for a in open_alerts()]
        [alert] = firing("channel_lag")
        assert alert.value >= 2 and "above 1 s" in alert.summary and alert.subject == f"ch{channel.pk}"
        assert not open_alerts("channel_stopped")  # lagging, but both threads run
    finally:
        _replica_sql(lab, channel, dc2, "STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY=0", "START SLAVE")
    assert _until(lambda: not open_alerts("channel_lag"), 15)


def test_a_planned_move_holds_the_stopped_channel_alert(channel_alerts):
    """While a planned channel move is pending or running, a stopped channel is expected: held, not fired; the
    move restarts the channel on its new source and the alert resolves without ever having fired."""
    from apps.dr import moves
    from apps.operations import executor, services

    channel, dc1, dc2, lab = channel_alerts
    new_source = next(s for s in dc1 if s.pk != channel.source_server_id)
    op = services.save_plan(
        moves.plan_move(channel, new_source=new_source, reason="planned move"), actor=Actor.rule("test")
    )
    services.confirm(op, actor=Actor.rule("test"), enqueue=False)  # pending: planned work on dc2 from now on
    _replica_sql(lab, channel, dc2, "STOP SLAVE")
    _tick()
    [alert] = open_alerts("channel_stopped")
    assert alert.held and alert.state == AlertState.PENDING and "channel_move" in alert.hold_reason
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == "done", op.error
    assert _until(lambda: not open_alerts("channel_stopped"))
    alert.refresh_from_db()
    assert alert.state == AlertState.RESOLVED and alert.fired_at is None
