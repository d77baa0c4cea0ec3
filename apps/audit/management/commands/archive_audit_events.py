"""Retention: archive the audit events older than AUDIT_RETENTION_DAYS to a gzip JSONL file with the
chain head at the cut, then remove them (the only delete path; it audits itself). Beat runs the same
service hourly (workers/audit.py)."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import ArchiveRefused, archive_old_events


class Command(BaseCommand):
    help = "Archive audit events older than the retention period, then remove them from the table."

    def add_arguments(self, parser):
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help=f"retention in days (default AUDIT_RETENTION_DAYS, now {settings.AUDIT_RETENTION_DAYS})",
        )

    def handle(self, days=None, **options):
        if days is not None and days < 0:
            raise CommandError("--days cannot be negative")
        try:
            archive = archive_old_events(days)
        except ArchiveRefused as exc:
            raise CommandError(str(exc)) from None
        if archive is None:
            self.stdout.write("nothing to archive")
        else:
            self.stdout.write(
                f"archived {archive.count} event(s) ({archive.first_id}-{archive.last_id}) to "
                f"{archive.path}; chain head at the cut {archive.head_hash}"
            )
