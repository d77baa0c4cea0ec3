"""The ProxySQL Cluster rules on two doubles with native sync on at ProxySQL's defaults (adopted_cluster_lab): nodes that
have not converged within the bound (proxysql_cluster_diverged) and a diff_check that only grows
(proxysql_cluster_diff_growing), fired by two LOADs within the same second and resolved by a LOAD that clears it."""

import time

import pytest

from apps.alerts import holds
from apps.alerts.conditions import Observation
from apps.alerts.context import Work
from apps.operations.choices import OperationKind
from lab import demo
from lab.capture_cluster_2146 import galera_row

from .conftest import firing, open_alerts, set_rule, tick, until

pytestmark = pytest.mark.django_db


def admin_sql(double, *statements):
    return demo.admin_sql(double.port, *statements, user=double.user, password=double.password)


def test_same_second_loads_fire_both_rules_until_a_load_clears_them(adopted_cluster_lab, live_redis):
    cluster, (first, second) = adopted_cluster_lab
    set_rule("proxysql_cluster_diverged", for_s=4)
    set_rule("proxysql_cluster_diff_growing", for_s=0)
    tick(["proxysql"])
    assert not open_alerts("proxysql_cluster_diverged") and not open_alerts("proxysql_cluster_diff_growing")
    time.sleep(1.0)
    while time.time() % 1 > 0.6:
        time.sleep(0.05)
    admin_sql(
        first,
        "UPDATE mysql_servers SET weight=111 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    admin_sql(
        second,
        "UPDATE mysql_servers SET weight=222 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    tick(["proxysql"])
    [pending] = open_alerts("proxysql_cluster_diverged")
    assert (
        pending.state == "pending"
        and "different checksums of mysql_servers (proxysql-1; proxysql-2)" in pending.summary
    )
    assert until(lambda: firing("proxysql_cluster_diverged"), 10, step=0.5, kinds=["proxysql"])
    grows = until(
        lambda: len(firing("proxysql_cluster_diff_growing")) == 2 and firing("proxysql_cluster_diff_growing"),
        12,
        step=0.5,
        kinds=["proxysql"],
    )
    assert grows and all("neither pulls and they never converge" in a.summary for a in grows), grows
    # 2.7 (the doubles' version): the same-second words of the mysql_servers module, its LOAD on one node only
    assert all(
        "To clear it: LOAD MYSQL SERVERS TO RUNTIME on one node only, the one whose servers and hostgroup tables "
        "are intended" in a.summary
        for a in grows
    )
    admin_sql(first, "LOAD MYSQL SERVERS TO RUNTIME")  # a newer epoch: the other node pulls it
    assert until(
        lambda: not open_alerts("proxysql_cluster_diverged") and not open_alerts("proxysql_cluster_diff_growing"),
        10,
        step=0.5,
        kinds=["proxysql"],
    )
    assert (
        admin_sql(second, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313")[0][0]
        == "111"
    )


def test_without_sync_nodes_that_differ_are_no_proxysql_cluster_alert(adopted_lab, live_redis):
    """The plain pair (diffs_before_sync=0 on every module): the product writes each node; a difference between them
    is the drift rules' business."""
    cluster, (first, second) = adopted_lab
    set_rule("proxysql_cluster_diverged", for_s=0)
    admin_sql(
        first,
        "UPDATE mysql_servers SET weight=111 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    tick(["proxysql"])
    assert not open_alerts("proxysql_cluster_diverged")


@pytest.mark.parametrize("rule", ["proxysql_cluster_diverged", "proxysql_cluster_diff_growing"])
def test_planned_operations_hold_them(rule):
    observation = Observation(rule, "c1", "c1", "ProxySQL Cluster of c", "differ")
    for kind in (OperationKind.SWITCHOVER, OperationKind.CONFIG):
        work = Work(kind=kind, cluster_id=1, operation_id=7, involved=set(), until=None, reason="an operation")
        assert holds.hold_for(observation, [work], time.time()) is work


def test_hostgroup_tables_loaded_in_one_second_on_2_7_fire_on_mysql_servers_v2(adopted_cluster_lab, live_redis):
    """Different galera hostgroup rows LOADed on both 2.7 nodes within one second: mysql_servers stays equal, and
    mysql_servers_v2 (mysql_servers plus every hostgroup table, on which 2.6+ decides the pull) shares an epoch with
    different checksums: neither pulls and its diff_check climbs (lab/reference/README.md, #2146 on 2.7.1, fact 3).
    Both rules fire on it, with the same-second conflict and its clearing LOAD on one node only; that LOAD clears them."""
    cluster, (first, second) = adopted_cluster_lab
    set_rule("proxysql_cluster_diverged", for_s=4)
    set_rule("proxysql_cluster_diff_growing", for_s=0)
    tick(["proxysql"])
    time.sleep(1.0)
    while time.time() % 1 > 0.6:
        time.sleep(0.05)
    admin_sql(first, galera_row("first", writer=200), "LOAD MYSQL SERVERS TO RUNTIME")
    admin_sql(second, galera_row("second", writer=210), "LOAD MYSQL SERVERS TO RUNTIME")
    assert until(lambda: firing("proxysql_cluster_diverged"), 10, step=0.5, kinds=["proxysql"])
    [diverged] = firing("proxysql_cluster_diverged")
    assert "different checksums of mysql_servers_v2 (proxysql-1; proxysql-2)" in diverged.summary
    assert "mysql_servers (" not in diverged.summary
    grows = until(
        lambda: len(firing("proxysql_cluster_diff_growing")) == 2 and firing("proxysql_cluster_diff_growing"),
        12,
        step=0.5,
        kinds=["proxysql"],
    )
    assert grows and all(" for mysql_servers_v2 of peer " in a.summary for a in grows), grows
    assert all(
        "within the same second: the same epoch with different mysql_servers_v2 checksums, so neither pulls and "
        "they never converge" in a.summary
        for a in grows
    )
    assert all(
        "To clear it: LOAD MYSQL SERVERS TO RUNTIME on one node only, the one whose servers and hostgroup tables "
        "are intended"
        in a.summary
        and "#2146" not in a.summary
        for a in grows
    )
    admin_sql(first, "LOAD MYSQL SERVERS TO RUNTIME")  # a later second, one node: the other pulls all of it
    assert until(
        lambda: not open_alerts("proxysql_cluster_diverged") and not open_alerts("proxysql_cluster_diff_growing"),
        10,
        step=0.5,
        kinds=["proxysql"],
    )
    assert [
        tuple(r) for r in admin_sql(second, "SELECT writer_hostgroup, comment FROM runtime_mysql_galera_hostgroups")
    ] == [("200", "first")]
