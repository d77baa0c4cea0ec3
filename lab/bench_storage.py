"""Monitoring history storage: bytes per ProxySQL node for the whole retention, rollup CPU, chart p95.

1. N lab doubles of the ProxySQL admin interface seeded like bin/bench-monitoring's (9 pool rows per node,
   lab traffic), a private Redis, a scratch database (var/bench/storage.sqlite3, or --database-url).
2. One hour of polls through the product's poller (pollers.proxysql_round), at the poll interval on the
   pollers' clock (`now`), paced --pace seconds of real time apart so that the doubles' counters move.
3. The rollups of that hour (rollups.rollup per table, raw -> minute -> hour), CPU timed.
4. The retention filled for --retention-nodes nodes with copies of those rows (raw 24 h, 1-minute rollups
   14 days, 1-hour rollups 396 days at the retention settings), then every monitoring table's bytes,
   indexes included (SQLite dbstat, InnoDB information_schema after ANALYZE TABLE): bytes per node.
5. The ProxySQL node charts (charts.chart) at each range over that full-size history: p50 / p95.

It uses only the product's poller, rollups and charts and the tables of the monitoring app, so the same
file measures an older schema too (copy it into that checkout).
"""

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from lab.bench_monitoring import (
    BENCH_DIR,
    BENCH_ENV,
    REPO,
    Lab,
    Layout,
    closed_port,
    database_url,
    database_version,
    log,
    machine,
    mib,
    pct,
    pick_ports,
    port_free,
    reset_database,
    start_doubles,
    start_redis,
)

DEFAULT_DB = BENCH_DIR / "storage.sqlite3"
RANGES = ("1h", "6h", "24h", "7d", "30d")
CHARTS = ("queries", "connections", "latency")


def parse_args(argv):
    ap = argparse.ArgumentParser(
        prog="bin/bench-storage", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=10, help="ProxySQL nodes polled (lab double endpoints)")
    ap.add_argument("--interval", type=float, default=5.0, help="poll interval on the pollers' clock (s)")
    ap.add_argument("--pace", type=float, default=0.2, help="real seconds between two rounds")
    ap.add_argument("--retention-nodes", type=int, default=2, help="nodes whose full retention is written")
    ap.add_argument("--chart-requests", type=int, default=20, help="timed requests per chart and range")
    ap.add_argument(
        "--retention-backends",
        type=int,
        default=2,
        help="backends whose full retention is written (synthetic Galera figures, noisy on purpose)",
    )
    ap.add_argument("--backend-interval", type=float, default=1.0, help="backend poll interval (the default: 1 s)")
    ap.add_argument(
        "--no-chunks", action="store_true", help="leave every row a row (the storage before history chunks)"
    )
    ap.add_argument("--double-base-port", type=int, default=17000)
    ap.add_argument(
        "--database-url",
        help="a MariaDB database whose name contains 'bench' (dropped and recreated), "
        "or sqlite:///path (default var/bench/storage.sqlite3)",
    )
    args = ap.parse_args(argv)
    args.sqlite_path = DEFAULT_DB
    return args


def sample_models():
    from django.apps import apps

    return [
        m
        for m in apps.get_app_config("monitoring").get_models()
        if {"ts", "resolution"} <= {f.name for f in m._meta.fields} and m._meta.model_name != "historychunk"
    ]


def apps_models():
    from django.apps import apps

    return apps.get_app_config("monitoring").get_models()


def owner_of(model):
    return "node_id" if any(f.attname == "node_id" for f in model._meta.fields) else "server_id"


def table_bytes():
    """{table: bytes} of every monitoring table, indexes included."""
    from django.apps import apps
    from django.db import connection

    out = {}
    with connection.cursor() as cur:
        for model in apps.get_app_config("monitoring").get_models():
            table = model._meta.db_table
            if connection.vendor == "sqlite":
                cur.execute(
                    "SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN"
                    " (SELECT name FROM sqlite_master WHERE tbl_name = %s)",
                    [table],
                )
            else:
                cur.execute(f"ANALYZE TABLE {table}")
                cur.fetchall()
                cur.execute(
                    "SELECT data_length + index_length FROM information_schema.TABLES"
                    " WHERE table_schema = DATABASE() AND table_name = %s",
                    [table],
                )
            out[table] = int(cur.fetchone()[0])
    return out


def records(model, node_id):
    """{resolution: [[row values...] per record]}: a record is one owner's rows at one ts (a poll or bucket)."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    names = [f.attname for f in fields]
    out = defaultdict(dict)
    for row in model.objects.filter(**{owner_of(model): node_id}).order_by("ts").values_list(*names):
        values = dict(zip(names, row))
        out[values["resolution"]].setdefault(values["ts"], []).append(values)
    return {res: list(by_ts.values()) for res, by_ts in out.items()}


def fill_retention(models, source_node, nodes, end, interval):
    """Copies of the source node's records for every node: raw over the raw retention, minute and hour
    rollups over theirs. Returns {resolution: records per node}."""
    from datetime import datetime, timezone

    from django.conf import settings
    from django.db import transaction

    from apps.monitoring import pollers

    spans = {
        0: (settings.MONITOR_RETENTION_RAW_H * 3600, interval),
        60: (settings.MONITOR_RETENTION_MINUTE_D * 86400, 60),
        3600: (settings.MONITOR_RETENTION_HOUR_D * 86400, 3600),
    }
    counts = {}
    for model in models:
        got = records(model, source_node)
        if not got:
            continue
        table = pollers._table(model)
        owner = owner_of(model)
        model.objects.all().delete()
        for resolution, recs in got.items():
            span, step = spans[resolution]
            n = int(span // step)
            counts[resolution] = n
            for node in nodes:
                rows = []
                for k in range(n):
                    ts = datetime.fromtimestamp(end - (n - k) * step, tz=timezone.utc)
                    for values in recs[k % len(recs)]:
                        rows.append(table.row(**{**values, owner: node, "ts": ts}))
                    if len(rows) >= 20000:
                        with transaction.atomic():
                            table.insert(rows)
                        rows = []
                with transaction.atomic():
                    table.insert(rows)
    return counts


def fill_backends(server_ids, end, interval):
    """The retention of BackendSample rows for these backends: a healthy Galera node's figures with noise
    where a real one moves (flow control paused, receive queue), so deflate gets no easy ride. Returns
    {resolution: records per backend}."""
    from datetime import datetime, timezone

    from django.conf import settings
    from django.db import transaction

    from apps.monitoring import pollers
    from apps.monitoring.models import BackendSample

    table = pollers._table(BackendSample)
    spans = {
        0: (settings.MONITOR_RETENTION_RAW_H * 3600, interval),
        60: (settings.MONITOR_RETENTION_MINUTE_D * 86400, 60),
        3600: (settings.MONITOR_RETENTION_HOUR_D * 86400, 3600),
    }
    counts = {}
    for resolution, (span, step) in spans.items():
        n = int(span // step)
        counts[resolution] = n
        for server_id in server_ids:
            rows = []
            for k in range(n):
                noise = (k * 2654435761 + server_id) % 1000
                fc = noise / 1e6 if noise % 5 else 0.0
                values = dict(
                    server_id=server_id,
                    ts=datetime.fromtimestamp(end - (n - k) * step, tz=timezone.utc),
                    resolution=resolution,
                    local_state=4,
                    primary=True,
                    ready=True,
                    cluster_size=3,
                    recv_queue=noise % 3,
                    flow_control_paused=fc,
                    desync=False,
                    reject_queries=False,
                    read_only=False,
                )
                if resolution:
                    values.update(
                        cluster_size_min=3,
                        cluster_size_max=3,
                        flow_control_paused_min=0.0,
                        flow_control_paused_max=fc * 3,
                    )
                rows.append(table.row(**values))
                if len(rows) >= 20000:
                    with transaction.atomic():
                        table.insert(rows)
                    rows = []
            with transaction.atomic():
                table.insert(rows)
    return counts


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    command = "bin/bench-storage " + " ".join(argv) if argv else "bin/bench-storage"
    url = database_url(args)
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="storage-run-", dir=BENCH_DIR))
    lab = Lab(workdir)
    try:
        return run(args, lab, url, command)
    finally:
        lab.stop_all()
        shutil.rmtree(workdir / "redis", ignore_errors=True)


def run(args, lab, url, command):
    redis_url = start_redis(lab)
    os.environ.update(
        {
            **BENCH_ENV,
            "DATABASE_URL": url,
            "REDIS_URL": redis_url,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings",
            "LOG_LEVEL": "WARNING",
        }
    )
    sys.path.insert(0, str(REPO))
    node_ports = pick_ports(args.double_base_port, args.nodes, port_free)
    backend_ports = pick_ports(20000, 6 * ((args.nodes + 1) // 2), closed_port, avoid=set(node_ports))
    layout = Layout(args.nodes, args.interval, node_ports, backend_ports)
    start_doubles(lab, node_ports, 1)
    layout.seed_doubles()
    reset_database(url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    layout.create_inventory()

    from datetime import datetime, timezone

    from apps.fleet.models import ProxySQLNode
    from apps.monitoring import charts, pollers, rollups

    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    rounds = int(3600 / args.interval)
    start = (int(time.time()) // 3600 - 2) * 3600
    log(f"polling {args.nodes} nodes: {rounds} rounds (one hour on the pollers' clock), {args.pace}s apart")
    poll_cpu = 0.0
    for i in range(rounds):
        t = time.monotonic()
        c = time.process_time()
        pollers.proxysql_round(nodes, now=start + i * args.interval)
        poll_cpu += time.process_time() - c
        time.sleep(max(0.0, args.pace - (time.monotonic() - t)))
    raw_bytes = table_bytes()
    models = sample_models()
    cpu = {}
    for source, target, now in ((0, 60, start + 3600), (60, 3600, start + 7200)):
        c, w = time.process_time(), time.monotonic()
        for model in models:
            rollups.rollup(model, source, target, now=datetime.fromtimestamp(now, tz=timezone.utc))
        cpu[target] = (time.process_time() - c, time.monotonic() - w)

    end = start + 7200
    keep = [n.pk for n in nodes[: args.retention_nodes]]
    counts = fill_retention(models, nodes[0].pk, keep, end, args.interval)
    from apps.fleet.models import Server
    from apps.monitoring.models import RollupMark

    backends = list(Server.objects.order_by("pk").values_list("pk", flat=True)[: args.retention_backends])
    backend_counts = fill_backends(backends, end, args.backend_interval)
    for target, until in ((60, end - 3600), (3600, end)):  # as the rollups would have left them
        RollupMark.objects.update_or_create(
            name=f"backendsample:{target}", defaults={"rolled_until": datetime.fromtimestamp(until, tz=timezone.utc)}
        )
    compacted = {}  # rows the rollups have read become history chunks (apps/monitoring/chunks.py)
    for family in () if args.no_chunks else ("PROXYSQL", "BACKEND"):
        c = time.process_time()
        n = rollups.chunks.compact(
            datetime.fromtimestamp(end, tz=timezone.utc), max_spans=10**6, families=[getattr(rollups.chunks, family)]
        )
        compacted[family] = (n, time.process_time() - c)
    from django.db import connection

    left = None
    if connection.vendor == "mysql":
        left = sum(table_bytes().values())
        # InnoDB keeps the pages the compaction's deletes freed until new rows reuse them (in steady state
        # the row tables hold the newest hour or two); OPTIMIZE gives what the history itself takes.
        with connection.cursor() as cur:
            for model in apps_models():
                cur.execute(f"OPTIMIZE TABLE {model._meta.db_table}")
                cur.fetchall()
    sizes = table_bytes()
    backend_tables = {"monitoring_backendsample", "monitoring_backendchunk"}
    per_backend = sum(b for t, b in sizes.items() if t in backend_tables) / max(len(backends), 1)
    sizes = {t: b for t, b in sizes.items() if t not in backend_tables}
    per_node = sum(sizes.values()) / len(keep)

    timings = {}
    node = nodes[0]
    for range_key in RANGES:
        for name in CHARTS:
            times = []
            for _ in range(args.chart_requests):
                t = time.perf_counter()
                charts.chart("proxysql", name, node, range_key, now=end)
                times.append(time.perf_counter() - t)
            timings[(range_key, name)] = times

    info = machine()
    out = [
        f"Command: `{command}`",
        "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), Python {info['python']}, Django {info['django']}, "
        f"{database_version()}. Run {time.strftime('%Y-%m-%d %H:%M %Z')}.",
        "",
        f"Polled: {args.nodes} lab doubles (9 pool rows each, lab traffic), {rounds} rounds {args.interval:g} s "
        f"apart on the pollers' clock; poll CPU {poll_cpu / rounds / args.nodes * 1000:.2f} ms per node poll "
        f"(this process: poller and database client).",
        "",
        "Raw polls, one hour: "
        + ", ".join(f"{t} {mib(b):.2f} MiB" for t, b in sorted(raw_bytes.items()) if b)
        + f" = {mib(sum(raw_bytes.values()) / args.nodes * 24):.1f} MiB per node per day.",
        "",
        f"Rollup CPU (this process; SQLite's work included, MariaDB's server not): raw -> 1 minute "
        f"{cpu[60][0]:.2f} s CPU ({cpu[60][1]:.2f} s wall) for 60 buckets x {args.nodes} nodes = "
        f"{cpu[60][0] / 60 / args.nodes * 1000:.1f} s per minute of history for 1,000 nodes "
        f"({cpu[60][0] / 60 / args.nodes * 1000 / 60:.2f} core); 1 minute -> 1 hour {cpu[3600][0]:.2f} s CPU "
        f"for {args.nodes} nodes = {cpu[3600][0] / args.nodes * 1000:.1f} s per hour for 1,000 nodes.",
        "",
        (
            "History chunks: none (--no-chunks)"
            if args.no_chunks
            else "History chunks: "
            + "; ".join(
                f"{family.lower()}: {n:,} records compacted in {cpu_s:.2f} s CPU = {cpu_s / max(n, 1) * 1e6:.0f} us "
                f"per record"
                for family, (n, cpu_s) in compacted.items()
            )
            + f"; an hour of history (raw, 60 minute and 1 hour buckets) for 1,000 nodes: "
            f"{compacted['PROXYSQL'][1] / max(compacted['PROXYSQL'][0], 1) * 1000 * (3600 / args.interval + 61):.1f} s CPU, "
            f"for 3,000 backends: "
            f"{compacted['BACKEND'][1] / max(compacted['BACKEND'][0], 1) * 3000 * (3600 / args.backend_interval + 61):.1f} s CPU."
        ),
        "",
        f"Retention filled for {len(keep)} nodes: "
        + ", ".join(f"{k} s: {v:,} records" for k, v in sorted(counts.items()))
        + " per node (copies of the polled hour's records).",
        "",
        "| table | MiB for the retention, per node |",
        "|---|---|",
    ]
    out += [f"| {t} | {mib(b / len(keep)):.2f} |" for t, b in sorted(sizes.items()) if b]
    out += [
        f"| **all** | **{mib(per_node):.2f}** MiB per node = **{per_node * 1000 / (1 << 30):.1f} GiB for 1,000 nodes** |",
        "",
        (
            f"Every monitoring table before OPTIMIZE (nodes and backends): {mib(left):.1f} MiB, after: "
            f"{mib(sum(sizes.values()) + per_backend * len(backends)):.1f} MiB."
            if left is not None
            else ""
        ),
        "",
        f"Backends: {len(backends)} filled for the retention at {args.backend_interval:g} s ("
        + ", ".join(f"{k} s: {v:,} records" for k, v in sorted(backend_counts.items()))
        + " per backend): "
        f"**{mib(per_backend):.2f} MiB per backend** = **{per_backend * 3000 / (1 << 30):.1f} GiB for 3,000 backends**.",
        "",
        "| chart | " + " | ".join(RANGES) + " |",
        "|---|" + "---|" * len(RANGES),
    ]
    for name in CHARTS:
        out.append(
            f"| {name} (p50 / p95 ms) | "
            + " | ".join(
                f"{pct(timings[(r, name)], 0.5) * 1000:.0f} / {pct(timings[(r, name)], 0.95) * 1000:.0f}"
                for r in RANGES
            )
            + " |"
        )
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
