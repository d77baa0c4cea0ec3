"""Issue 14's done-when, in a real browser: an operator sees the dc1 -> dc2 channel with its lag, the source node is
killed in the lab and the page shows the channel moved and applying, then the replica node is killed and it moves
again; every move is in the audit log, and both sides hold the same data once the write load stops. The channel is
polled as the backend task does (polling.run_shard, 1 s interval) on a thread of this process; the automatic
moves run there as the rule runs them (planned, confirmed by the rule, executed at once)."""

import threading
import time

import pytest
from django.db import connections

from apps.audit.models import AuditEvent
from apps.dr import polling
from apps.dr.models import ReplicationChannel
from apps.operations.models import Operation
from lab.dr import WriteLoad, compare

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class Poller:
    """The backend task's channel part, every 0.3 s (a channel is polled when its 1 s interval is due)."""

    def __init__(self):
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="channel-poller", daemon=True)

    def run(self):
        try:
            while not self.stop.is_set():
                polling.run_shard(0, 1)
                self.stop.wait(0.3)
        finally:
            connections.close_all()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


def _index(servers, pk):
    return [s.pk for s in servers].index(pk) + 1


def test_the_operator_watches_the_channel_move_when_its_source_then_its_replica_dies(
    page, live_server, browser_login, operator_user, dr_inventory, dr_healthy, live_redis
):
    channel, dc1, dc2 = dr_inventory
    ReplicationChannel.objects.filter(pk=channel.pk).update(auto_failover_enabled=True, failover_after_polls=1)
    old_source, old_replica = channel.source_server, channel.replica_server
    writer = 1 + _index(dc1, old_source.pk) % 3  # the application writes on another dc1 node
    browser_login(operator_user)
    polling.run_shard(0, 1)  # polled once before the first page shows it
    with Poller(), WriteLoad(dr_healthy, node=writer) as load:
        # The cluster page lists the channel with its lag; its own page shows it running.
        page.goto(f"{live_server.url}{channel.replica_cluster.get_absolute_url()}")
        page.wait_for_selector('[data-channel="dc1_to_dc2"] [data-state="running"]', timeout=15_000)
        assert page.locator('[data-channel="dc1_to_dc2"] [data-lag]').count() == 1
        page.goto(f"{live_server.url}/dr/channels/{channel.pk}/")
        page.wait_for_selector('#channel-live [data-state="running"]', timeout=15_000)
        assert page.locator("#channel-live [data-lag]").inner_text().split()[0].isdigit()
        assert page.locator("#channel-live [data-source]").get_attribute("data-source") == str(old_source)

        dr_healthy.dc1.kill(_index(dc1, old_source.pk))
        page.wait_for_selector(f'#channel-live [data-source]:not([data-source="{old_source}"])', timeout=40_000)
        page.wait_for_selector('#channel-live [data-last-move="done"]', timeout=40_000)
        page.wait_for_selector('#channel-live [data-state="running"]', timeout=40_000)  # applying from the new source
        new_source = page.locator("#channel-live [data-source]").get_attribute("data-source")

        dr_healthy.dc2.kill(_index(dc2, old_replica.pk))
        page.wait_for_selector(f'#channel-live [data-replica]:not([data-replica="{old_replica}"])', timeout=40_000)
        page.wait_for_selector('#channel-live [data-state="running"]', timeout=40_000)
        page.wait_for_selector('#channel-live [data-last-move="done"]', timeout=40_000)
        new_replica = page.locator("#channel-live [data-replica]").get_attribute("data-replica")
        after_moves = load.committed
        deadline = time.monotonic() + 20
        while load.committed < after_moves + 5 and time.monotonic() < deadline:  # writes after both moves
            time.sleep(0.1)
    assert after_moves > 0 and load.committed >= after_moves + 5, (after_moves, load.committed, load.errors[-3:])
    channel.refresh_from_db()
    assert (str(channel.source_server), str(channel.replica_server)) == (new_source, new_replica)
    assert new_source != str(old_source) and new_replica != str(old_replica)
    result = compare(dr_healthy)
    assert result.identical, result.line()  # the data identical on both sides after the load stopped

    moves = list(Operation.objects.filter(kind="channel_move").order_by("pk"))
    assert (
        [m.state for m in moves] == ["done", "done"]
        and "source failover" in moves[0].title
        and "replica failover" in moves[1].title
    )
    assert AuditEvent.objects.filter(action="channel_move done").count() == 2
    page.goto(f"{live_server.url}/audit/?action=channel_move+done")
    audit = page.locator("table.audit").inner_text()
    for move in moves:
        assert move.title[:60] in audit
