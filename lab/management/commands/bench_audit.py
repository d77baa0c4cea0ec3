"""Benchmark of the audit review at a million events.

    bin/bench-audit                  (DATABASE_URL=sqlite:///var/bench/audit.sqlite3, migrated)

Fills an empty scratch database with --events realistic events (lab/bench_audit.py: bulk inserts with
the hash chain, search text and tokens computed), then times the review page in-process (Django's test
client: the whole request through middleware, view and template, no network) under several filters and
free-text searches, --requests times each after a warm-up, and prints p50/p95; then the incident view,
a filtered CSV export, a full chain verification and a retention run. Prints the machine. Refuses a
database whose name does not contain "bench".
"""

import os
import platform
import statistics
import time
from datetime import timedelta

import psutil
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from lab import bench_audit as bench
from apps.audit.models import AuditEvent, AuditSearchToken
from apps.audit.services import Progress, archive_old_events, chain_start, verify_some
from apps.fleet.models import Cluster

FMT = "%Y-%m-%dT%H:%M:%S"


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem = next((int(line.split()[1]) // 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    with connection.cursor() as cur:
        cur.execute("SELECT sqlite_version()" if connection.vendor == "sqlite" else "SELECT VERSION()")
        version = cur.fetchone()[0]
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem} MiB RAM, {platform.platform(terse=True)}, Python "
        f"{platform.python_version()}, Django database {connection.vendor} {version}, "
        f"load average {os.getloadavg()[0]:.1f} at the start"
    )


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


class Command(BaseCommand):
    help = "Fill a scratch database with a million audit events and time the review page."

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=1_000_000)
        parser.add_argument("--requests", type=int, default=30, help="timed requests per scenario (after 3 warm-ups)")
        parser.add_argument("--skip-retention", action="store_true")
        parser.add_argument(
            "--pages-only", action="store_true", help="time the pages only (no export, verify, retention)"
        )

    def handle(self, events, requests, skip_retention, pages_only, **options):
        name = str(settings.DATABASES["default"]["NAME"])
        if "bench" not in name:
            raise CommandError(
                f"{name} does not look like a scratch database (its name has no 'bench'); "
                "set DATABASE_URL, e.g. sqlite:///var/bench/audit.sqlite3"
            )
        settings.ALLOWED_HOSTS = ["testserver", *settings.ALLOWED_HOSTS]
        settings.AUDIT_ARCHIVE_DIR = settings.VAR_DIR / "bench" / "audit-archive"  # never the real archive
        self.stdout.write(f"machine: {machine()}")
        self.fill(events)
        client = self.client()
        self.pages(client, requests)
        if not pages_only:
            self.once(client, skip_retention)

    def fill(self, events):
        have = AuditEvent.objects.count()
        if have:
            self.stdout.write(f"reusing the {have:,} events already there (empty the database to refill)")
        else:
            if connection.vendor == "sqlite":
                with connection.cursor() as cur:  # a bulk load into a scratch file: no fsync, a big page cache
                    cur.execute("PRAGMA synchronous=OFF")
                    cur.execute("PRAGMA cache_size=-1000000")
            seconds, tokens = bench.generate(
                events,
                progress=lambda n, t: self.stderr.write(f"  {n:,} events in {t:.0f} s") if n % 100_000 == 0 else None,
            )
            self.stdout.write(
                f"inserted {events:,} events ({tokens:,} search tokens) in {seconds:.0f} s: "
                f"{events / seconds:,.0f} events/s, hash chain, search text and tokens included"
            )
            if connection.vendor == "sqlite":  # back to the product's setting; no ANALYZE (Django never runs it)
                with connection.cursor() as cur:
                    cur.execute("PRAGMA synchronous=NORMAL")
        for i in range(40):
            cid, cname = bench._cluster(i)
            Cluster.objects.update_or_create(
                pk=cid, defaults={"name": cname, "writer_hostgroup": 100, "reader_hostgroup": 101}
            )
        if connection.vendor == "sqlite":
            size = os.path.getsize(settings.DATABASES["default"]["NAME"]) / 2**20
            self.stdout.write(f"database file {size:,.0f} MiB; {AuditSearchToken.objects.count():,} token rows")

    def client(self):
        user, _ = get_user_model().objects.get_or_create(username="bench-viewer")
        user.groups.add(Group.objects.get_or_create(name="viewer")[0])
        client = Client()
        client.force_login(user)
        return client

    def time(self, client, url, params, n):
        for _ in range(3):
            assert client.get(url, params).status_code == 200
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            response = client.get(url, params)
            samples.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200
        return samples, response

    def pages(self, client, n):
        newest = AuditEvent.objects.order_by("-id").values_list("created_at", flat=True).first()
        middle = (
            AuditEvent.objects.filter(
                id__lte=AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() // 2
            )
            .order_by("-id")
            .values_list("id", "created_at")
            .first()
        )
        day = {
            "start": (middle[1] - timedelta(hours=12)).strftime(FMT),
            "end": (middle[1] + timedelta(hours=12)).strftime(FMT),
        }
        scenarios = [
            ("newest 50, no filter", {}),
            ("cluster", {"cluster": 7}),
            ("actor + outcome", {"actor": "alice", "outcome": "refused"}),
            ("action (exact)", {"action": "switchover rolled back"}),
            ("last 7 days + outcome failure", {"range": "7d", "outcome": "failure"}),
            ("one day half a year back + cluster", {**day, "cluster": 12}),
            ("node/target contains an address", {"target": "10.2.7.3"}),
            ("a page in the middle of the log (keyset)", {"before": middle[0]}),
            ("search: a rare ticket (INC-48003)", {"q": "INC-48003"}),
            ("search: a common word (switchover)", {"q": "switchover"}),
            ("search: an address:port (10.2.7.3:3306)", {"q": "10.2.7.3:3306"}),
            ("search: two common words (alice refused)", {"q": "alice refused"}),
            ("search + cluster + last 30 days", {"q": "OFFLINE_SOFT", "cluster": 3, "range": "30d"}),
            ("search with no match", {"q": "no-such-thing"}),
        ]
        self.stdout.write(
            f"\nreview page, {n} requests each (server time in-process), newest event {newest:%Y-%m-%d %H:%M}"
        )
        self.stdout.write("| review page | rows | p50 ms | p95 ms |\n|---|---|---|---|")
        for label, params in scenarios:
            samples, response = self.time(client, reverse("audit:list"), params, n)
            rows = response.content.count(b"<tr data-event=")
            self.stdout.write(f"| {label} | {rows} | {statistics.median(samples):.1f} | {pct(samples, 95):.1f} |")
        end = newest + timedelta(seconds=1)
        for label, span in (("incident view, 1 h", timedelta(hours=1)), ("incident view, 7 days", timedelta(days=7))):
            samples, response = self.time(
                client,
                reverse("pages:incident"),
                {"cluster": 7, "start": (end - span).strftime(FMT), "end": end.strftime(FMT)},
                n,
            )
            count = response.content.count(b'<circle class="mark')
            self.stdout.write(
                f"| {label} ({count} events of the cluster) | | {statistics.median(samples):.1f} | "
                f"{pct(samples, 95):.1f} |"
            )

    def once(self, client, skip_retention):
        process = psutil.Process()
        rss = process.memory_info().rss
        start = time.perf_counter()
        response = client.get(reverse("audit:export_csv"), {"cluster": 7})
        size = rows = 0
        peak = rss
        for chunk in response.streaming_content:
            size += len(chunk)
            rows += 1
            if rows % 5000 == 0:
                peak = max(peak, process.memory_info().rss)
        seconds = time.perf_counter() - start
        self.stdout.write(
            f"\nCSV export of one cluster: {rows - 1:,} rows, {size / 2**20:.1f} MiB in {seconds:.1f} s "
            f"({(rows - 1) / seconds:,.0f} rows/s); memory grew by {(peak - rss) / 2**20:.0f} MiB"
        )
        start = time.perf_counter()
        progress = Progress(*chain_start())
        verify_some(progress)
        seconds = time.perf_counter() - start
        self.stdout.write(
            f"chain verification: {progress.checked:,} events in {seconds:.1f} s "
            f"({progress.checked / seconds:,.0f} events/s), broken: {progress.broken}"
        )
        if skip_retention:
            return
        oldest = AuditEvent.objects.order_by("id").values_list("created_at", flat=True).first()
        days = (timezone.now() - oldest).days - 5  # the oldest five days' worth
        start = time.perf_counter()
        archive = archive_old_events(days)
        seconds = time.perf_counter() - start
        if archive:
            self.stdout.write(
                f"retention: archived and removed {archive.count:,} events in {seconds:.1f} s "
                f"({os.path.getsize(archive.path) / 2**20:.1f} MiB gzip) to {archive.path}"
            )
