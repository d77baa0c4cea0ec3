"""Reports with one ProxySQL pair fronting two clusters (conftest.adopted_shared: the Galera lab in hostgroups
100-102, the DR lab's dc1 in 200-202), polled and judged by the product's own rounds: what happened in the
lab's hostgroups is in the lab's report only, and what is the whole ProxySQL's says so in both."""

import pytest

from apps.alerts.tests.conftest import firing, fresh_caches, set_rule, until  # noqa: F401  (fresh_caches: a fixture)
from apps.audit.actor import Actor
from apps.reports import periods, services
from lab import demo

pytestmark = pytest.mark.django_db


def test_one_cluster_report_shows_nothing_of_the_other_cluster_on_the_same_proxysql(
    adopted_shared, live_redis, fresh_caches
):
    lab, dc1, (first, second) = adopted_shared
    set_rule("conn_errors", for_s=0, p_per_second=5)
    set_rule("drift", for_s=0)
    errors = 0

    def more_errors():
        nonlocal errors
        errors += 200  # ConnERR of the lab's reader 3313 grows by 200 between two polls
        first.traffic.set_server(101, "127.0.0.1", 3313, conn_err=errors)
        return firing("conn_errors") and firing("drift")

    more_errors()
    until(lambda: False, 0)
    demo.admin_sql(
        first.port,
        "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
        user=first.user,
        password=first.password,
    )
    assert until(more_errors, 10, kinds=["proxysql"])

    span = periods.rolling("daily")
    lab_data, dc1_data = services.build_data(lab, "daily", span), services.build_data(dc1, "daily", span)
    [lab_s], [dc1_s] = lab_data["clusters"], dc1_data["clusters"]
    assert lab_s["conn_err"]["total"] > 0 and [r["name"] for r in lab_s["conn_err"]["per_backend"]] == [
        "127.0.0.1:3313"
    ]
    assert dc1_s["conn_err"]["total"] == 0 and dc1_s["conn_err"]["per_backend"] == []
    assert {a["rule"] for a in lab_s["alerts"]["noisiest"]} >= {"conn_errors", "drift"}
    assert dc1_s["alerts"]["fired"] == 0
    assert {b["name"].rsplit(":", 1)[1] for b in dc1_s["backends"]} == {"3331", "3332", "3333"}
    assert {b["name"].rsplit(":", 1)[1] for b in lab_s["backends"]} == {"3311", "3312", "3313"}
    # What is the whole ProxySQL's is said to be node-wide, on both.
    assert [p["also_serves"] for p in dc1_s["proxysql"]] == [["galera-lab"], ["galera-lab"]]
    assert dc1_s["traffic"]["shared_with"] == ["galera-lab"] and lab_s["mirror"]["shared_with"] == ["dc1"]
    assert dc1_s["traffic"]["queries"] == pytest.approx(lab_s["traffic"]["queries"], rel=0.05)  # the same ProxySQL
    html = services.build_report(dc1, "daily", span, rolling=True, actor=Actor.system()).html
    assert "node-wide: these ProxySQL also serve cluster galera-lab" in html
    assert "Node-wide: the mirror queue is the whole ProxySQL" in html or not dc1_s["mirror"]["has_data"]
