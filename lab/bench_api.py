"""Benchmark of the JSON API's list endpoints at fleet scale (`bin/bench-api`, `manage.py bench_api`).

A scratch database gets 1,000 ProxySQL nodes and 3,000 backends (500 clusters x 2 nodes x 6 backends, the
shape of lab/bench_monitoring.py, written by apps/monitoring/tests/synthetic.py), their latest-state
documents in Redis, --operations operations with real-sized plans, --events audit events, one configuration
version and two change sets per cluster, a report per cluster, and --digests digests run from every node in
the last hour (the digest page's selector at 100,000 digests has its own benchmark: manage.py bench_digests).
Then every list endpoint (and a few per-object reads) is called through Django's test client
with a viewer's API token (the whole request: middleware, token check, role, rate limit in Redis, view,
serializer, JSON), --requests times each after three warm-ups, and p50/p95 are printed with the machine.
"""

import json
import os
import random
import statistics
import time
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.test import Client
from django.utils import timezone

from apps.accounts import tokens
from apps.alerts.models import Alert, Silence
from lab import bench_audit as audit_bench
from apps.audit.models import AuditEvent
from apps.configuration import content as C
from apps.configuration.models import ChangeSet, ConfigVersion
from apps.digests.models import RAW, Digest, DigestPoll, DigestSource, DigestStat
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.operations.models import Operation
from apps.reports.models import Report

PREFIX = "apibench"
TARGET_P95_MS = 150


def plan_of(cluster_id, nodes):
    """A switchover plan's size and shape: guards, and per step the statements of two nodes."""
    sql = {
        str(n): {
            "name": f"px-{n}",
            "sql": [
                "UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=100 "
                "AND hostname='db-0.example' AND port=3306",
                "LOAD MYSQL SERVERS TO RUNTIME",
            ],
            "rollback": [
                "REPLACE INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'db-0',3306)",
                "LOAD MYSQL SERVERS TO RUNTIME",
            ],
        }
        for n in nodes
    }
    return {
        "kind": "switchover",
        "cluster_id": cluster_id,
        "title": "Switchover",
        "guards": [
            {"key": f"g{i}", "label": "A guard of the switchover", "passed": True, "value": "yes", "overridable": True}
            for i in range(12)
        ],
        "steps": [
            {"key": k, "title": k, "kind": "proxysql", "nodes": sql, "params": {}, "point_of_no_return": False}
            for k in ("drain", "move", "save")
        ],
        "facts": {"pinned_total": 8},
        "options": {"new_writer": 1},
    }


def fill(operations, events, digests, out):
    from apps.monitoring.tests import synthetic

    if Cluster.objects.filter(name__startswith=PREFIX).exists():
        out(
            f"reusing the fleet already there ({ProxySQLNode.objects.count():,} ProxySQL nodes, "
            f"{Server.objects.count():,} backends): empty the database to refill"
        )
        _alerts(out)
        return _ids()
    started = time.monotonic()
    cluster_ids, node_ids, server_ids = synthetic.fleet(500, 2, 6, prefix=PREFIX)
    nodes_of = {}
    for pk, cid in ProxySQLNode.objects.values_list("id", "cluster_id"):
        nodes_of.setdefault(cid, []).append(pk)
    rng = random.Random(12)
    now = timezone.now()
    states = ["done"] * 8 + ["rolled_back", "failed"]
    Operation.objects.bulk_create(
        [
            Operation(
                cluster_id=(cid := rng.choice(cluster_ids)),
                kind="switchover",
                state=rng.choice(states),
                title=f"Switchover {cid}",
                actor="otto",
                confirmer="olga",
                plan=plan_of(cid, nodes_of[cid]),
                started_at=now,
                finished_at=now,
                timings={"total_ms": 800.0},
            )
            for _ in range(operations)
        ],
        batch_size=500,
    )
    audit_bench.generate(events, days=30, clusters=40)
    content = C.empty()
    versions = ConfigVersion.objects.bulk_create(
        [
            ConfigVersion(cluster_id=cid, number=1, author="adopt", reason="adopted", source="adopt", content=content)
            for cid in cluster_ids
        ],
        batch_size=500,
    )
    ChangeSet.objects.bulk_create(
        [
            ChangeSet(
                cluster_id=v.cluster_id,
                base=v,
                author_name="otto",
                reason="r",
                edits=[{"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "2048"}],
            )
            for v in versions
            for _ in range(2)
        ],
        batch_size=500,
    )
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    Report.objects.bulk_create(
        [
            Report(
                scope="cluster",
                cluster_id=cid,
                scope_name=f"{PREFIX}-{i}",
                period="daily",
                start=day - timedelta(days=1),
                end=day,
                built_at=now,
                built_by="schedule",
                build_ms=900.0,
                headline="Healthy.",
                data={"title": f"{PREFIX}-{i}: daily health report", "sections": ["x" * 2000]},
                html="<p>" + "x" * 20_000 + "</p>",
            )
            for i, cid in enumerate(cluster_ids)
        ],
        batch_size=200,
    )
    _digests(digests, node_ids, rng)
    _alerts(out)
    out(
        f"filled in {time.monotonic() - started:.0f} s: {len(cluster_ids)} clusters, {len(node_ids):,} ProxySQL "
        f"nodes, {len(server_ids):,} backends, {operations:,} operations, {AuditEvent.objects.count():,} audit events, "
        f"{ConfigVersion.objects.count()} versions, {ChangeSet.objects.count():,} change sets, "
        f"{Report.objects.count()} reports, {Digest.objects.count():,} digests "
        f"({DigestStat.objects.count():,} digest rows)"
    )
    return _ids()


def _alerts(out, open_per_cluster=10, resolved_per_cluster=100):
    """The alert storm of bin/bench-alerts' fleet (about 5,000 open: backends unreachable, no usable writer,
    readers low) and 50,000 resolved over 30 days, with a silence per 50 clusters; made once (a database filled
    before alerts existed gets them on its next run)."""
    if Alert.objects.exists():
        return
    started = time.monotonic()
    rng = random.Random(13)
    now = timezone.now()
    rules = [
        ("backend_unreachable", "critical"),
        ("writer_none", "critical"),
        ("readers_low", "warning"),
        ("backend_shunned", "warning"),
        ("drift", "warning"),
        ("poll_latency", "info"),
    ]
    rows = []
    for cid in Cluster.objects.filter(name__startswith=PREFIX).values_list("id", flat=True):
        for i in range(open_per_cluster + resolved_per_cluster):
            rule, severity = rules[i % len(rules)]
            since = now - timedelta(seconds=rng.uniform(0, 30 * 86400 if i >= open_per_cluster else 3600))
            resolved = i >= open_per_cluster
            rows.append(
                Alert(
                    rule=rule,
                    cluster_id=cid,
                    target=f"c{cid}",
                    subject=f"{rule}:{cid}:{i}",
                    subject_label=f"{rule} subject {i}",
                    severity=severity,
                    state="resolved" if resolved else "firing",
                    summary=f"{rule}: seen on the bench fleet",
                    since=since,
                    fires_at=since,
                    fired_at=since,
                    last_seen_at=since,
                    resolved_at=since + timedelta(minutes=5) if resolved else None,
                    active_key=None if resolved else f"{rule}|{cid}:{i}",
                    notified=True,
                )
            )
    Alert.objects.bulk_create(rows, batch_size=1000)
    Silence.objects.bulk_create(
        [
            Silence(cluster_id=cid, reason="bench", starts_at=now, ends_at=now + timedelta(hours=2), created_by="bench")
            for cid in Cluster.objects.filter(name__startswith=PREFIX).values_list("id", flat=True)[::50]
        ]
    )
    out(
        f"alerts made in {time.monotonic() - started:.0f} s: {Alert.objects.filter(active_key__isnull=False).count():,} "
        f"open, {Alert.objects.filter(state='resolved').count():,} resolved, {Silence.objects.count()} silences"
    )


def _digests(n, node_ids, rng):
    """n digests, each run in the last hour from 10 of the nodes (raw rows), and every node's polls."""
    now = int(time.time())
    Digest.objects.bulk_create(
        [
            Digest(
                digest=f"0x{i:016X}", digest_text=f"SELECT c{i % 50} FROM t{i} WHERE id = ?", first_polled_at=now - 3600
            )
            for i in range(1, n + 1)
        ],
        batch_size=2000,
    )
    DigestSource.objects.bulk_create(
        [DigestSource(node_id=pk, hostgroup=101, username="app", schemaname="shop") for pk in node_ids], batch_size=2000
    )
    sources = list(DigestSource.objects.values_list("id", flat=True))
    digest_ids = list(Digest.objects.values_list("id", flat=True))
    rows = []
    for did in digest_ids:
        for sid in rng.sample(sources, 10):
            count = rng.randint(1, 500)
            rows.append(
                DigestStat(
                    resolution=RAW,
                    ts=now - rng.randint(60, 3500),
                    source_id=sid,
                    digest_id=did,
                    count_star=count,
                    sum_time=count * rng.randint(100, 50_000),
                )
            )
        if len(rows) >= 20_000:
            DigestStat.objects.bulk_create(rows, batch_size=5000)
            rows = []
    DigestStat.objects.bulk_create(rows, batch_size=5000)
    DigestPoll.objects.bulk_create(
        [
            DigestPoll(resolution=RAW, ts=ts, node_id=pk, polls_ok=1, polls_failed=0, interval_s=30)
            for pk in node_ids
            for ts in range(now - 3600, now, 300)
        ],
        batch_size=5000,
    )


def _ids():
    cluster = Cluster.objects.filter(name__startswith=PREFIX).order_by("name").first()
    return {
        "cluster": cluster.pk,
        "node": ProxySQLNode.objects.filter(cluster=cluster).first().pk,
        "server": Server.objects.filter(cluster=cluster).first().pk,
        "operation": Operation.objects.order_by("-id").first().pk,
    }


def viewer_token():
    user, _ = get_user_model().objects.get_or_create(username="bench-api-viewer")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    return tokens.create(user, f"bench {time.time():.0f}")[1]


def scenarios(ids):
    c = ids["cluster"]
    lists = [
        ("clusters", "/api/v1/clusters/", {}),
        ("clusters, 500 a page", "/api/v1/clusters/", {"page_size": 500}),
        ("clusters, the last page", "/api/v1/clusters/", {"page": 10}),
        ("servers", "/api/v1/servers/", {}),
        ("servers, 500 a page", "/api/v1/servers/", {"page_size": 500}),
        ("servers, a page in the middle", "/api/v1/servers/", {"page": 30}),
        ("servers of one cluster", "/api/v1/servers/", {"cluster": c}),
        ("servers in maintenance", "/api/v1/servers/", {"maintenance": "true"}),
        ("ProxySQL nodes", "/api/v1/proxysql-nodes/", {}),
        ("ProxySQL nodes, 500 a page", "/api/v1/proxysql-nodes/", {"page_size": 500}),
        ("operations", "/api/v1/operations/", {}),
        ("operations, failed ones", "/api/v1/operations/", {"state": "failed"}),
        ("operations of one cluster", "/api/v1/operations/", {"cluster": c}),
        ("audit events", "/api/v1/audit/events/", {}),
        ("audit events, search", "/api/v1/audit/events/", {"q": "switchover"}),
        ("audit events, outcome refused, 7 days", "/api/v1/audit/events/", {"outcome": "refused", "range": "7d"}),
        ("reports", "/api/v1/reports/", {}),
        ("configuration versions of a cluster", f"/api/v1/clusters/{c}/config/versions/", {}),
        ("change sets of a cluster", f"/api/v1/clusters/{c}/config/change-sets/", {}),
        ("digests, last hour", "/api/v1/digests/", {}),
        ("digests, last hour, search", "/api/v1/digests/", {"q": "c7 FROM"}),
        ("hostgroups of a cluster", f"/api/v1/clusters/{c}/hostgroups/", {}),
        ("alerts", "/api/v1/alerts/", {}),
        ("alerts, open", "/api/v1/alerts/", {"state": "open"}),
        ("alerts, firing critical", "/api/v1/alerts/", {"state": "firing", "severity": "critical"}),
        ("alerts of one cluster", "/api/v1/alerts/", {"cluster": c}),
        ("alerts, a page deep in the history", "/api/v1/alerts/", {"state": "resolved", "page": 500}),
        ("silences in force", "/api/v1/silences/", {"active": "true"}),
    ]
    reads = [
        ("one ProxySQL node's latest state", f"/api/v1/proxysql-nodes/{ids['node']}/state/", {}),
        ("one cluster's latest state", f"/api/v1/clusters/{c}/state/", {}),
        ("one backend's latest state", f"/api/v1/servers/{ids['server']}/state/", {}),
        ("one operation with its plan", f"/api/v1/operations/{ids['operation']}/", {}),
    ]
    return lists, reads


def time_endpoints(requests, ids, out):
    client, raw = Client(), viewer_token()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    lists, reads = scenarios(ids)
    out(
        f"\n{requests} requests each after 3 warm-ups, through Django's test client with a viewer's token "
        f"(server time in-process: middleware, token, role, rate limit in Redis, view, JSON); wall time, and the "
        f"CPU time of the request's thread (on SQLite it includes the database's work; it does not count the "
        f"time other processes on the machine take)"
    )
    out("| endpoint | rows | p50 ms | p95 ms | CPU p50 ms | CPU p95 ms |\n|---|---|---|---|---|---|")
    worst, worst_cpu = 0.0, 0.0
    for group, items in (("list", lists), ("read", reads)):
        for label, url, params in items:
            for _ in range(3):
                response = client.get(url, params, **headers)
                assert response.status_code == 200, (url, response.content[:300])
            samples, cpu = [], []
            for _ in range(requests):
                start, start_cpu = time.perf_counter(), time.thread_time()
                response = client.get(url, params, **headers)
                samples.append((time.perf_counter() - start) * 1000)
                cpu.append((time.thread_time() - start_cpu) * 1000)
                assert response.status_code == 200
            body = json.loads(response.content)
            rows = (
                len(body["results"])
                if isinstance(body, dict) and "results" in body
                else (len(body) if isinstance(body, list) else "")
            )
            p95, cpu95 = percentile(samples, 95), percentile(cpu, 95)
            if group == "list":
                worst, worst_cpu = max(worst, p95), max(worst_cpu, cpu95)
            out(
                f"| {label} ({group}) | {rows} | {statistics.median(samples):.1f} | {p95:.1f} | "
                f"{statistics.median(cpu):.1f} | {cpu95:.1f} |"
            )
    out(
        f"\nslowest list endpoint p95: {worst:.1f} ms wall, {worst_cpu:.1f} ms CPU (target: under {TARGET_P95_MS} ms): "
        + ("met" if worst < TARGET_P95_MS else "NOT MET")
        + f"; load average at the end {os.getloadavg()[0]:.2f}"
    )
    return worst


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def prepare_database():
    if connection.vendor == "sqlite":
        with connection.cursor() as cur:  # a bulk load into a scratch file: no fsync
            cur.execute("PRAGMA synchronous=OFF")
    settings.DEBUG = False  # no query log: production's cost per request
    settings.ALLOWED_HOSTS = ["testserver", *settings.ALLOWED_HOSTS]
    settings.API_THROTTLE_RATES = {"read": "1000000/min", "write": "1000/min"}  # counted, never in the way


def publish_latest_state():
    from apps.monitoring.tests import synthetic

    synthetic.publish(
        list(ProxySQLNode.objects.values_list("id", flat=True)),
        list(Server.objects.values_list("id", flat=True)),
        trouble_every=50,
    )
