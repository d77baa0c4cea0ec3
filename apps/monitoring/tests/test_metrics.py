"""/metrics, /metrics/pool and /metrics/targets: what they export (read back with prometheus_client's own parser),
that promtool accepts it, that the fast writer is byte for byte the library's, Redis and the database down, and who
may scrape. The scrape by a real Prometheus server (discovering its targets) is in test_prometheus_scrape.py."""

import hashlib
import os
import shutil
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from apps.alerts.models import Alert
from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster, MirrorRule, ProxySQLNode, Server
from apps.monitoring import exporter, live, pollers
from apps.pages import metrics as metrics_page
from apps.monitoring.models import RAW, MirrorRuleSample
from apps.monitoring.tests import synthetic
from apps.operations.models import Operation, PendingRollback
from conftest import missing

pytestmark = pytest.mark.django_db

OUTSIDE = "192.0.2.7"  # TEST-NET-1: never in the default allow-list


def scrape(client, **extra):
    response = client.get("/metrics", **extra)
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return response.content.decode()


def scrape_pool(client, cluster, **extra):
    response = client.get("/metrics/pool", {"cluster": cluster}, **extra)
    assert response.status_code == 200, response.content[:500]
    assert response["Content-Type"].startswith("text/plain; version=0.0.4")
    return response.content.decode()


def series(text):
    """{(sample name, frozenset(labels)): value}, parsed by prometheus_client's parser (it raises on bad text)."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, f"duplicate series {key}"
            out[key] = s.value
    return out


def value(parsed, name, **labels):
    return parsed[(name, frozenset(labels.items()))]


def names(parsed, name):
    return [dict(labels) for n, labels in parsed if n == name]


def poll_lab():
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    servers = list(Server.objects.select_related("cluster").order_by("pk"))
    pollers.proxysql_round(nodes)
    time.sleep(0.3)
    pollers.proxysql_round(nodes)
    pollers.backend_round(servers)
    return nodes, servers


def test_the_exposition_holds_the_lab_figures(client, adopted_lab, live_redis, galera_healthy):
    cluster, _ = adopted_lab
    nodes, servers = poll_lab()
    parsed = series(scrape(client))
    types = {f.name: f.type for f in text_string_to_metric_families(scrape(client))}
    assert types["proxysql_fleet_proxysql_questions"] == "counter"
    assert not [name for name in types if name.startswith("proxysql_fleet_pool_")]  # /metrics/pool has them
    pool = scrape_pool(client, "galera-lab")
    pool_types = {f.name: f.type for f in text_string_to_metric_families(pool)}
    assert pool_types == {
        "proxysql_fleet_" + name: ("counter" if name in ("pool_queries", "pool_connection_errors") else "gauge")
        for name in exporter.POOL
    }
    parsed.update(series(pool))
    assert value(parsed, "proxysql_fleet_live_up") == 1 and value(parsed, "proxysql_fleet_database_up") == 1
    assert value(parsed, "proxysql_fleet_hostgroup_info", cluster="galera-lab", hostgroup="100", role="writer") == 1
    assert (
        value(parsed, "proxysql_fleet_proxysql_poll_interval_seconds", cluster="galera-lab") == cluster.poll_interval_s
    )

    for node in nodes:
        doc = live.read_one(live.PROXYSQL, node.pk)
        labels = {"cluster": "galera-lab", "node": node.name}
        assert value(parsed, "proxysql_fleet_proxysql_up", **labels) == 1
        assert 0 <= value(parsed, "proxysql_fleet_proxysql_poll_age_seconds", **labels) < 10
        assert value(parsed, "proxysql_fleet_proxysql_poll_duration_seconds", **labels) == doc["poll_s"] > 0
        assert value(parsed, "proxysql_fleet_proxysql_questions_total", **labels) == doc["counters"]["Questions"] > 0
        assert (
            value(parsed, "proxysql_fleet_proxysql_client_connections", **labels)
            == doc["figures"]["client_connections_connected"]
        )
        figures = doc["figures"]
        assert (
            value(parsed, "proxysql_fleet_mirror_queue_limit", **labels)
            == figures["mirror_max_queue_length"] * figures["mysql_threads"]
        )
        assert (
            value(parsed, "proxysql_fleet_mirror_concurrency_limit", **labels)
            == figures["mirror_max_concurrency"]
            == 16
        )
        assert len(doc["pool"]) == 6
        for row in doc["pool"]:
            hg, host, port = row["key"]
            row_labels = {**labels, "hostgroup": str(hg), "server": f"{host}:{port}"}
            assert value(parsed, "proxysql_fleet_pool_server_status", **row_labels, status=row["status"]) == 1
            assert value(parsed, "proxysql_fleet_pool_connections_used", **row_labels) == row["conn_used"]
            assert value(parsed, "proxysql_fleet_pool_connections_free", **row_labels) == row["conn_free"]
            assert value(parsed, "proxysql_fleet_pool_queries_total", **row_labels) == row["counters"]["Queries"]
            assert (
                value(parsed, "proxysql_fleet_pool_connection_errors_total", **row_labels) == row["counters"]["ConnERR"]
            )
            assert value(parsed, "proxysql_fleet_pool_latency_seconds", **row_labels) == pytest.approx(
                row["latency_us"] / 1e6
            )
        writer = {**labels, "hostgroup": "100", "server": "127.0.0.1:3311"}
        assert value(parsed, "proxysql_fleet_pool_connections_used", **writer) == 4  # the lab's pinned writer sessions
        assert value(parsed, "proxysql_fleet_pool_server_status", **writer, status="ONLINE") == 1

    for server in servers:
        labels = {"cluster": "galera-lab", "server": f"127.0.0.1:{server.port}"}
        doc = live.read_one(live.BACKEND, server.pk)
        assert value(parsed, "proxysql_fleet_backend_up", **labels) == 1
        assert value(parsed, "proxysql_fleet_backend_wsrep_local_state", **labels) == 4  # Synced
        assert value(parsed, "proxysql_fleet_backend_wsrep_cluster_primary", **labels) == 1
        assert (
            value(parsed, "proxysql_fleet_backend_wsrep_local_recv_queue", **labels) == doc["state"]["local_recv_queue"]
        )
        assert 0 <= value(parsed, "proxysql_fleet_backend_wsrep_flow_control_paused_ratio", **labels) <= 1
        assert value(parsed, "proxysql_fleet_backend_maintenance", **labels) == 0
        assert value(parsed, "proxysql_fleet_backend_poll_duration_seconds", **labels) == doc["poll_s"] > 0
    # Bounded labels: only these names, and no digest or query text anywhere (command, errno and user: the query
    # stats' fixed lists and capped users, exporter.USERS_EXPORTED and COMMANDS_EXPORTED).
    used = {k for _, labels in parsed for k, _ in labels}
    assert used <= {
        "cluster",
        "node",
        "hostgroup",
        "server",
        "role",
        "status",
        "rule",
        "kind",
        "state",
        "le",
        "command",
        "errno",
        "user",
    }


def test_promtool_accepts_the_exposition(client, adopted_lab, live_redis, galera_healthy, everything):
    promtool = shutil.which("promtool")
    if promtool is None:
        reason = "promtool is not installed (Debian package prometheus; bin/setup installs it)"
        missing(reason)
    poll_lab()
    synthetic.publish(everything["nodes"], everything["servers"], trouble_every=3)  # the lab's poll failed them
    for body in (
        client.get("/metrics").content,
        client.get("/metrics/pool", {"cluster": "galera-lab"}).content,
        client.get("/metrics/pool", {"cluster": everything["cluster"].name}).content,
    ):
        assert body.count(b"\n") > 10
        result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=60)
        assert result.returncode == 0, (result.stdout + result.stderr).decode()
        assert not (result.stdout + result.stderr).strip(), (
            "promtool's lint found problems: " + (result.stdout + result.stderr).decode()
        )


@pytest.fixture
def everything(db, live_redis):
    """A synthetic fleet (synthetic.py: documents shaped like pollers.py's) in which every family has a series: a
    hostile cluster name, an unreachable node, a desynced backend, an async replica, operations ended and open,
    their durations, a pending rollback and a measured mirror rule."""
    cluster_ids, node_ids, server_ids = synthetic.fleet(2, prefix='we"ird\\name\n')
    px, be = synthetic.publish(node_ids, server_ids, trouble_every=3)
    replica = be[server_ids[1]]
    replica["state"].update(wsrep_on=False, read_only=True)
    replica["lag_seconds"] = 7
    live.write_many(live.BACKEND, {server_ids[1]: replica})
    Server.objects.filter(pk=server_ids[2]).update(maintenance=True)
    cluster = Cluster.objects.get(pk=cluster_ids[0])
    now = timezone.now()
    ops = []
    for kind, state, seconds in (
        ("switchover", "done", 0.07),
        ("switchover", "done", 0.3),
        ("drain", "rolled_back", 4),
        ("failover", "failed", 45),
        ("switchover", "running", None),
        ("repair", "planned", None),
        ("switchover", "finish_pending", 1.5),
        ("drain", "rollback_pending", 2),
    ):
        ops.append(
            Operation.objects.create(
                cluster=cluster,
                kind=kind,
                state=state,
                title=f"{kind} {state}",
                actor="test",
                plan={},
                started_at=now - timedelta(seconds=seconds or 1),
                finished_at=(now if seconds else None),
                timings={"total_ms": seconds * 1000} if seconds else {},
            )
        )
    Operation.objects.create(
        cluster=cluster,
        kind="switchover",
        state="refused",
        title="refused at start",
        actor="test",
        plan={},
        timings={"recheck_ms": 4.2},
    )  # never ran: counted, but has no run time
    PendingRollback.objects.create(
        operation=ops[-1], node_id=node_ids[0], statements=[{"step": "x", "sql": "SELECT 1"}], next_try_at=now
    )
    MirrorRule.objects.create(proxysql_node_id=node_ids[0], rule_id=7, mirror_hostgroup=200, match_digest="^SELECT")
    MirrorRuleSample.objects.create(
        node_id=node_ids[0],
        rule_id=7,
        ts=now - timedelta(seconds=40),
        resolution=RAW,
        mirror_hostgroup=200,
        interval_s=30,
        hits_ps=10,
        expected_ps=10,
        mirrored_ps=9,
        loss=0.5,
    )
    MirrorRuleSample.objects.create(
        node_id=node_ids[0],
        rule_id=7,
        ts=now - timedelta(seconds=10),
        resolution=RAW,
        mirror_hostgroup=200,
        interval_s=30,
        hits_ps=10,
        expected_ps=10,
        mirrored_ps=7.5,
        loss=0.25,
    )
    for rule, severity, state, held, resolved in (
        ("writer_none", "critical", "firing", False, False),
        ("readers_low", "warning", "pending", False, False),
        ("readers_low", "warning", "pending", True, False),
        ("readers_low", "warning", "pending", True, False),
        ("drift", "warning", "resolved", False, True),
    ):
        n = Alert.objects.count()
        Alert.objects.create(
            rule=rule,
            cluster=cluster,
            target=f"c{cluster.pk}",
            subject=f"s{n}",
            subject_label=f"s{n}",
            severity=severity,
            state=state,
            held=held,
            summary="x",
            since=now,
            fires_at=now,
            last_seen_at=now,
            resolved_at=now if resolved else None,
            active_key=None if resolved else f"{rule}|s{n}",
        )
    return {"cluster": cluster, "nodes": node_ids, "servers": server_ids, "px": px, "be": be}


def test_every_family_is_exported_with_its_help(client, everything):
    name = 'we"ird\\name\n-0000'
    parsed = series(scrape(client))
    pool = scrape_pool(client, name)
    families = {f.name: f for f in text_string_to_metric_families(scrape(client))}
    pool_families = {f.name: f for f in text_string_to_metric_families(pool)}
    assert set(families) == (
        {exporter.PREFIX + name for name in exporter.SPECS if name not in exporter.POOL}
        | {"proxysql_fleet_operation_duration_seconds"}
    )
    assert set(pool_families) == {exporter.PREFIX + name for name in exporter.POOL}
    assert all(f.documentation for f in [*families.values(), *pool_families.values()])
    pool_parsed = series(pool)
    assert {labels["cluster"] for _, labels in map(lambda k: (k[0], dict(k[1])), pool_parsed)} == {name}
    parsed.update(pool_parsed)
    first_node = ProxySQLNode.objects.get(pk=everything["nodes"][0])
    node = {"cluster": name, "node": first_node.name}
    assert value(parsed, "proxysql_fleet_mirror_rule_loss_ratio", **node, rule="7") == 0.25  # the latest window
    assert value(parsed, "proxysql_fleet_mirror_rule_expected_per_second", **node, rule="7") == 10
    assert value(parsed, "proxysql_fleet_pending_rollbacks", **node, state="pending") == 1
    assert value(parsed, "proxysql_fleet_operations_total", cluster=name, kind="switchover", state="done") == 2
    assert value(parsed, "proxysql_fleet_operations_total", cluster=name, kind="failover", state="failed") == 1
    assert value(parsed, "proxysql_fleet_operations_open", cluster=name, kind="switchover", state="running") == 1
    assert value(parsed, "proxysql_fleet_operations_open", cluster=name, kind="drain", state="rollback_pending") == 1
    assert value(parsed, "proxysql_fleet_operations_open", cluster=name, kind="switchover", state="finish_pending") == 1
    assert families["proxysql_fleet_operations_open"].documentation.endswith("rollback_pending, finish_pending)")
    assert {
        tuple(sorted(labels.items())): value(parsed, "proxysql_fleet_alerts", **labels)
        for labels in names(parsed, "proxysql_fleet_alerts")
    } == {
        (("cluster", name), ("rule", "writer_none"), ("severity", "critical"), ("state", "firing")): 1,
        (("cluster", name), ("rule", "readers_low"), ("severity", "warning"), ("state", "pending")): 1,
        (("cluster", name), ("rule", "readers_low"), ("severity", "warning"), ("state", "held")): 2,
    }  # resolved: none
    assert (
        "proxysql_fleet_operations_total",
        frozenset({"cluster": name, "kind": "switchover", "state": "running"}.items()),
    ) not in parsed
    hist = {"kind": "switchover", "state": "done"}
    assert value(parsed, "proxysql_fleet_operation_duration_seconds_bucket", **hist, le="0.05") == 0
    assert value(parsed, "proxysql_fleet_operation_duration_seconds_bucket", **hist, le="0.1") == 1
    assert value(parsed, "proxysql_fleet_operation_duration_seconds_bucket", **hist, le="0.5") == 2
    assert value(parsed, "proxysql_fleet_operation_duration_seconds_bucket", **hist, le="+Inf") == 2
    assert value(parsed, "proxysql_fleet_operation_duration_seconds_count", **hist) == 2
    assert value(parsed, "proxysql_fleet_operation_duration_seconds_sum", **hist) == pytest.approx(0.37, abs=0.01)
    assert (
        value(parsed, "proxysql_fleet_operation_duration_seconds_bucket", kind="failover", state="failed", le="30.0")
        == 0
    )
    # trouble_every=3: the first node is unreachable: up 0, its age, no figures, no pool rows.
    assert value(parsed, "proxysql_fleet_proxysql_up", **node) == 0
    assert ("proxysql_fleet_proxysql_questions_total", frozenset(node.items())) not in parsed
    assert not [
        labels
        for labels in names(parsed, "proxysql_fleet_pool_connections_used")
        if labels["node"] == first_node.name and labels["cluster"] == name
    ]
    second = {"cluster": name, "node": ProxySQLNode.objects.get(pk=everything["nodes"][1]).name}
    assert value(parsed, "proxysql_fleet_proxysql_up", **second) == 1
    second_rows = [
        labels for labels in names(parsed, "proxysql_fleet_pool_connections_used") if labels["node"] == second["node"]
    ]
    assert len(second_rows) == len(everything["px"][everything["nodes"][1]]["pool"]) > 0
    assert value(parsed, "proxysql_fleet_proxysql_questions_total", **second) == 123456789
    replica = Server.objects.get(pk=everything["servers"][1])
    replica_labels = {"cluster": name, "server": f"{replica.hostname}:3306"}
    assert value(parsed, "proxysql_fleet_backend_replica_lag_seconds", **replica_labels) == 7
    assert value(parsed, "proxysql_fleet_backend_read_only", **replica_labels) == 1
    assert ("proxysql_fleet_backend_wsrep_local_state", frozenset(replica_labels.items())) not in parsed
    desynced = Server.objects.get(pk=everything["servers"][0])
    desynced_labels = {"cluster": name, "server": f"{desynced.hostname}:3306"}
    assert value(parsed, "proxysql_fleet_backend_wsrep_local_state", **desynced_labels) == 2
    assert value(parsed, "proxysql_fleet_backend_wsrep_local_recv_queue", **desynced_labels) == 500


def test_stale_unreadable_and_unpolled_nodes_say_so(client, everything):
    node_ids = everything["nodes"]
    old = everything["px"][node_ids[1]]
    old["ts"] = time.time() - 3600  # stale: older than 3 poll intervals
    live.write_many(live.PROXYSQL, {node_ids[1]: old})
    live.client().set(live.key(live.PROXYSQL, node_ids[2]), b"{not json")
    live.client().delete(live.key(live.PROXYSQL, node_ids[3]))
    parsed = series(scrape(client))
    nodes = {
        pk: {"cluster": n.cluster.name, "node": n.name} for pk, n in ProxySQLNode.objects.in_bulk(node_ids).items()
    }
    assert value(parsed, "proxysql_fleet_proxysql_up", **nodes[node_ids[1]]) == 0
    assert value(parsed, "proxysql_fleet_proxysql_poll_age_seconds", **nodes[node_ids[1]]) > 3500
    assert ("proxysql_fleet_proxysql_questions_total", frozenset(nodes[node_ids[1]].items())) not in parsed
    for pk in node_ids[2:4]:  # unreadable, never polled: up 0 and nothing else
        assert value(parsed, "proxysql_fleet_proxysql_up", **nodes[pk]) == 0
        assert ("proxysql_fleet_proxysql_poll_age_seconds", frozenset(nodes[pk].items())) not in parsed


def test_the_fast_writer_is_byte_for_byte_the_librarys(adopted_lab, live_redis, galera_healthy, everything):
    poll_lab()
    synthetic.publish(everything["nodes"], everything["servers"], trouble_every=3)  # the lab's poll failed them
    now = time.time()
    for collector in (
        lambda: metrics_page.collector(now),
        lambda: exporter.PoolCollector("galera-lab", now),
        lambda: exporter.PoolCollector(everything["cluster"].name, now),
    ):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector())
        library = generate_latest(registry)
        ours = exporter.render(collector().collect())
        assert ours == library and ours.count(b"\n") > 10
        if getattr(collector(), "cluster_name", None) != "galera-lab":
            assert b'cluster="we\\"ird\\\\name\\n-0000"' in ours  # escaped by the library's rules


def test_redis_down_gives_a_partial_answer_not_an_error(client, everything, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1
    parsed = series(scrape(client))
    assert value(parsed, "proxysql_fleet_live_up") == 0
    assert value(parsed, "proxysql_fleet_database_up") == 1
    assert not names(parsed, "proxysql_fleet_proxysql_up") and not names(parsed, "proxysql_fleet_backend_up")
    name = everything["cluster"].name
    assert value(parsed, "proxysql_fleet_operations_total", cluster=name, kind="switchover", state="done") == 2
    assert names(parsed, "proxysql_fleet_backend_maintenance")
    # A pool target cannot read its rows: an error, so that Prometheus marks it down (an empty body would read as a
    # pool without rows).
    response = client.get("/metrics/pool", {"cluster": name})
    assert response.status_code == 503 and b"Redis does not answer" in response.content


def test_a_pool_target_for_no_cluster_is_a_clear_error(client, everything):
    response = client.get("/metrics/pool")
    assert response.status_code == 400 and b"/metrics/pool?cluster=NAME" in response.content
    response = client.get("/metrics/pool", {"cluster": "no-such-cluster"})
    assert response.status_code == 404 and b"no-such-cluster" in response.content
    name = everything["cluster"].name  # exactly: not as MariaDB's collation compares (case, trailing spaces)
    for hostile in ("\x00", "x" * 10_000, "' OR 1=1 --", "é\u202e", name + " ", name.upper()):
        assert client.get("/metrics/pool", {"cluster": hostile}).status_code == 404, hostile[:20]
    assert client.post("/metrics/pool", {"cluster": everything["cluster"].name}).status_code == 405


def test_a_pool_target_exports_only_fresh_nodes_of_its_cluster(client, everything):
    node_ids, px = everything["nodes"], everything["px"]
    other = Cluster.objects.exclude(pk=everything["cluster"].pk).get()
    other_nodes = {n.pk: n for n in ProxySQLNode.objects.filter(cluster=other)}
    parsed = series(scrape_pool(client, other.name))
    assert {dict(labels)["node"] for _, labels in parsed} == {n.name for n in other_nodes.values() if px[n.pk]["ok"]}
    assert {dict(labels)["cluster"] for _, labels in parsed} == {other.name}
    stale = next(pk for pk in other_nodes if px[pk]["ok"])
    old = {**px[stale], "ts": time.time() - 3600}
    live.write_many(live.PROXYSQL, {stale: old})
    parsed = series(scrape_pool(client, other.name))
    assert other_nodes[stale].name not in {dict(labels)["node"] for _, labels in parsed}
    assert all(pk in node_ids for pk in other_nodes)


def test_the_targets_list_the_fleet_and_one_pool_per_cluster(client, everything, settings):
    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "console.example.net"]
    Cluster.objects.create(name="console.example.net", writer_hostgroup=100, reader_hostgroup=101)  # as the address
    response = client.get("/metrics/targets", HTTP_HOST="console.example.net")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    groups = response.json()
    clusters = list(Cluster.objects.order_by("name").values_list("name", flat=True))
    assert groups[0] == {
        "targets": ["console.example.net"],
        "labels": {"__scheme__": "http", "__metrics_path__": "/metrics"},
    }
    assert groups[1:] == [
        {
            "targets": ["console.example.net"],
            "labels": {
                "__scheme__": "http",
                "__metrics_path__": "/metrics/pool",
                "__param_cluster": name,
                "instance": f"pool/{name}",
            },
        }
        for name in clusters
    ]
    # Prometheus keys a target's `up` by job and instance (the fleet's defaults to its address): all distinct.
    assert len({g["labels"].get("instance", g["targets"][0]) for g in groups}) == len(groups) == len(clusters) + 1
    # Each pool target answers, with the cluster's name as its parameter (the hostile one included).
    for group in groups[1:]:
        scrape_pool(client, group["labels"]["__param_cluster"])
    groups = client.get("/metrics/targets", secure=True).json()  # behind a TLS proxy (SECURE_PROXY_SSL_HEADER)
    assert {g["labels"]["__scheme__"] for g in groups} == {"https"} and {g["targets"][0] for g in groups} == {
        "testserver"
    }
    settings.METRICS_TARGET_URL = "http://metrics.internal:8080"
    groups = client.get("/metrics/targets", secure=True).json()
    assert {g["targets"][0] for g in groups} == {"metrics.internal:8080"}
    assert {g["labels"]["__scheme__"] for g in groups} == {"http"}


# -- who may scrape ------------------------------------------------------------------------------------
TOKEN = "a-metrics-token-for-the-tests-0123456789"


def refusals():
    return AuditEvent.objects.filter(action="refused metrics scrape", outcome="refused")


@pytest.mark.parametrize("path", ["/metrics", "/metrics/pool?cluster=c", "/metrics/targets"])
def test_outside_the_allow_list_without_a_token_is_refused_and_audited(client, db, settings, path):
    settings.METRICS_TOKEN = ""
    Cluster.objects.create(name="c", writer_hostgroup=100, reader_hostgroup=101)
    response = client.get(path, REMOTE_ADDR=OUTSIDE)
    assert response.status_code == 403 and b"METRICS_ALLOWED_ADDRESSES" in response.content
    event = refusals().get()
    assert event.source_address == OUTSIDE and event.actor == "anonymous" and event.details["status"] == 403
    settings.METRICS_TOKEN = TOKEN
    response = client.get(path, REMOTE_ADDR=OUTSIDE)
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")
    assert refusals().count() == 2
    assert client.get(path, REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


def test_a_bearer_token_lets_a_scraper_in_from_anywhere(client, db, live_redis, settings):
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_ADDRESSES = []
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 401  # the allow-list is empty
    assert client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"bearer  {TOKEN} ").status_code == 200
    for wrong in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", "Bearer ", f"Basic {TOKEN}", "Bearer é\x00"):
        response = client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=wrong)
        assert response.status_code == 401, wrong
    # The token as its SHA-256 only: the environment need not hold the secret.
    settings.METRICS_TOKEN = "sha256:" + hashlib.sha256(TOKEN.encode()).hexdigest()
    assert client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200
    assert (
        client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {settings.METRICS_TOKEN}").status_code
        == 401
    )
    # Even from an allowed address a wrong token is refused: credentials presented are judged.
    settings.METRICS_ALLOWED_ADDRESSES = ["127.0.0.1/32"]
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    assert not [e for e in refusals() if TOKEN in str(e.details)]  # the token presented is never stored


def test_the_allow_list_takes_cidrs_v4_and_v6(client, db, live_redis, settings):
    settings.METRICS_TOKEN = ""
    settings.METRICS_ALLOWED_ADDRESSES = ["10.20.0.0/16", "::1/128"]
    for address, allowed in (
        ("10.20.3.4", True),
        ("10.21.0.1", False),
        ("::1", True),
        ("::ffff:10.20.9.9", True),
        ("127.0.0.1", False),
        ("fe80::1%eth0", False),
        ("not an address", False),
        ("", False),
    ):
        status = client.get("/metrics", REMOTE_ADDR=address).status_code
        assert status == (200 if allowed else 403), (address, status)


def test_a_session_does_not_open_metrics_from_outside(client, admin_user_role, settings):
    settings.METRICS_TOKEN = ""
    client.force_login(admin_user_role)
    assert client.get("/metrics", REMOTE_ADDR=OUTSIDE).status_code == 403
    assert client.post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405


def test_a_flood_of_refused_scrapes_is_folded(client, db, settings):
    settings.METRICS_TOKEN = TOKEN
    for _ in range(30):
        assert client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert refusals().count() == settings.AUDIT_REFUSAL_BURST


@pytest.mark.parametrize(
    "env, message",
    [
        ({"METRICS_ALLOWED_ADDRESSES": "10.0.0.0/33"}, "METRICS_ALLOWED_ADDRESSES"),
        ({"METRICS_TOKEN": "short"}, "too short"),
        ({"METRICS_TOKEN": "sha256:abc"}, "64 hex digits"),
        ({"METRICS_TARGET_URL": "console.example.net"}, "METRICS_TARGET_URL"),
        ({"METRICS_TARGET_URL": "https://console.example.net/metrics"}, "without a path"),
    ],
)
def test_a_bad_metrics_setting_stops_the_start(env, message):
    result = subprocess.run(
        [sys.executable, "-c", "import controlplane.settings"],
        capture_output=True,
        text=True,
        env={**os.environ, "DJANGO_DEBUG": "1", **env},
        timeout=60,
    )
    assert result.returncode != 0 and message in result.stderr


# -- the operation counts kept per process ---------------------------------------------------------------
def test_operation_counts_read_each_ended_operation_once_and_follow_the_others(db):
    from apps.operations.counts import GRACE_S, OperationCounts

    cluster = Cluster.objects.create(name="ops", writer_hostgroup=100, reader_hostgroup=101)
    old = timezone.now() - timedelta(seconds=GRACE_S + 60)

    def op(state, ms=None, created=old):
        o = Operation.objects.create(
            cluster=cluster,
            kind="switchover",
            state=state,
            title=state,
            actor="t",
            plan={},
            timings={"total_ms": ms} if ms is not None else {},
        )
        Operation.objects.filter(pk=o.pk).update(created_at=created)
        return o

    done, running, refused = op("done", 70), op("running"), op("refused")
    tally = OperationCounts()
    first = tally.snapshot(time.time())
    key = (cluster.pk, "switchover")
    assert first.ended == {(*key, "done"): 1, (*key, "refused"): 1} and first.unended == {(*key, "running"): 1}
    assert tally.upto == refused.pk and tally.unended == {running.pk}
    assert first.histogram.cumulative()["switchover", "done"][0][1] == (0.1, 1)  # 70 ms: in the 0.1 s bucket
    assert ("switchover", "refused") not in first.histogram.cumulative()  # never ran: no run time

    # Counted for good: a second snapshot reads only the running one and what came since.
    Operation.objects.filter(pk=done.pk).update(state="failed")  # cannot happen (final states); proves no re-read
    Operation.objects.filter(pk=running.pk).update(state="done", timings={"total_ms": 400})
    recent = op("done", 2000, created=timezone.now())  # within the grace: read again at every scrape
    second = tally.snapshot(time.time())
    assert second.ended == {(*key, "done"): 3, (*key, "refused"): 1} and not second.unended
    assert tally.upto == refused.pk and not tally.unended
    third = tally.snapshot(time.time())
    assert third.ended == second.ended  # the recent one is not counted twice
    Operation.objects.filter(pk=recent.pk).update(created_at=old)
    fourth = tally.snapshot(time.time())
    assert fourth.ended == second.ended and tally.upto == recent.pk
    assert fourth.histogram.cumulative()["switchover", "done"][1] == pytest.approx(2.47)

    # Rows gone (a restore, another database): the count starts again from what is there.
    Operation.objects.filter(pk__gte=refused.pk).delete()
    assert tally.snapshot(time.time()).ended == {(*key, "failed"): 1, (*key, "done"): 1}


def test_a_database_that_does_not_answer_gives_database_up_0_not_an_error(client, transactional_db, everything):
    """Transactional: on MariaDB the test's own connection is killed, which no enclosing transaction survives."""
    from django.db import OperationalError, connection

    try:
        with connection.cursor() as cursor:
            if connection.vendor == "sqlite":
                cursor.execute("ALTER TABLE fleet_cluster RENAME TO fleet_cluster_away")
            else:
                try:
                    cursor.execute("KILL CONNECTION_ID()")  # the server ends this session: "server has gone away"
                except OperationalError:
                    pass  # MariaDB answers the KILL itself with "Connection was killed"
        parsed = series(scrape(client))
        assert parsed == {("proxysql_fleet_database_up", frozenset()): 0}
        response = client.get("/metrics/pool", {"cluster": everything["cluster"].name})
        assert response.status_code == 503 and b"database does not answer" in response.content
        response = client.get("/metrics/targets")
        assert response.status_code == 503 and b"database does not answer" in response.content
    finally:
        if connection.vendor == "sqlite":
            with connection.cursor() as cursor:
                cursor.execute("ALTER TABLE fleet_cluster_away RENAME TO fleet_cluster")
        else:
            connection.close()  # Django opens a new one for the fixture teardown's flush


def test_a_viewer_api_token_reads_metrics_and_a_user_without_a_role_does_not(
    client, db, live_redis, settings, viewer_user, django_user_model
):
    """Issue 12's done-when: a script with a viewer token reads everything the viewer sees, /metrics included."""
    from apps.accounts import tokens

    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_ADDRESSES = []
    raw = tokens.create(viewer_user, "grafana")[1]
    assert client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    nobody = django_user_model.objects.create_user(username="no-role", password="x")
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {tokens.create(nobody, 't')[1]}")
    assert response.status_code == 403 and b"no role" in response.content
    token = tokens.create(viewer_user, "revoked")
    tokens.revoke(token[0], actor=Actor.command(viewer_user))
    response = client.get("/metrics", REMOTE_ADDR=OUTSIDE, HTTP_AUTHORIZATION=f"Bearer {token[1]}")
    assert response.status_code == 401 and b"revoked" in response.content
    assert AuditEvent.objects.filter(action="api token refused").count() == 1
    assert not [e for e in AuditEvent.objects.all() if raw in str(e.details) or token[1] in str(e.details)]
