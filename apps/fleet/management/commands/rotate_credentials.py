"""Re-encrypt every stored credential with the first key of CREDENTIALS_KEYS (see fleet/secrets.py)."""

from django.apps import apps
from django.core.management.base import BaseCommand
from django.db import connection

from apps.audit.services import record
from apps.fleet.secrets import EncryptedTextField, rotate


def encrypted_fields():
    """(model, field name) of every encrypted column of every app: fleet's credentials, configuration's secrets,
    DR's replication passwords, alert channels' URLs and secrets (fleet cannot import the apps above it, so they
    are found by their field)."""
    found = [
        (model, field.name)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, EncryptedTextField)
    ]
    return sorted(found, key=lambda pair: (pair[0]._meta.label, pair[1]))


def stored_tokens(model, field):
    """(pk, stored token) pairs read past the field's decryption: rotation never handles plain text."""
    qn = connection.ops.quote_name
    with connection.cursor() as cur:
        cur.execute(f"SELECT {qn('id')}, {qn(field)} FROM {qn(model._meta.db_table)}")
        return cur.fetchall()


class Command(BaseCommand):
    help = "Re-encrypt stored ProxySQL and backend credentials with the first key of CREDENTIALS_KEYS."

    def handle(self, **options):
        total = 0
        for model, field in encrypted_fields():
            for pk, stored in stored_tokens(model, field):
                if stored:
                    model.objects.filter(pk=pk).update(**{field: rotate(stored)})
                    total += 1
        record("rotate credentials", details={"re_encrypted": total})
        self.stdout.write(f"re-encrypted {total} credential(s) with the first key")
