import io

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command
from django.db import connection

from apps.fleet.models import Cluster, ProxySQLNode
from apps.fleet.secrets import PREFIX


@pytest.mark.django_db
def test_password_is_encrypted_at_rest_and_read_back_plain():
    cluster = Cluster.objects.create(name="c", writer_hostgroup=1, reader_hostgroup=2, monitor_password="mon-pw")
    node = ProxySQLNode.objects.create(
        cluster=cluster, name="p1", admin_host="127.0.0.1", admin_user="admin", admin_password='it\'s "secret"'
    )
    with connection.cursor() as cur:
        cur.execute(f"SELECT admin_password FROM {ProxySQLNode._meta.db_table} WHERE id=%s", [node.pk])
        stored = cur.fetchone()[0]
    assert stored.startswith(PREFIX) and "secret" not in stored
    assert ProxySQLNode.objects.get(pk=node.pk).admin_password == 'it\'s "secret"'
    assert Cluster.objects.get(pk=cluster.pk).monitor_password == "mon-pw"


@pytest.mark.django_db
def test_rotation_reencrypts_with_the_new_first_key(settings):
    old_key = settings.CREDENTIALS_KEYS[0]
    cluster = Cluster.objects.create(name="c", writer_hostgroup=1, reader_hostgroup=2, monitor_password="pw")
    new_key = Fernet.generate_key().decode()
    settings.CREDENTIALS_KEYS = [new_key, old_key]
    call_command("rotate_credentials", stdout=io.StringIO())
    settings.CREDENTIALS_KEYS = [new_key]  # the old key is gone: only a rotated value still decrypts
    assert Cluster.objects.get(pk=cluster.pk).monitor_password == "pw"
