"""Benchmark of the query digest page with 100,000 distinct digests (`manage.py bench_digests`).

It works in its own database (SQLite: var/bench_digests.sqlite3; MariaDB/MySQL: `test_controlplane_bench_digests` on the
configured server), made with Django's test-database machinery and kept between runs (--refill to
start again), so it never touches the console's data.

The history it writes is shaped like a real fleet's: one cluster behind --nodes ProxySQL nodes, polled
every 30 s (with jitter) for the last 24 h (raw rows), 5-minute rows for the --days before (what the
5-minute retention keeps), then the product's own rollups (5 min -> hour -> day). Digests:
- a core of --core digests (the application's queries): Zipf-distributed rates summing to about
  6,000 executions/s per node, each seen at every poll;
- a long tail (the rest, up to --digests): reports, ad-hoc and generated SQL, each running a few times a
  day at most (daily rates log-uniform between 0.02 and 5), every one seen at least once in the history.
--stress makes every tail digest run in the last 24 h (about 100,000 digests ranked by a 24 h window).

Then it times GET /digests/ through Django's test client (full middleware, login, template), for a
list of scenarios (windows, sorts, filters, search, paging, a digest's detail and chart), --requests
times each, and prints p50/p95 per scenario and over all, with the machine it ran on.
"""

import inspect
import math
import os
import platform
import random
import time

from django.conf import settings
from django.db import connection, transaction

from apps.digests import search, services
from apps.digests.models import (
    DAY,
    FIVE_MINUTES,
    HOUR,
    RAW,
    SPAN_HOURS,
    Digest,
    DigestNodeState,
    DigestPoll,
    DigestSource,
    DigestSpan,
    DigestStat,
    DigestWord,
    DigestWordUse,
)

POLL_S = 30
TABLES = [
    "orders",
    "order_items",
    "customers",
    "payments",
    "shipments",
    "invoices",
    "products",
    "stock",
    "carts",
    "sessions",
    "audit_log",
    "coupons",
    "reviews",
    "addresses",
    "refunds",
    "events",
]
COLUMNS = ["id", "status", "created_at", "customer_id", "total", "currency", "updated_at", "sku", "qty", "note"]


def machine():
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    ram = "?"
    try:
        with open("/proc/meminfo") as f:
            kb = int(f.readline().split()[1])
            ram = f"{kb / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    db = settings.DATABASES["default"]
    if connection.vendor == "sqlite":
        import sqlite3

        version = sqlite3.sqlite_version
    else:
        with connection.cursor() as cur:
            cur.execute("SELECT VERSION()")
            version = cur.fetchone()[0]
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} CPUs (nproc), {cpu}, {ram} RAM; Python {platform.python_version()}; "
        f"database {connection.vendor} {version} ({db['ENGINE'].rsplit('.', 1)[-1]}); load average {load}"
    )


def digest_text(rng, i):
    table = rng.choice(TABLES) + (f"_{i % 97}" if i % 3 == 0 else "")
    cols = ", ".join(rng.sample(COLUMNS, rng.randint(1, 6)))
    kind = rng.random()
    if kind < 0.55:
        where = " AND ".join(f"{c} = ?" for c in rng.sample(COLUMNS, rng.randint(1, 4)))
        text = f"SELECT {cols} FROM {table} WHERE {where}"
        if rng.random() < 0.4:
            text += f" ORDER BY {rng.choice(COLUMNS)} DESC LIMIT ?"
        if rng.random() < 0.2:
            other = rng.choice(TABLES)
            text = (
                f"SELECT {cols} FROM {table} t JOIN {other} o ON o.{rng.choice(COLUMNS)} = t.id "
                f"WHERE t.{rng.choice(COLUMNS)} IN (?,?,?,...) AND o.status = ? GROUP BY t.id"
            )
    elif kind < 0.75:
        text = f"UPDATE {table} SET {rng.choice(COLUMNS)} = ?, updated_at = NOW() WHERE id = ?"
    elif kind < 0.9:
        text = f"INSERT INTO {table} ({cols}) VALUES ({','.join('?' * (cols.count(',') + 1))})"
    else:
        text = f"DELETE FROM {table} WHERE {rng.choice(COLUMNS)} < ? LIMIT ?"
    return f"{text} /* q{i} */" if i >= 400 else text


class Filler:
    def __init__(self, digests, nodes, core, days, stress, seed=7, out=print):
        self.n, self.nodes_n, self.core, self.days, self.stress = digests, nodes, core, days, stress
        self.rng = random.Random(seed)
        self.out = out
        self.rows = 0

    def run(self, now):
        from apps.fleet.models import Cluster, ProxySQLNode
        from apps.monitoring.models import RollupMark

        t0 = time.monotonic()
        rng = self.rng
        cluster = Cluster.objects.create(name="bench", writer_hostgroup=100, reader_hostgroup=101)
        nodes = [
            ProxySQLNode.objects.create(
                cluster=cluster,
                name=f"proxysql-{i + 1}",
                admin_host="127.0.0.1",
                admin_port=36000 + i,
                admin_user="bench",
            )
            for i in range(self.nodes_n)
        ]
        self.node_ids = [n.pk for n in nodes]
        Digest.objects.bulk_create(
            [
                Digest(
                    digest=f"0x{rng.getrandbits(64):016X}",
                    digest_text=digest_text(rng, i),
                    first_polled_at=int(now - self.days * 86400),
                )
                for i in range(self.n)
            ],
            batch_size=5000,
        )
        ids = list(Digest.objects.order_by("pk").values_list("pk", flat=True))
        # Where each digest runs: writes on the writer hostgroup, reads on the reader; users and schemas.
        combos = [
            (100, "app", "shop"),
            (101, "app", "shop"),
            (101, "report", "shop"),
            (101, "report", "shop_archive"),
            (100, "batch", "shop"),
            (101, "app", "shop_archive"),
        ]
        self.source = {}
        for node in self.node_ids:
            for c in combos:
                s = DigestSource.objects.create(node_id=node, hostgroup=c[0], username=c[1], schemaname=c[2])
                self.source[(node, c)] = s.pk
        weights = [0.4, 0.3, 0.1, 0.05, 0.1, 0.05]
        self.digest_combo = [combos[rng.choices(range(len(combos)), weights)[0]] for _ in ids]
        self.ids = ids
        # Rates (executions per second per node) and mean latency (us).
        core = self.core
        z = sum(1 / (r**1.2) for r in range(1, core + 1))
        self.rate = [6000.0 / (r**1.2) / z for r in range(1, core + 1)]
        self.tail_daily = [math.exp(rng.uniform(math.log(0.02), math.log(5))) for _ in range(self.n - core)]
        self.latency = [math.exp(rng.gauss(math.log(400), 1.3)) for _ in ids]

        start_raw = (int(now) - 86400) // FIVE_MINUTES * FIVE_MINUTES
        start_old = start_raw - self.days * 86400
        self._old_history(start_old, start_raw)
        self._raw(start_raw, int(now))
        self.out(f"  wrote {self.rows:,} rows in {time.monotonic() - t0:.0f} s; rolling up with the product's rollups")
        for level in (FIVE_MINUTES, HOUR, DAY):
            RollupMark.objects.filter(name=f"digests:{level}").delete()
        # The 5-minute level already holds the older days: it starts where raw rows start.
        from datetime import datetime, timezone

        RollupMark.objects.create(
            name=f"digests:{FIVE_MINUTES}", rolled_until=datetime.fromtimestamp(start_raw, tz=timezone.utc)
        )
        t1 = time.monotonic()
        written = {}
        for level in (FIVE_MINUTES, HOUR, DAY):
            written[level] = services.rollup(level, now=now, max_buckets=10**6)
        self.out(f"  rollups wrote {written} in {time.monotonic() - t1:.0f} s")
        t2 = time.monotonic()
        end = services.refresh_span(now)
        self.out(
            f"  the {SPAN_HOURS}-hour span ending {time.strftime('%H:%M', time.gmtime(end))} UTC:"
            f" {DigestSpan.objects.filter(end_ts=end).count():,} digests in {time.monotonic() - t2:.1f} s"
        )
        t3, indexed = time.monotonic(), 0
        while batch := search.index_words():  # as the rollup task does, INDEX_BATCH digests a run
            indexed += batch
        self.out(
            f"  the search's word index: {indexed:,} digests, {DigestWord.objects.count():,} words,"
            f" {DigestWordUse.objects.count():,} (word, digest) rows in {time.monotonic() - t3:.1f} s"
        )
        for node in self.node_ids:
            DigestNodeState.objects.create(
                node_id=node, baseline_ts=now, last_poll_ts=now, last_ok_ts=now, digests=self.n, changed=self.core
            )
        return time.monotonic() - t0

    # -- rows --------------------------------------------------------------------------------------
    def _flush(self, stats, polls):
        stat, poll = DigestStat._meta.db_table, DigestPoll._meta.db_table
        with transaction.atomic(), connection.cursor() as cur:
            for i in range(0, len(stats), 20000):
                cur.executemany(
                    f"INSERT INTO {stat} (resolution, ts, source_id, digest_id, count_star, sum_time,"
                    f" min_time, max_time) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                    stats[i : i + 20000],
                )
            if polls:
                cur.executemany(
                    f"INSERT INTO {poll} (resolution, ts, node_id, polls_ok, polls_failed, stat_rows,"
                    f" interval_s) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    polls,
                )
        self.rows += len(stats)

    def _row(self, resolution, ts, node, i, count):
        rng = self.rng
        lat = self.latency[i]
        total = int(count * lat * rng.uniform(0.85, 1.2)) + count
        if count == 1:
            least = most = total
        elif rng.random() < 0.05:  # ProxySQL's cumulative max rose in this interval: the max is known
            least, most = None, int(lat * rng.uniform(3, 30))
        else:
            least = most = None
        src = self.source[(node, self.digest_combo[i])]
        return (resolution, ts, src, self.ids[i], count, total, least, most)

    def _tail_events(self, start, end, per_node_scale, every_digest=False):
        """{offset: [digest index]}: each tail digest's executions as a Poisson process (at least one
        each with every_digest)."""
        rng, span = self.rng, end - start
        events = {}
        for j, daily in enumerate(self.tail_daily):
            i = self.core + j
            k = _poisson(rng, daily * span / 86400 * per_node_scale)
            if every_digest:
                k = max(k, 1)
            for _ in range(k):
                events.setdefault(rng.random() * span, []).append(i)
        return events

    def _old_history(self, start, end):
        """5-minute rows for the days before the raw period (all the 5-minute retention keeps)."""
        rng = self.rng
        tail = self._tail_events(start, end, 1.0)
        by_bucket = {}
        for offset, idx in tail.items():
            by_bucket.setdefault(int(offset) // FIVE_MINUTES, []).extend(idx)
        # Every digest appears at least once in the history.
        seen = {i for idx in by_bucket.values() for i in idx}
        for i in range(self.core, self.n):
            if i not in seen:
                by_bucket.setdefault(rng.randrange((end - start) // FIVE_MINUTES), []).append(i)
        stats, polls = [], []
        for b in range((end - start) // FIVE_MINUTES):
            ts = start + b * FIVE_MINUTES
            for node in self.node_ids:
                for i, rate in enumerate(self.rate):
                    stats.append(
                        self._row(FIVE_MINUTES, ts, node, i, max(1, int(rng.gauss(rate * 300, math.sqrt(rate * 300)))))
                    )
                polls.append((FIVE_MINUTES, ts, node, 10, 0, 0, 300.0))
            merged = {}
            for i in by_bucket.get(b, []):
                node = self.node_ids[rng.randrange(len(self.node_ids))]
                merged[(node, i)] = merged.get((node, i), 0) + rng.randint(1, 3)
            stats += [self._row(FIVE_MINUTES, ts, node, i, c) for (node, i), c in merged.items()]
            if len(stats) > 200000:
                self._flush(stats, polls)
                stats, polls = [], []
        self._flush(stats, polls)

    def _raw(self, start, end):
        """One row per poll per changed digest for the last 24 h, polls every 30 s with jitter."""
        rng = self.rng
        tail = self._tail_events(start, end, 1.0, every_digest=self.stress)  # --stress: all run in the last 24 h
        offsets = sorted(tail)
        stats, polls, k = [], [], 0
        for node_n, node in enumerate(self.node_ids):
            ts = start + node_n * 7
            prev = ts - POLL_S
            k = 0
            while ts < end:
                interval = ts - prev
                for i, rate in enumerate(self.rate):
                    mean = rate * interval
                    stats.append(self._row(RAW, ts, node, i, max(1, int(rng.gauss(mean, math.sqrt(mean))))))
                merged = {}
                while k < len(offsets) and start + offsets[k] < ts:
                    for i in tail[offsets[k]]:
                        if (i * 7919 + int(offsets[k])) % len(self.node_ids) == node_n:  # each run on one node
                            merged[i] = merged.get(i, 0) + 1
                    k += 1
                stats += [self._row(RAW, ts, node, i, c) for i, c in merged.items()]
                polls.append((RAW, ts, node, 1, 0, len(self.rate) + len(merged), float(interval)))
                prev, ts = ts, ts + POLL_S + rng.randint(-2, 2)
                if len(stats) > 200000:
                    self._flush(stats, polls)
                    stats, polls = [], []
        self._flush(stats, polls)


def _poisson(rng, lam):
    if lam > 30:
        return max(0, int(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


def custom_window():
    """The query string of the custom window timed: 2.5 days, from 3 days ago."""
    day = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 3 * 86400))
    day_end = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(time.time() - 86400 + 1800))
    return f"window=custom&from={day}&to={day_end}"


def scenarios(node_id, digest_pk):
    return [
        ("default: last hour by total time", "/digests/"),
        ("last 5 min", "/digests/?window=5m"),
        ("last 24 h by total time", "/digests/?window=24h"),
        ("last 24 h by count", "/digests/?window=24h&sort=count"),
        ("last 24 h by average", "/digests/?window=24h&sort=avg"),
        ("last 24 h by max", "/digests/?window=24h&sort=max"),
        ("last 24 h ascending by count", "/digests/?window=24h&sort=count&dir=asc"),
        ("last 24 h, one node", f"/digests/?window=24h&node={node_id}"),
        ("last 24 h, hostgroup 101, user report", "/digests/?window=24h&hostgroup=101&user=report"),
        ("last 24 h, search 'orders'", "/digests/?window=24h&q=orders"),
        ("last 24 h, search 'status = ?' (most texts)", "/digests/?window=24h&q=status+%3D+%3F"),
        ("last 24 h, search with no match", "/digests/?window=24h&q=no+such+text"),
        ("last 24 h, page 200", "/digests/?window=24h&page=200"),
        ("custom 2.5 days, 3 days ago", f"/digests/?{custom_window()}"),
        (
            "htmx partial, last 24 h by max",
            "/digests/?window=24h&sort=max",
            {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "digest-results"},
        ),
        ("digest detail, last 24 h", f"/digests/{digest_pk}/?window=24h"),
        ("digest chart JSON, last 24 h", f"/digests/{digest_pk}/chart.json?window=24h"),
    ]


def turn_scenarios():
    """The pages timed in turns (--turns): the searches, broad to empty, first and later pages, the long window."""
    return [
        ("last 24 h, search 'orders'", "/digests/?window=24h&q=orders"),
        ("last 24 h, search 'status = ?' (most texts)", "/digests/?window=24h&q=status+%3D+%3F"),
        ("  the same, page 20", "/digests/?window=24h&q=status+%3D+%3F&page=20"),
        ("  the same, by count ascending", "/digests/?window=24h&q=status+%3D+%3F&sort=count&dir=asc"),
        ("last 24 h, search 'select' (most texts)", "/digests/?window=24h&q=select"),
        ("last 24 h, search with no match", "/digests/?window=24h&q=no+such+text"),
        ("last 24 h by total time", "/digests/?window=24h"),
        ("last 24 h, hostgroup 101, user report", "/digests/?window=24h&hostgroup=101&user=report"),
        ("custom 2.5 days, 3 days ago", f"/digests/?{custom_window()}"),
    ]


def viewer_client():
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.test import Client

    user, _ = get_user_model().objects.get_or_create(username="bench-viewer")
    user.groups.add(Group.objects.get_or_create(name="viewer")[0])
    client = Client()
    client.force_login(user)
    return client


def time_pages(requests, out=print):
    client = viewer_client()
    node_id = DigestSource.objects.values_list("node_id", flat=True).first()
    top = Digest.objects.order_by("pk").values_list("pk", flat=True).first()
    results, everything, everything_cpu = [], [], []
    # Wall time is the server time; on a machine shared with other work it stretches with the load, so
    # the CPU time of the request's thread is given too (on SQLite it includes the database's work; on
    # MariaDB the server's work runs in another process and only the wall time counts).
    out(f"  {'scenario':<45} {'wall p50':>9} {'wall p95':>9} {'cpu p50':>9} {'cpu p95':>9}   size")
    for scenario in scenarios(node_id, top):
        name, url, extra = (scenario + ({},))[:3]
        client.get(url, **extra)  # warm
        times, cpu = [], []
        for _ in range(requests):
            t, c = time.perf_counter(), time.thread_time()
            response = client.get(url, **extra)
            times.append((time.perf_counter() - t) * 1000)
            cpu.append((time.thread_time() - c) * 1000)
            assert response.status_code == 200, (url, response.status_code)
        everything += times
        everything_cpu += cpu
        results.append((name, _pct(times, 50), _pct(times, 95), _pct(cpu, 50), _pct(cpu, 95), len(response.content)))
        out(
            f"  {name:<45} {results[-1][1]:6.1f} ms {results[-1][2]:6.1f} ms {results[-1][3]:6.1f} ms"
            f" {results[-1][4]:6.1f} ms   {results[-1][5] // 1024} kB"
        )
    out(
        f"  {'all requests':<45} {_pct(everything, 50):6.1f} ms {_pct(everything, 95):6.1f} ms"
        f" {_pct(everything_cpu, 50):6.1f} ms {_pct(everything_cpu, 95):6.1f} ms"
        f"   (load average now {' / '.join(f'{x:.2f}' for x in os.getloadavg())})"
    )
    return results, everything


def _pct(values, p):
    values = sorted(values)
    if not values:
        return 0.0
    k = (len(values) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def counts():
    with connection.cursor() as cur:
        cur.execute(f"SELECT resolution, COUNT(*) FROM {DigestStat._meta.db_table} GROUP BY resolution")
        by_res = dict(cur.fetchall())
    return {"digests": Digest.objects.count(), "rows": by_res}


def distinct_in(seconds):
    from apps.digests.selectors import Filters, effective_window, plan_window, top_digests

    w = effective_window(int(time.time()) - seconds, int(time.time()))
    w.pieces = plan_window(w.start, w.end)
    return top_digests(w, Filters(), per_page=1).total, w.pieces


# -- before and after in turns -------------------------------------------------------------------------
def code_at(revision, modules=("search", "selectors")):
    """The digest page's modules as they were at a git revision, loaded beside the current ones (each
    old module sees the other old ones): {name: module}."""
    import subprocess
    import sys
    import types

    root = settings.BASE_DIR
    loaded = {}
    for name in modules:
        source = subprocess.run(
            ["git", "show", f"{revision}:apps/digests/{name}.py"], cwd=root, check=True, capture_output=True, text=True
        ).stdout
        module = types.ModuleType(f"apps.digests._at_{name}")
        module.__package__ = "apps.digests"
        sys.modules[module.__name__] = module
        loaded[name] = module
        try:
            exec(compile(source, f"{revision}:apps/digests/{name}.py", "exec"), module.__dict__)
        finally:
            del sys.modules[module.__name__]
        for other, old in loaded.items():  # e.g. selectors' `search_index` is the old search module
            for attr, value in list(module.__dict__.items()):
                if getattr(value, "__name__", None) == f"apps.digests.{other}":
                    setattr(module, attr, old)
    return loaded


def time_in_turns(urls, revision, pairs, out=print):
    """One request with the code at `revision`, one with the current code, in turns, `pairs` times per
    URL: both see the same load on a shared machine. Prints p50 / p95 of each (wall ms)."""
    from apps.digests import views

    client = viewer_client()
    current, before = views.selectors, code_at(revision)["selectors"]
    accepted, old_top = inspect.signature(before.top_digests).parameters, before.top_digests

    def top_digests(*args, **kwargs):  # the older code, called as the current view calls it
        page = old_top(*args, **{k: v for k, v in kwargs.items() if k in accepted})
        page.more = getattr(page, "more", False)
        return page

    before.top_digests = top_digests
    out(f"  {'scenario':<45} {revision + ' p50 / p95':>22} {'now p50 / p95':>18}   load average")
    for name, url in urls:
        times = {"before": [], "now": []}
        for _ in range(pairs + 1):  # the first pair warms both
            for label, module in (("before", before), ("now", current)):
                views.selectors = module
                try:
                    t = time.perf_counter()
                    response = client.get(url)
                    times[label].append((time.perf_counter() - t) * 1000)
                finally:
                    views.selectors = current
                assert response.status_code == 200, (url, response.status_code)
        b, n = times["before"][1:], times["now"][1:]
        out(
            f"  {name:<45} {_pct(b, 50):9.0f} / {_pct(b, 95):4.0f} ms {_pct(n, 50):8.0f} / {_pct(n, 95):4.0f} ms"
            f"   {' / '.join(f'{x:.1f}' for x in os.getloadavg())}"
        )
