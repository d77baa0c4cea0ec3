"""Rules that the Galera lab makes true for real, each fired and resolved: a backend killed (unreachable, the
cluster smaller than expected, the writer hostgroup without a usable writer, the readers below the
minimum), a node desynced (Donor/Desynced for long, its receive queue above the threshold), flow control
(a node that cannot apply), read_only on the writer."""

import re
import threading
import time

import pytest

from apps.alerts.models import Alert, AlertState

from .conftest import firing, firing_all, open_alerts, set_rule, tick, until

pytestmark = pytest.mark.django_db


def test_a_killed_writer_fires_the_writer_the_size_and_unreachable_rules_and_all_resolve(
    adopted_lab, live_redis, galera_healthy
):
    cluster, doubles = adopted_lab
    for rule in ("writer_none", "backend_unreachable", "galera_cluster_size"):
        set_rule(rule, for_s=0)
    tick()
    assert not open_alerts(), [a.summary for a in open_alerts()]
    galera_healthy.kill(1)  # 127.0.0.1:3311, the writer of hostgroup 100 on both doubles

    got = until(lambda: len(firing("writer_none")) == 2 and firing("backend_unreachable"), 15)
    assert got, [a.summary for a in open_alerts()]
    writer = firing("writer_none")
    assert {a.subject_label for a in writer} == {
        "writer hostgroup 100 on proxysql-1",
        "writer hostgroup 100 on proxysql-2",
    }
    # The alert names the dead writer as the first to see it did: its backend poll (unreachable) or the ProxySQL
    # node, whose writer sessions made it shun the backend (under load, often first). Either way it is about 3311.
    assert all(
        re.search(r"127\.0\.0\.1:3311 (SHUNNED|unreachable)", a.summary)
        and a.severity == "critical"
        and a.server.port == 3311
        for a in writer
    ), [(a.summary, a.severity, a.server) for a in writer]
    [down] = firing("backend_unreachable")
    assert down.server.port == 3311 and down.target == f"s{down.server_id}"
    # Galera evicts the dead node after its suspect timeout (~5 s): then the others say size 2 of 3.
    assert until(lambda: firing("galera_cluster_size"), 20), [a.summary for a in open_alerts()]
    assert "wsrep_cluster_size 2, expected 3" in firing("galera_cluster_size")[0].summary

    galera_healthy.start(1)
    galera_healthy.wait_synced(1)
    assert until(lambda: not open_alerts(), 20), [a.summary for a in open_alerts()]
    resolved = Alert.objects.filter(state=AlertState.RESOLVED)
    assert {a.rule for a in resolved} == {"writer_none", "backend_unreachable", "galera_cluster_size"}
    assert all(a.resolved_at > a.fired_at for a in resolved)


def test_a_hung_proxysql_node_is_unreachable_until_it_answers(adopted_lab, live_redis):
    cluster, (first, second) = adopted_lab
    set_rule("proxysql_unreachable", for_s=0)
    tick(["proxysql"])
    first.set_mode("hang")
    try:
        assert until(lambda: firing("proxysql_unreachable"), 10, kinds=["proxysql"])
        [a] = firing("proxysql_unreachable")
        assert a.node.admin_port == first.port and "does not answer (timeout)" in a.summary
    finally:
        first.set_mode("normal")
    assert until(lambda: not open_alerts("proxysql_unreachable"), 10, kinds=["proxysql"])


def test_an_isolated_node_is_non_primary_not_ready_and_the_cluster_small_and_readers_low(
    adopted_lab, live_redis, galera_healthy
):
    """gmcast.isolate cuts node 3 off the group: after the suspect timeout it is a non-Primary component of
    one, not ready, and the others count two members."""
    cluster, doubles = adopted_lab
    for rule in ("galera_non_primary", "galera_not_ready", "galera_cluster_size"):
        set_rule(rule, for_s=0)
    set_rule("readers_low", cluster, for_s=0, p_minimum=3)  # all three readers must be usable here
    tick()
    assert not open_alerts()
    root = galera_healthy.root_connection(3)
    try:
        root.cursor().execute("SET GLOBAL wsrep_provider_options='gmcast.isolate=1'")
        assert until(
            lambda: (
                {a.rule for a in firing_all()}
                >= {"galera_non_primary", "galera_not_ready", "galera_cluster_size", "readers_low"}
            ),
            20,
        ), [a.summary for a in open_alerts()]
        [np] = firing("galera_non_primary")
        assert np.server.port == 3313 and "wsrep_cluster_status non-Primary" in np.summary
        assert "wsrep_cluster_size 2, expected 3" in firing("galera_cluster_size")[0].summary
        low = firing("readers_low")
        assert len(low) == 2 and all(
            "2 usable ONLINE reader(s)" in a.summary and "fewer than the minimum of 3" in a.summary for a in low
        )
    finally:
        root.cursor().execute("SET GLOBAL wsrep_provider_options='gmcast.isolate=0'")
        root.close()
    galera_healthy.wait_synced(3)
    assert until(lambda: not open_alerts(), 15), [a.summary for a in open_alerts()]


class Writes:
    """A write load on node 1 (one row updated over and over) that survives stalls and lost connections."""

    def __init__(self, lab, row=1):
        self.lab, self.row, self.stop, self.count = lab, row, False, 0
        conn = lab.app_connection(1)
        conn.cursor().execute("CREATE TABLE IF NOT EXISTS alert_probe (id INT PRIMARY KEY, v INT)")
        conn.cursor().execute("REPLACE INTO alert_probe VALUES (1, 0), (2, 0)")
        conn.close()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        conn = None
        while not self.stop:
            try:
                conn = conn or self.lab.app_connection(1)
                conn.cursor().execute(f"UPDATE alert_probe SET v = v + 1 WHERE id = {self.row}")
                self.count += 1
            except Exception:
                conn = None
                time.sleep(0.1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop = True
        self.thread.join(timeout=10)


def _block_applier(lab, n):
    """A local transaction on node n (wsrep off for the session) holding the row the writes change: node n's
    applier waits behind it. Returns the connection; rolling it back lets the applier go."""
    conn = lab.root_connection(n)
    cur = conn.cursor()
    cur.execute("SET SESSION wsrep_on=OFF")
    cur.execute("BEGIN")
    cur.execute("SELECT * FROM app.alert_probe WHERE id = 1 FOR UPDATE")
    return conn


def test_a_desynced_node_and_its_receive_queue(adopted_lab, live_redis, galera_healthy):
    """Desynced, node 3 sends no flow control: with its applier blocked, its receive queue grows while node 1
    keeps writing."""
    set_rule("galera_desynced", for_s=0)
    set_rule("galera_recv_queue", for_s=0, p_threshold=3)
    tick(["backend"])
    galera_healthy.set_desync(3, True)
    with Writes(galera_healthy):
        assert until(lambda: firing("galera_desynced"), 10, kinds=["backend"])
        assert firing("galera_desynced")[0].server.port == 3313
        time.sleep(0.5)
        blocker = _block_applier(galera_healthy, 3)
        try:
            assert until(lambda: firing("galera_recv_queue"), 15, kinds=["backend"]), [a.summary for a in open_alerts()]
            [q] = firing("galera_recv_queue")
            assert q.server.port == 3313 and q.value > 3 and "above 3" in q.summary
        finally:
            blocker.rollback()
            blocker.close()
        assert until(lambda: not open_alerts("galera_recv_queue"), 15, kinds=["backend"])
    galera_healthy.set_desync(3, False)
    assert until(lambda: not open_alerts(), 10, kinds=["backend"]), [a.summary for a in open_alerts()]


def test_flow_control_pausing_the_cluster(adopted_lab, live_redis, galera_healthy):
    """Not desynced, node 3 with a blocked applier and a low gcs.fc_limit asks the others to wait: replication
    is paused by flow control nearly all the time."""
    set_rule("galera_flow_control", p_window_s=10, p_percent=20)
    tick(["backend"])
    root = galera_healthy.root_connection(3)
    root.cursor().execute("SET GLOBAL wsrep_provider_options='gcs.fc_limit=2'")
    try:
        with Writes(galera_healthy):
            time.sleep(0.5)
            blocker = _block_applier(galera_healthy, 3)
            try:
                assert until(lambda: firing("galera_flow_control"), 25, kinds=["backend"]), [
                    a.summary for a in open_alerts()
                ]
                node3 = [a for a in firing("galera_flow_control") if a.server.port == 3313]
                assert node3 and node3[0].value > 20 and "paused by flow control" in node3[0].summary
            finally:
                blocker.rollback()
                blocker.close()
            # The window moves on: once a window's worth of polls saw no pause, it resolves.
            assert until(lambda: not open_alerts("galera_flow_control"), 30, kinds=["backend"])
    finally:
        root.cursor().execute("SET GLOBAL wsrep_provider_options='gcs.fc_limit=16'")
        root.close()


def test_read_only_on_the_writer_leaves_no_usable_writer(adopted_lab, live_redis, galera_healthy):
    set_rule("writer_none", for_s=0)
    tick()
    root = galera_healthy.root_connection(1)
    root.cursor().execute("SET GLOBAL read_only=ON")
    try:
        assert until(lambda: len(firing("writer_none")) == 2, 10)
        assert all("127.0.0.1:3311 read_only ON" in a.summary for a in firing("writer_none"))
    finally:
        root.cursor().execute("SET GLOBAL read_only=OFF")
        root.close()
    assert until(lambda: not open_alerts(), 10)
