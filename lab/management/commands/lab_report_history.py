"""Write a synthetic but realistic history for the LAB cluster (labelled lab data), so that a person can
read a real health report: `manage.py lab_report_history` then build the daily report of yesterday.

    manage.py lab_report_history                     yesterday and the day before (a daily report with trends)
    manage.py lab_report_history --days 14           two weeks (a weekly report with trends)
    manage.py lab_report_history --replace --build   rewrite the span, then build yesterday's daily report
"""

from datetime import timedelta

from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from apps.audit.actor import Actor
from apps.fleet.models import Cluster
from apps.reports import periods, services
from apps.reports.choices import Period
from lab import report_history


class Command(BaseCommand):
    help = "Write synthetic monitoring history, operations and audit events (lab data) for the lab cluster."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", default="galera-lab")
        parser.add_argument("--days", type=int, default=2, help="local days ending at the last midnight (default 2)")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--replace", action="store_true", help="delete the cluster's samples in the span first")
        parser.add_argument(
            "--build", action="store_true", help="then build the daily (and, with 8+ days, weekly) report"
        )

    def handle(self, *args, cluster, days, seed, replace, build, **options):
        try:
            c = Cluster.objects.get(name=cluster)
        except Cluster.DoesNotExist:
            raise CommandError(f"no cluster named {cluster!r} (adopt the lab first: bin/demo does)") from None
        if not 1 <= days <= 31:
            raise CommandError("--days must be between 1 and 31")
        today = timezone.localtime().date()
        day_starts = [periods.midnight(today - timedelta(days=days - i)).timestamp() for i in range(days)]
        end = periods.midnight(today).timestamp()
        found = report_history.existing(c, day_starts[0], end)
        if found and not replace:
            raise CommandError(f"{found} samples of {c.name} already fall in that span: pass --replace to rewrite it")
        if replace:
            report_history.clear(c, day_starts[0], end)
        written = report_history.generate(c, day_starts, end, seed=seed)
        self.stdout.write(
            f"lab data written for {c.name}, {days} day(s) to {periods.midnight(today):%Y-%m-%d %H:%M %Z}: "
            + ", ".join(f"{k} {v}" for k, v in written.items())
        )
        if build:
            for period in [Period.DAILY, Period.WEEKLY] if days >= 8 else [Period.DAILY]:
                span = periods.ending_on(period, today)
                report = services.build_report(c, period, span, actor=Actor.system())
                self.stdout.write(
                    f"{period} report #{report.pk}: {report.headline} ({report.build_ms:.0f} ms) "
                    f"{report.get_absolute_url()}"
                )
