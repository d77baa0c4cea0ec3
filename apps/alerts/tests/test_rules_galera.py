"""Rules that the Galera lab makes true for real, each fired and resolved: a backend killed (unreachable, the
cluster smaller than expected, the writer hostgroup without a usable writer, the readers below the
minimum), a node desynced (Donor/Desynced for long, its receive queue above the threshold), flow control
(a node that cannot apply), read_only on the writer."""
import threading
import time

import pytest

from apps.alerts.models import Alert, AlertState

from .conftest import firing, open_alerts, set_rule, tick, until

pytestmark = pytest.mark.django_db


def test_a_killed_writer_fires_the_writer_the_size_and_unreachable_rules_and_all_resolve(adopted_lab, live_redis,
                                                                                          galera_healthy):
    cluster, doubles = adopted_lab
    for rule in ("writer_none", "backend_unreachable", "galera_cluster_size"):
        set_rule(rule, for_s=0)
    tick()
    assert not open_alerts(), [a.summary for a in open_alerts()]
    galera_healthy.kill(1)  # 127.0.0.1:3311, the writer of hostgroup 100 on both doubles

    got = until(lambda: len(firing("writer_none")) == 2 and firing("backend_unreachable"), 15)
    assert got, [a.summary for a in open_alerts()]
    writer = firing("writer_none")
    assert {a.subject_label for a in writer} == {"writer hostgroup 100 on proxysql-1", "writer hostgroup 100 on proxysql-2"}
    assert all("127.0.0.1:3311 unreachable" in a.summary and a.severity == "critical" for a in writer)
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
