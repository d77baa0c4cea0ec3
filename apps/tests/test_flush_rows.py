"""The root conftest writes back the content types and permissions after a transactional test's flush instead of
sending post_migrate again (_post_migrate_rows_written_back_after_flush): what it writes back must be what
post_migrate builds from the models."""

import pytest
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.core.management.sql import emit_post_migrate_signal


def post_migrate_content():
    types = set(ContentType.objects.values_list("app_label", "model"))
    permissions = set(Permission.objects.values_list("content_type__app_label", "content_type__model", "codename"))
    return types, permissions


@pytest.mark.django_db(transaction=True)
def test_the_rows_written_back_after_a_flush_are_what_post_migrate_builds():
    call_command("flush", verbosity=0, interactive=False)  # the first flush builds and keeps, a later one writes back
    call_command("flush", verbosity=0, interactive=False)
    ContentType.objects.clear_cache()
    written_back = post_migrate_content()
    ids = dict(ContentType.objects.values_list("id", "model"))

    Permission.objects.all().delete()
    ContentType.objects.all().delete()
    ContentType.objects.clear_cache()
    emit_post_migrate_signal(0, False, "default")  # Django's own, as a flush without the fixture sends it
    built = post_migrate_content()

    assert written_back == built
    assert ("fleet", "cluster") in built[0] and ("fleet", "cluster", "change_cluster") in built[1]
    assert len(ids) == len(built[0])  # one content type a model, each with its id kept from the first build
