"""Re-encrypt every stored credential with the first key of CREDENTIALS_KEYS (see fleet/secrets.py)."""
from django.core.management.base import BaseCommand
from django.db import connection

from apps.audit.services import record
from apps.fleet.models import Cluster, ProxySQLNode
from apps.fleet.secrets import rotate

SECRETS = [(Cluster, "monitor_password"), (Cluster, "replication_password"), (ProxySQLNode, "admin_password")]


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
        for model, field in SECRETS:
            for pk, stored in stored_tokens(model, field):
                if stored:
                    model.objects.filter(pk=pk).update(**{field: rotate(stored)})
                    total += 1
        record("rotate credentials", details={"re_encrypted": total})
        self.stdout.write(f"re-encrypted {total} credential(s) with the first key")
