"""The failover of ProxySQL's own manager on a natively managed cluster (issue 33 §4), over the real labs, on a pair of
doubles (their Monitor: lab/proxysql_double/galera_monitor.py, replication_monitor.py) and on a real 2.7.1 pair.
Monitor moves the writer by itself; the product's automatic failover, though enabled, stays out (no operation, no
"failover refused"), and the product says what the manager did: the native_failover alert while it fails over,
resolved with the measure, and an audit record "writer moved by ProxySQL's Galera manager" with the time from the
writer's death to the new writer ONLINE on every node. The replication manager promotes nobody: the alert says no
writer, and that promotion is the DBA's or their tooling's."""

import time
from contextlib import closing
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.alerts.models import Alert
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster, ProxySQLNode
from apps.operations import rule_settings, rules
from apps.operations.models import Operation
from apps.operations.tests.test_switchover_native_replication import natively_managed
from apps.reports import periods, services as reports
from conftest import adopt_double
from lab import demo

from . import test_native_galera_drift as galera_native
from .conftest import tick

pytestmark = pytest.mark.django_db
MOVED = "writer moved by ProxySQL's Galera manager"


def polled_until(cluster, action, seconds=45):
    """Poll rounds (backends, then ProxySQL nodes, each followed by the alert evaluation and, after the backends', the
    product's own failover rules, as the workers run them) until an audit event `action` of the cluster appears."""
    deadline = time.monotonic() + seconds
    start = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    while True:
        tick(["backend"])
        rules.after_backend_poll([cluster.pk])
        tick(["proxysql"])
        event = AuditEvent.objects.filter(cluster_id=cluster.pk, action=action, id__gt=start).order_by("id").first()
        if event is not None:
            return event
        assert time.monotonic() < deadline, f"no {action!r} within {seconds} s"
        time.sleep(0.3)


def product_stayed_out(cluster):
    assert not Operation.objects.filter(cluster=cluster, kind="failover").exists()
    assert rule_settings.would_do_now(cluster)["failover"].startswith("nothing: ProxySQL's mysql_")
    refused = AuditEvent.objects.filter(cluster_id=cluster.pk, action__contains="failover refused")
    assert not refused.exists(), list(refused.values_list("details", flat=True))


def galera_cluster(nodes):
    for node in nodes:
        galera_native.admin(node, *demo.plain_layout_statements(), *galera_native.NATIVE)
    for n, node in enumerate(nodes, 1):
        galera_native.wait_placed(node, 3311)
        adopt_double(node, "native-lab", f"n{n}")
    cluster = ProxySQLNode.objects.get(admin_port=nodes[0].port).cluster
    assert cluster.native_manager == "galera"
    Cluster.objects.filter(pk=cluster.pk).update(auto_failover_enabled=True, failover_after_polls=1)
    return Cluster.objects.get(pk=cluster.pk)


def said_on_the_page_and_in_the_report(cluster, client, old, new, ms):
    """The cluster page lists the manager's move with its measure; so does the report of the period."""
    page = client.get(reverse("pages:cluster", args=[cluster.pk])).content.decode()
    assert "automatic failover: ProxySQL's manager's (this product stays out" in page, page
    assert f'Writer moved by ProxySQL&#x27;s Galera manager: {old} → {new}</td><td class="num">{ms} ms' in page
    now = timezone.now()
    section = reports.build_data(cluster, "daily", periods.Span(now - timedelta(hours=1), now + timedelta(minutes=1)))[
        "clusters"
    ][0]
    assert [(m["old"], m["new"], m["failover_ms"]) for m in section["manager_moves"]][-1] == (old, new, ms)


def check_galera_failover(nodes, galera, client=None):
    cluster = galera_cluster(nodes)
    tick(["backend", "proxysql"])  # the watcher learns Monitor's writer
    galera.stop(1)
    try:
        event = polled_until(cluster, MOVED)
        for node in nodes:
            galera_native.wait_placed(node, 3312)
        product_stayed_out(cluster)
        d = event.details
        print(f"native galera failover as the product measured it: {d['failover_ms']} ms (polls), nodes {d['nodes']}")
        assert (d["old_writer"], d["new_writer"]) == ("127.0.0.1:3311", "127.0.0.1:3312"), d
        assert d["online_everywhere_at"] >= d["death_seen_at"] and d["failover_ms"] == event.duration_ms >= 0
        assert sorted(d["nodes"]) == sorted(n.name for n in cluster.proxysql_nodes.all()), d
        alert = Alert.objects.filter(rule="native_failover", cluster=cluster).order_by("-id").first()
        assert alert is not None and alert.state == "resolved" and alert.active_key is None
        assert alert.summary.startswith(
            "Writer changed by ProxySQL's Galera manager from 127.0.0.1:3311 to 127.0.0.1:3312: writer death seen at "
        ), alert.summary
        assert "new writer ONLINE on every node at" in alert.summary and alert.value == d["failover_ms"]
        if client is not None:
            said_on_the_page_and_in_the_report(cluster, client, "127.0.0.1:3311", "127.0.0.1:3312", d["failover_ms"])
    finally:
        galera.start(1)
    for node in nodes:  # the heavier 3311 is the writer again once Synced: another move of the manager's
        galera_native.wait_placed(node, 3311)
    back = polled_until(cluster, MOVED)
    assert (back.details["old_writer"], back.details["new_writer"]) == ("127.0.0.1:3312", "127.0.0.1:3311")
    product_stayed_out(cluster)


def test_the_galera_managers_failover_is_measured_and_said_on_a_double_pair(
    proxysql_double_factory, galera_healthy, live_redis, viewer_client
):
    check_galera_failover(proxysql_double_factory(2), galera_healthy, viewer_client)


def test_the_galera_managers_failover_is_measured_and_said_on_a_real_pair(
    real_proxysql_factory, galera_healthy, live_redis
):
    check_galera_failover([real_proxysql_factory("2.7.1", name=f"native-fo-{n}") for n in (1, 2)], galera_healthy)


def check_replication_writer_left(nodes, lab):
    cluster = natively_managed(nodes)
    Cluster.objects.filter(pk=cluster.pk).update(auto_failover_enabled=True, failover_after_polls=1)
    cluster = Cluster.objects.get(pk=cluster.pk)
    tick(["backend", "proxysql"])
    with closing(lab.root_connection(1)) as conn:
        conn.cursor().execute("SET GLOBAL read_only=ON")
    try:
        deadline = time.monotonic() + 30
        while True:
            tick(["backend"])
            rules.after_backend_poll([cluster.pk])
            tick(["proxysql"])
            alert = Alert.objects.filter(rule="native_failover", cluster=cluster, active_key__isnull=False).first()
            if alert is not None and alert.summary.startswith("No writer"):
                break
            assert time.monotonic() < deadline, alert and alert.summary
            time.sleep(0.3)
        assert alert.state == "firing" and "replication manager placed none on any node" in alert.summary
        assert "a new primary is the DBA's or their tooling's" in alert.summary, alert.summary
        product_stayed_out(cluster)
    finally:
        with closing(lab.root_connection(1)) as conn:
            conn.cursor().execute("SET GLOBAL read_only=OFF")
    back = polled_until(cluster, "writer back, placed by ProxySQL's replication manager", 30)
    assert back.details["new_writer"] == back.details["old_writer"] == "127.0.0.1:3321"
    assert back.duration_ms > 0
    alert = Alert.objects.get(pk=alert.pk)
    assert alert.state == "resolved" and "placed again by ProxySQL's replication manager" in alert.summary
    product_stayed_out(cluster)


def test_the_replication_manager_leaving_no_writer_is_said_on_a_double_pair(
    proxysql_double_factory, replication_healthy, live_redis
):
    check_replication_writer_left(proxysql_double_factory(2), replication_healthy)


def test_the_replication_manager_leaving_no_writer_is_said_on_a_real_pair(
    real_proxysql_factory, replication_healthy, live_redis
):
    check_replication_writer_left(
        [real_proxysql_factory("2.7.1", name=f"native-left-{n}") for n in (1, 2)], replication_healthy
    )
