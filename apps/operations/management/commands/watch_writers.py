"""manage.py watch_writers: the writer watch (apps/operations/writer_watch.py) until SIGTERM or SIGINT. One process per
deployment, beside the workers and beat: idle sockets to the writers, no polling; a closed one queues a poll now."""

import signal

from django.core.management.base import BaseCommand

from apps.operations.writer_watch import REFRESH_S, WriterWatch, queue_poll


class Command(BaseCommand):
    help = "Watch every auto-failover cluster's writer on an idle connection; a closed one polls its cluster at once."

    def add_arguments(self, parser):
        parser.add_argument(
            "--refresh", type=float, default=REFRESH_S, help="seconds between reads of the targets (default 1)"
        )

    def handle(self, *args, **options):
        watch = WriterWatch(queue_poll, refresh_s=options["refresh"])
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: watch.stop())
        self.stdout.write("writer watch: started")
        self.stdout.flush()
        watch.run()
        self.stdout.write("writer watch: stopped")
