"""Walk the audit chain; exit 1 and name the first broken link if an event was edited or removed.

Starts from the newest archive's head when retention has run; --archives also checks the archive files."""

import time

from django.core.management.base import BaseCommand, CommandError

from apps.audit.models import AuditArchive
from apps.audit.services import Progress, chain_start, verify_archive, verify_some


class Command(BaseCommand):
    help = "Verify the audit log's hash chain (and, with --archives, the archive files)."

    def add_arguments(self, parser):
        parser.add_argument("--archives", action="store_true", help="also verify every archive file")

    def handle(self, archives=False, **options):
        started = time.monotonic()
        progress = Progress(*chain_start())
        while not progress.done:  # stretches of 10 s, so that a long run shows it is alive
            verify_some(progress, deadline=time.monotonic() + 10)
            if not progress.done and options["verbosity"] > 1:
                self.stderr.write(f"... {progress.checked} event(s) verified")
        if progress.broken is not None:
            raise CommandError(
                f"audit chain broken at event {progress.broken.pk} ({progress.broken}): "
                f"{progress.reason}; {progress.checked} event(s) before it verified"
            )
        bad = []
        if archives:
            for archive in AuditArchive.objects.order_by("last_id"):
                ok, message = verify_archive(archive)
                self.stdout.write(f"archive {archive.first_id}-{archive.last_id}: {message}")
                if not ok:
                    bad.append(archive)
        if bad:
            raise CommandError(f"{len(bad)} archive file(s) do not verify")
        self.stdout.write(
            f"audit chain intact: {progress.checked} event(s) verified in {time.monotonic() - started:.1f} s"
        )
