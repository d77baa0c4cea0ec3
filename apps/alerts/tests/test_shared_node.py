"""Alerts with one ProxySQL pair fronting two clusters (conftest.adopted_shared: the Galera lab in hostgroups
100-102, the DR lab's dc1 in 200-202). What goes wrong in cluster A's hostgroups alerts on A only; a ProxySQL
that stops answering is an outage of every cluster it serves: each cluster gets its own alert (its own routing,
silences and receivers), and each alert names the other clusters that lose the same ProxySQL."""

import pytest

from apps.alerts.models import Alert
from lab import demo

from .conftest import firing, open_alerts, set_rule, until

pytestmark = pytest.mark.django_db


def admin_sql(double, *statements):
    return demo.admin_sql(double.port, *statements, user=double.user, password=double.password)


def clusters_of(alerts):
    return sorted(a.cluster.name for a in alerts)


def test_drift_and_a_shunned_backend_of_one_cluster_alert_on_that_cluster_only(adopted_shared, live_redis):
    lab, dc1, (first, second) = adopted_shared
    set_rule("drift", for_s=0)
    set_rule("backend_shunned", for_s=0)
    until(lambda: False, 0)  # one quiet round: every node polled, nothing to say
    assert open_alerts() == []
    admin_sql(
        first,
        "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313",
        "UPDATE mysql_servers SET status='SHUNNED' WHERE hostgroup_id=101 AND port=3312",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    assert until(lambda: firing("drift") and firing("backend_shunned"), 8, kinds=["proxysql"])
    assert clusters_of(firing("drift")) == ["galera-lab"] and clusters_of(firing("backend_shunned")) == ["galera-lab"]
    [shunned] = firing("backend_shunned")
    assert shunned.server.cluster == lab and shunned.server.port == 3312
    assert not Alert.objects.filter(cluster=dc1).exists()
    # And the other way round: dc1's drift is dc1's.
    admin_sql(
        first,
        "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313",
        "UPDATE mysql_servers SET weight=3 WHERE hostgroup_id=201 AND port=3332",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    assert until(lambda: len(firing("drift")) == 2, 8, kinds=["proxysql"])
    [dc1_drift] = [a for a in firing("drift") if a.cluster == dc1]
    assert "hg 201 127.0.0.1:3332 weight is 3" in dc1_drift.summary and "hg 101" not in dc1_drift.summary
    [lab_drift] = [a for a in firing("drift") if a.cluster == lab]
    assert "hg 20" not in lab_drift.summary


def test_a_shared_proxysql_that_stops_answering_alerts_every_cluster_it_serves(adopted_shared, live_redis):
    lab, dc1, (first, second) = adopted_shared
    set_rule("proxysql_unreachable", for_s=0)
    until(lambda: False, 0)
    first.set_mode("hang")
    try:
        assert until(lambda: len(firing("proxysql_unreachable")) == 2, 10)
    finally:
        first.set_mode("normal")
    alerts = firing("proxysql_unreachable")
    assert clusters_of(alerts) == ["dc1", "galera-lab"]
    assert {a.node.admin_port for a in alerts} == {first.port}
    by_cluster = {a.cluster.name: a for a in alerts}
    assert "node-wide: this ProxySQL also serves cluster dc1" in by_cluster["galera-lab"].summary
    assert "node-wide: this ProxySQL also serves cluster galera-lab" in by_cluster["dc1"].summary
    assert by_cluster["dc1"].details["also_serves"] == ["galera-lab"]
    assert until(lambda: not open_alerts("proxysql_unreachable"), 10)


def test_connection_errors_to_one_cluster_backend_alert_on_that_cluster_only(adopted_shared, live_redis):
    lab, dc1, (first, second) = adopted_shared
    set_rule("conn_errors", for_s=0, p_per_second=5)
    errors = 0
    first.traffic.set_server(101, "127.0.0.1", 3313, conn_err=errors)
    until(lambda: False, 0, kinds=["proxysql"])

    def more_errors():
        nonlocal errors
        errors += 200  # ConnERR of the lab's reader grows by 200 between two polls
        first.traffic.set_server(101, "127.0.0.1", 3313, conn_err=errors)
        return firing("conn_errors")

    assert until(more_errors, 10, kinds=["proxysql"])
    more_errors()
    until(lambda: False, 0, kinds=["proxysql"])  # one more judged round: dc1's row had its chance to fire
    assert clusters_of(firing("conn_errors")) == ["galera-lab"]
    assert "most to 127.0.0.1:3313 in hostgroup 101" in firing("conn_errors")[0].summary
