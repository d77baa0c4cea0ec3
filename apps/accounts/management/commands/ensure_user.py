"""Create or update a user with one role: `manage.py ensure_user NAME --role operator --password ...`."""

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from apps.accounts import services
from apps.accounts.roles import ROLES
from apps.audit.actor import Actor

ACTOR = Actor.command(label="ensure_user")


class Command(BaseCommand):
    help = "Create or update a user holding exactly one role (viewer, operator, admin)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--role", choices=ROLES, required=True)
        parser.add_argument("--password", required=True)

    def handle(self, username, role, password, **options):
        if not password:
            raise CommandError("--password must not be empty")
        with transaction.atomic():  # the user, its role and the audit event together
            user, created = User.objects.get_or_create(username=username)
            before = None if created else services.user_state(user)
            password_changed = not user.check_password(password)
            if password_changed:  # a new salt would change the hash and log the user out everywhere
                user.set_password(password)
            # Admins edit the inventory in Django's admin, which needs staff and model permissions.
            user.is_staff = user.is_superuser = role == "admin"
            user.save()
            user.groups.set([Group.objects.get(name=role)])
            services.record_user_saved(user, before, actor=ACTOR)  # no one is logged in here: the command
            if not created and password_changed:
                services.record_credentials_reset(user, actor=ACTOR)
        self.stdout.write(f"{'created' if created else 'updated'} {username} with role {role}")
