"""Fill a scratch database with 100,000 digests of realistic history and time the digest page.

    manage.py bench_digests                     # SQLite (var/bench_digests.sqlite3)
    DATABASE_URL=mysql://... manage.py bench_digests   # MariaDB: database test_controlplane_bench_digests on that server (the lab grants test_controlplane*)
    options: --digests 100000 --nodes 2 --core 250 --days 13 --requests 20 --stress --reuse
    manage.py bench_digests --time-only --turns main   # the search and window pages, main's code and this one in turns

See lab/bench_digests.py for the shape of the history; figures go to docs/benchmarks.md.
"""

import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection

from lab import bench_digests as bench


class Command(BaseCommand):
    help = "Time the query digest page over 100,000 digests of realistic history (in a scratch database)."

    def add_arguments(self, parser):
        parser.add_argument("--digests", type=int, default=100_000)
        parser.add_argument("--nodes", type=int, default=2)
        parser.add_argument("--core", type=int, default=250, help="digests seen at every poll")
        parser.add_argument("--days", type=int, default=13, help="days of 5-minute history before the last 24 h")
        parser.add_argument("--requests", type=int, default=20, help="timed requests per scenario")
        parser.add_argument("--stress", action="store_true", help="every digest runs in the last 24 h")
        parser.add_argument("--reuse", action="store_true", help="keep the scratch database if it is already filled")
        parser.add_argument("--time-only", action="store_true", help="time the pages of the scratch database as it is")
        parser.add_argument(
            "--turns",
            metavar="REVISION",
            help="with --time-only: time the search and window pages"
            " with the code at this git revision and the current code in turns, one request each",
        )
        parser.add_argument("--pairs", type=int, default=25, help="requests of each code per page with --turns")

    def handle(self, **o):
        db = settings.DATABASES["default"]
        # --stress gets its own scratch database, so both histories can be kept and timed in turns.
        suffix = "_stress" if o["stress"] else ""
        name = (
            str(settings.VAR_DIR / f"bench_digests{suffix}.sqlite3")
            if connection.vendor == "sqlite"
            else f"test_controlplane_bench_digests{suffix}"
        )
        db["TEST"] = {**db.get("TEST", {}), "NAME": name}
        if o["time_only"]:  # as it is: no migration either
            connection.close()
            settings.DATABASES["default"]["NAME"] = connection.settings_dict["NAME"] = name
        else:
            connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False, keepdb=o["reuse"])
        self.stdout.write(f"machine: {bench.machine()}")
        self.stdout.write(f"scratch database: {connection.settings_dict['NAME']}")
        from apps.digests.models import Digest

        if not o["time_only"] and not (o["reuse"] and Digest.objects.count() >= o["digests"]):
            self.stdout.write(
                f"filling: {o['digests']:,} digests, {o['nodes']} nodes, core {o['core']}, "
                f"{o['days']} days of 5-minute rows + 24 h of raw polls{' (stress)' if o['stress'] else ''}"
            )
            filler = bench.Filler(o["digests"], o["nodes"], o["core"], o["days"], o["stress"], out=self.stdout.write)
            took = filler.run(time.time())
            self.stdout.write(f"filled in {took:.0f} s")
        if o["time_only"] or o["reuse"]:  # as the minute's rollup task would: the span, the search index
            from apps.digests import search, services

            services.refresh_span()
            while indexed := search.index_words():
                self.stdout.write(f"  indexed {indexed:,} digests for the search")
        figures = bench.counts()
        self.stdout.write(f"rows: {figures}")
        for label, seconds in (("5 min", 300), ("1 h", 3600), ("24 h", 86400)):
            total, pieces = bench.distinct_in(seconds)
            self.stdout.write(
                f"distinct digests in the last {label}: {total:,} (window answered from {len(pieces)} "
                f"pieces: {', '.join(f'{r}s x{(b - a) // max(r, 1) if r else b - a}' for r, a, b in pieces)})"
            )
        if o["turns"]:
            self.stdout.write(f"in turns, {o['pairs']} pairs per page (Django test client, in process, wall time):")
            bench.time_in_turns(bench.turn_scenarios(), o["turns"], o["pairs"], out=self.stdout.write)
            return
        self.stdout.write(
            f"page server time over {o['requests']} requests per scenario (Django test client, in process):"
        )
        bench.time_pages(o["requests"], out=self.stdout.write)
