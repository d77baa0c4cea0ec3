"""Benchmark of the weekly fleet report at 1,000 ProxySQL nodes and 3,000 backends (bin/bench-reports).

A scratch database (var/bench/reports.sqlite3, or DATABASE_URL naming a database with "bench" in its name)
gets the fleet of lab/bench_monitoring.py (500 clusters x 2 ProxySQL nodes x 6 backends, written by
apps/monitoring/tests/synthetic.py) and a synthetic monitoring history: rollup rows at --resolution
(3600: hourly) over the report's week and the one before, and for the first --minute-clusters clusters
also 1-minute rows over the report's week (the product keeps both levels and the report reads the
finest; 1-minute rows for all 500 clusters, 130 M rows, are out of reach here, and a big fleet's report
reads only the hourly rows of the clusters it does not list). Trouble is spread over the
fleet so that the report has a worst-first order to show: one cluster in 7 loses a backend for a few
hours, one in 40 a ProxySQL node for an hour, one in 25 has connection errors, and the first 25 lose their
writer for 5-50 minutes (they rank worst; give them --minute-clusters 25 to read them as last week's
report would).

Then the product builds the weekly fleet report (apps.reports.services.build_report: history, charts,
HTML, archived) and renders its PDF (report_pdf, WeasyPrint); the build time, the PDF's size and pages,
and the report's own sizes are printed with the machine. Targets: under 60 s and under 5 MB.
"""

import argparse
import os
import random
import re
import sys
import time
import zlib
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_S, TARGET_MB = 60, 5
SEVERE = 25  # clusters whose writer goes away: the worst, which the report lists and details


def setup_django():
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")  # development keys: the scratch database holds nothing secret
    import django

    django.setup()


def fill(clusters, resolution, minute_clusters, span, out):
    from django.db import connection, transaction

    from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
    from apps.monitoring import pool as packed_pool
    from apps.monitoring.models import BackendSample, PoolSnapshot, ProxySQLSample
    from apps.monitoring.tests import synthetic

    if Cluster.objects.filter(name__startswith="fleet-").exists():
        out(
            f"reusing the history already there ({ProxySQLNode.objects.count():,} ProxySQL nodes, "
            f"{Server.objects.count():,} backends): delete {os.environ.get('DATABASE_URL', 'the database')} to refill"
        )
        return
    t0 = time.monotonic()
    cluster_ids, node_ids, server_ids = synthetic.fleet(clusters, prefix="fleet")
    rng = random.Random(11)
    start = int((span.start - timedelta(days=7)).timestamp())  # the week before too: the report compares
    end = int(span.end.timestamp())
    nodes_of, servers_of = {}, {}
    for pk, cid in ProxySQLNode.objects.filter(pk__in=node_ids).values_list("pk", "cluster_id"):
        nodes_of.setdefault(cid, []).append(pk)
    for pk, cid, host, port in Server.objects.filter(pk__in=server_ids).values_list(
        "pk", "cluster_id", "hostname", "port"
    ):
        servers_of.setdefault(cid, []).append((pk, host, port))
    members = {}
    for cid, hg, host, port in HostgroupMembership.objects.filter(server_id__in=server_ids).values_list(
        "server__cluster_id", "hostgroup_id", "server__hostname", "server__port"
    ):
        members.setdefault(cid, []).append((hg, host, port))
    rows, report_start = 0, int(span.start.timestamp())
    for i, cid in enumerate(cluster_ids):
        trouble = _trouble(rng, i, start, end, servers_of[cid], nodes_of[cid])
        endpoint_of = {(h, p): pk for pk, h, p in servers_of[cid]}
        px, be, pool = [], [], []  # pool: a PoolSnapshot per node and time (apps/monitoring/pool.py packs it)
        # every cluster: rows at --resolution over both weeks; the first --minute-clusters also 1-minute rows
        # over the report's week, as the product keeps both (rollups of rollups)
        levels = [(resolution, start)] + ([(60, report_start)] if i < minute_clusters and resolution != 60 else [])
        for res, ts in ((res, ts) for res, first in levels for ts in range(first - first % res, end, res)):
            dt = connection.ops.adapt_datetimefield_value(_dt(ts))
            down_servers = {pk for pk, _, _ in servers_of[cid] if _in(trouble["backend"], ts, res, pk)}
            errors = 2.5 if _in(trouble["errors"], ts, res, None) else 0.0
            for n, node in enumerate(nodes_of[cid]):
                if _in(trouble["node"], ts, res, node):
                    px.append((node, dt, res, False, None, None, None, 4, 0, 0, 16, 32000, None, None))
                    continue
                qps = 1800.0 + 300 * ((ts // 3600 + n) % 24 < 12)
                px.append((node, dt, res, True, qps, errors, 40.0, 4, 0, 0, 16, 32000, 12, 40))
                if ts < report_start:  # the week before: the ProxySQL figures only (all the report compares)
                    continue
                rows_of_pool = []
                for hg, host, port in members[cid]:
                    shunned = endpoint_of[(host, port)] in down_servers
                    rows_of_pool.append(
                        {
                            "hostgroup": hg,
                            "srv_host": host,
                            "srv_port": port,
                            "status": "SHUNNED" if shunned else "ONLINE",
                            "conn_used": 2,
                            "conn_free": 8,
                            "conn_err_ps": 2.5 if shunned else 0.0,
                            "queries_ps": 300.0,
                        }
                    )
                pool.append(packed_pool.snapshot(node, _dt(ts), rows_of_pool, res))
            if ts >= report_start:
                for pk, _, _ in servers_of[cid]:
                    be.append(
                        (pk, dt, res, False, None, None, None, 5, None)
                        if pk in down_servers
                        else (pk, dt, res, True, 4, True, True, 6, 0)
                    )
        with transaction.atomic(), connection.cursor() as cur:
            for model, columns, values in (
                (
                    ProxySQLSample,
                    "node_id, ts, resolution, reachable, questions_ps, conn_err_ps, prepared_ps,"
                    " mysql_threads, mirror_concurrency, mirror_queue_length, mirror_max_concurrency,"
                    " mirror_max_queue_length, conn_used, conn_free",
                    px,
                ),
                (
                    BackendSample,
                    'server_id, ts, resolution, reachable, local_state, "primary", ready, cluster_size, recv_queue',
                    be,
                ),
            ):
                if values:
                    marks = ", ".join(["%s"] * len(values[0]))
                    sql = f"INSERT INTO {model._meta.db_table} ({columns}) VALUES ({marks})"
                    if connection.vendor != "sqlite":
                        sql = sql.replace('"primary"', "`primary`")
                    for j in range(0, len(values), 5000):
                        cur.executemany(sql, values[j : j + 5000])
            PoolSnapshot.objects.bulk_create(pool, batch_size=2000)
        rows += len(px) + len(be) + len(pool)
        if (i + 1) % 50 == 0:
            out(f"  {i + 1} clusters, {rows:,} rows, {time.monotonic() - t0:.0f} s")
    Cluster.objects.filter(pk__in=cluster_ids).update(poll_interval_s=5)
    out(
        f"filled {clusters} clusters ({len(node_ids):,} ProxySQL nodes, {len(server_ids):,} backends): {rows:,} rows "
        f"(at {resolution} s; the first {minute_clusters} clusters also at 1 minute over the report's week) in "
        f"{time.monotonic() - t0:.0f} s"
    )


def _trouble(rng, i, start, end, servers, nodes):
    """{kind: [(from, to, thing)]}: what went wrong in cluster number i. The first SEVERE lose their writer
    for 5-50 minutes (the service is interrupted: they rank worst); one in 7 loses another backend for
    hours, one in 40 a ProxySQL node for an hour, one in 25 has connection errors; the rest: nothing."""
    out = {"backend": [], "node": [], "errors": []}
    week = end - 7 * 86400
    if i < SEVERE:
        t = rng.randrange(week, end - 3600)
        out["backend"].append((t, t + rng.randrange(300, 3000), servers[0][0]))  # synthetic.fleet: -0 is the writer
    if i % 7 == 3:
        t = rng.randrange(week, end - 6 * 3600)
        out["backend"].append((t, t + rng.choice([1, 2, 3, 5]) * 3600, rng.choice(servers[1:])[0]))
    if i % 40 == 5:
        t = rng.randrange(week, end - 3600)
        out["node"].append((t, t + 3600, rng.choice(nodes)))
    if i % 25 == 7:
        t = rng.randrange(start, end - 7200)
        out["errors"].append((t, t + 7200, None))
    return out


def _in(spans, ts, res, thing):
    """Whether a row [ts, ts + res) overlaps one of the spans of `thing` (rollups keep the worst)."""
    return any(
        a < ts + max(res, 1) and ts < b and (thing is None or what is None or what == thing) for a, b, what in spans
    )


def _dt(ts):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


def pdf_pages(pdf):
    """Pages of a PDF: its /Type /Page objects, also those inside compressed object streams."""
    page = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")
    count = len(page.findall(pdf))
    for stream in re.finditer(rb"stream\r?\n(.*?)endstream", pdf, re.DOTALL):
        try:
            count += len(page.findall(zlib.decompress(stream.group(1))))
        except zlib.error:
            pass
    return count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clusters", type=int, default=500, help="clusters of 2 ProxySQL nodes and 6 backends")
    parser.add_argument("--resolution", type=int, default=3600, choices=[60, 3600], help="seconds per history row")
    parser.add_argument(
        "--minute-clusters",
        type=int,
        default=0,
        help="clusters given 1-minute rows for the report's week (the others: --resolution)",
    )
    parser.add_argument(
        "--pdf", default=str(REPO / "var" / "bench" / "fleet-report.pdf"), help="where to write the PDF"
    )
    args = parser.parse_args(argv)
    setup_django()
    from django.conf import settings
    from django.db import connection

    from lab.bench_digests import machine
    from apps.audit.actor import Actor
    from apps.reports import periods, services
    from apps.reports.choices import Period

    name = str(settings.DATABASES["default"]["NAME"])
    if "bench" not in name:
        raise SystemExit(
            f"{name} does not look like a scratch database (its name has no 'bench'): run bin/bench-reports"
        )
    print(f"machine: {machine()}")
    print(f"database: {connection.vendor} {name}")
    span = periods.last_complete(Period.WEEKLY)
    fill(args.clusters, args.resolution, args.minute_clusters, span, print)

    t0, c0 = time.monotonic(), time.process_time()
    report = services.build_report(None, Period.WEEKLY, span, actor=Actor.system())
    build_s, build_cpu = time.monotonic() - t0, time.process_time() - c0
    t1 = time.monotonic()
    pdf = services.report_pdf(report)
    pdf_s = time.monotonic() - t1
    Path(args.pdf).parent.mkdir(parents=True, exist_ok=True)
    Path(args.pdf).write_bytes(pdf)
    pages = pdf_pages(pdf)
    charts = report.charts.count()
    html_kb = len(report.html.encode()) / 1024
    import json

    data_kb = len(json.dumps(report.data, default=str).encode()) / 1024
    print(f"weekly fleet report of {span.start:%Y-%m-%d} to {span.end:%Y-%m-%d}: {report.headline}")
    print(
        f"  build (history, charts, HTML, archived): {build_s:.1f} s wall, {build_cpu:.1f} s CPU"
        f" (target under {TARGET_S} s) -- {'met' if build_s < TARGET_S else 'NOT met'}"
    )
    print(
        f"  PDF: {len(pdf) / 1024 / 1024:.2f} MB, about {pages} pages, rendered in {pdf_s:.1f} s"
        f" (target under {TARGET_MB} MB) -- {'met' if len(pdf) < TARGET_MB * 1024 * 1024 else 'NOT met'}"
    )
    print(
        f"  build + PDF: {build_s + pdf_s:.1f} s; e-mail HTML {html_kb:,.0f} kB, {charts} charts, archived data"
        f" {data_kb:,.0f} kB; written to {args.pdf}"
    )


if __name__ == "__main__":
    main()
