"""The API's list endpoints at 1,000 ProxySQL nodes and 3,000 backends (lab/bench_api.py). Run by bin/bench-api,
which gives it a scratch database and a private Redis."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from lab import bench_api as bench
from lab.bench_digests import machine


class Command(BaseCommand):
    help = "Fill a scratch database with a fleet of 1,000 ProxySQL nodes and time the API's list endpoints."

    def add_arguments(self, parser):
        parser.add_argument("--requests", type=int, default=50, help="timed requests per endpoint (after 3 warm-ups)")
        parser.add_argument("--operations", type=int, default=20_000)
        parser.add_argument("--events", type=int, default=100_000)
        parser.add_argument("--digests", type=int, default=3_000)

    def handle(self, requests, operations, events, digests, **options):
        name = str(settings.DATABASES["default"]["NAME"])
        if "bench" not in name:
            raise CommandError(
                f"{name} does not look like a scratch database (its name has no 'bench'); "
                "run bin/bench-api, or set DATABASE_URL to one"
            )
        self.stdout.write(f"machine: {machine()}")
        bench.prepare_database()
        ids = bench.fill(operations, events, digests, self.stdout.write)
        bench.publish_latest_state()
        bench.time_endpoints(requests, ids, self.stdout.write)
