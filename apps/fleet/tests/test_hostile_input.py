"""Hostile input in bulk against the fleet's forms: validation errors or safe storage, never a 500,
nothing half-saved, and nothing unescaped on the wire to a ProxySQL node."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from hypothesis import HealthCheck, given, settings

from apps.accounts.tests.hostile import hostile_number, hostile_text
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.fleet.validators import ID_MAX, validate_name, whole_number

from .conftest import seed_layout

pytestmark = pytest.mark.django_db
FAST = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@FAST
@given(
    host=hostile_text,
    port=hostile_number,
    user=hostile_text,
    password=hostile_text,
    node_name=hostile_text,
    cluster_name=hostile_text,
    hg=hostile_number,
)
def test_adopt_form_never_fails_and_saves_nothing_on_bad_input(
    operator_client, host, port, user, password, node_name, cluster_name, hg
):
    before = (Cluster.objects.count(), ProxySQLNode.objects.count())
    response = operator_client.post(
        reverse("fleet:adopt"),
        {
            "admin_host": host,
            "admin_port": port,
            "admin_user": user,
            "admin_password": password,
            "node_name": node_name,
            "new_cluster_name": cluster_name,
            "writer_hostgroup": hg,
            "preview": "1",
        },
    )
    assert response.status_code in (200, 400)
    assert (Cluster.objects.count(), ProxySQLNode.objects.count()) == before  # a preview never saves


def printable_name(text):
    """A name the console takes (validate_name): no control or format characters (they are refused, below)."""
    try:
        validate_name(text)
        return True
    except ValidationError:
        return False


@FAST
@given(
    node_name=hostile_text.filter(lambda t: "\x00" not in t and t.strip() and len(t) <= 200),
    cluster_name=hostile_text.filter(lambda t: t.strip() and len(t) <= 200 and printable_name(t.strip())),
)
def test_hostile_names_are_stored_exactly_and_shown_escaped(
    operator_client, proxysql_double, settings, node_name, cluster_name
):
    settings.ADOPT_ATTEMPTS_PER_MINUTE = 10**6  # every example is one more preview: the bound is tested apart
    seed_layout(proxysql_double)
    wipe()  # examples share the test's database: start each from an empty inventory
    proxysql_double.clear_statements()
    preview = operator_client.post(
        reverse("fleet:adopt"),
        {
            "admin_host": "127.0.0.1",
            "admin_port": proxysql_double.port,
            "admin_user": proxysql_double.user,
            "admin_password": proxysql_double.password,
            "node_name": node_name,
            "new_cluster_name": cluster_name,
            "preview": "1",
        },
    )
    assert preview.status_code == 200, preview.content[:500]
    done = operator_client.post(reverse("fleet:adopt"), {"confirm": "1"})
    assert done.status_code == 302
    cluster = Cluster.objects.get(name=cluster_name.strip())
    page = operator_client.get(cluster.get_absolute_url()).content.decode()
    assert "<script>alert(1)</script>" not in page
    # Adopting only reads ProxySQL: no statement that could carry what the operator typed.
    sent = proxysql_double.statements()
    assert sent and all(
        s.lstrip().upper().startswith(("SELECT", "SHOW", "SET NAMES", "SET AUTOCOMMIT")) for s in sent
    ), sent


@FAST
@given(cluster_name=hostile_text.filter(lambda t: t.strip() and len(t) <= 200 and not printable_name(t.strip())))
def test_cluster_names_with_control_characters_are_refused(operator_client, proxysql_double, settings, cluster_name):
    settings.ADOPT_ATTEMPTS_PER_MINUTE = 10**6
    preview = operator_client.post(
        reverse("fleet:adopt"),
        {
            "admin_host": "127.0.0.1",
            "admin_port": proxysql_double.port,
            "admin_user": proxysql_double.user,
            "admin_password": proxysql_double.password,
            "node_name": "p1",
            "new_cluster_name": cluster_name,
            "preview": "1",
        },
    )
    assert preview.status_code == 400 and not Cluster.objects.exists()
    assert "are not allowed" in preview.content.decode()


def wipe():
    ProxySQLNode.objects.all().delete()
    Server.objects.all().delete()
    Cluster.objects.all().delete()


@FAST
@given(name=hostile_text, hg=hostile_number, weight=hostile_number, comment=hostile_text)
def test_admin_forms_validate_or_store(client, admin_user_role, name, hg, weight, comment):
    client.force_login(admin_user_role)
    response = client.post(
        reverse("admin:fleet_cluster_add"),
        {
            "name": name,
            "kind": "galera",
            "description": comment,
            "writer_hostgroup": hg,
            "reader_hostgroup": weight,
            "max_replication_lag": weight,
            "min_available_readers": "1",
            "writer_is_also_reader": "1",
            "drain_timeout_ms": "5000",
            "poll_interval_s": "2",
            "backend_poll_interval_s": "1",
            "reader_return_after_s": "10",
            "offline_hard_grace_s": "30",
            "failover_after_polls": "2",
            "failback_after_s": "300",
            "plan_validity_s": "10",
            "config_confirm_role": "operator",
        },
    )
    assert response.status_code in (200, 302, 400)  # 400: a request over DATA_UPLOAD_MAX_MEMORY_SIZE
    if response.status_code == 302:
        # Stored as the form cleaned it: Django's CharField strips surrounding whitespace the way str.strip() does
        # (so also \x1c-\x1f and NBSP, which Hypothesis finds), and nothing else.
        cluster = Cluster.objects.get(name=name.strip())
        assert cluster.description == comment.strip()
        cluster.delete()


def test_whole_number_takes_ascii_digits_within_the_limit_only():
    assert whole_number("42") == 42 and whole_number("0") == 0 and whole_number(str(ID_MAX)) == ID_MAX
    for text in ("", " 1", "-1", "1.0", "²", "١٢", "9" * 5000, str(ID_MAX + 1), None, 7):
        assert whole_number(text) is None, text
    assert whole_number("65535", limit=65535) == 65535 and whole_number("65536", limit=65535) is None
