"""Walk the audit chain; exit 1 and name the first broken link if an event was edited or removed."""
from django.core.management.base import BaseCommand, CommandError

from apps.audit.services import verify_chain


class Command(BaseCommand):
    help = "Verify the audit log's hash chain."

    def handle(self, **options):
        checked, broken, reason = verify_chain()
        if broken is not None:
            raise CommandError(f"audit chain broken at event {broken.pk} ({broken}): {reason}; "
                               f"{checked} event(s) before it verified")
        self.stdout.write(f"audit chain intact: {checked} event(s) verified")
