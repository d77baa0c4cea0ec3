"""Create or update a user with one role: `manage.py ensure_user NAME --role operator --password ...`."""
from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.roles import ROLES


class Command(BaseCommand):
    help = "Create or update a user holding exactly one role (viewer, operator, admin)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument("--password", required=True)

    def handle(self, username, role, password, **options):
        if not password:
            raise CommandError("--password must not be empty")
        user, created = User.objects.get_or_create(username=username)
        user.set_password(password)
        # Admins edit the inventory in Django's admin, which needs staff and model permissions.
        user.is_staff = user.is_superuser = role == "admin"
        user.save()
        user.groups.set([Group.objects.get(name=role)])
        self.stdout.write(f"{'created' if created else 'updated'} {username} with role {role}")
