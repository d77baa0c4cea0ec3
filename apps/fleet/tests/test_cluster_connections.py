"""Issue 34: a cluster's connection settings (credential hosts, TLS CA and verify) set by an admin on the cluster page
and the API, with the model's rules, audited with what changed (a CA by its fingerprint, never its text); operators
and viewers read them and change nothing."""

import pytest
import trustme

from apps.api.tests.conftest import error_of, token_client
from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster():
    return Cluster.objects.create(name="shop", writer_hostgroup=100, reader_hostgroup=101)


@pytest.fixture(scope="module")
def ca():
    return trustme.CA(organization_name="Shop DBA CA").cert_pem.bytes().decode()


def settings_of(cluster):
    cluster.refresh_from_db()
    return cluster.credential_hosts, cluster.tls_ca, cluster.tls_verify


def test_an_admin_sets_the_ca_and_credential_hosts_on_the_cluster_page(client, admin_user_role, cluster, ca):
    client.force_login(admin_user_role)
    page = client.get(f"/clusters/{cluster.pk}/").content.decode()
    assert 'data-form="connections"' in page and "off (no CA set)" in page
    answer = client.post(
        f"/clusters/{cluster.pk}/connections/",
        {"credential_hosts": "10.0.0.0/8, db-*.example.net", "tls_ca": ca, "tls_verify": "on"},
    )
    assert answer.status_code == 302
    assert settings_of(cluster) == ("10.0.0.0/8, db-*.example.net", ca.strip(), True)
    event = AuditEvent.objects.get(action="cluster connections changed")
    assert event.details["changed"] == ["credential_hosts", "tls_ca"] and event.actor == "ada-admin"
    assert "Shop DBA CA" in event.details["after"]["tls_ca"] and "SHA-256" in event.details["after"]["tls_ca"]
    assert "BEGIN CERTIFICATE" not in str(event.details) and event.details["before"]["tls_ca"] == "none"
    page = client.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "verified against the CA: OU=Testing CA" in page and "O=Shop DBA CA (SHA-256 " in page
    # Verify off, said on the page
    client.post(
        f"/clusters/{cluster.pk}/connections/", {"credential_hosts": "10.0.0.0/8, db-*.example.net", "tls_ca": ca}
    )
    assert settings_of(cluster)[2] is False
    assert (
        "not verified</strong> (encrypted, any certificate)" in client.get(f"/clusters/{cluster.pk}/").content.decode()
    )


@pytest.mark.parametrize(
    "field, value, said",
    [
        (
            "tls_ca",
            "-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----",
            "The CA must be PEM certificates",
        ),
        ("tls_ca", "just text", "The CA must be PEM certificates"),
        ("credential_hosts", "10.0.0.0/33", "10.0.0.0/33"),
        ("credential_hosts", "db\u200b.example.net", "db"),
    ],
)
def test_bad_input_changes_nothing_and_says_why(client, admin_user_role, cluster, field, value, said):
    client.force_login(admin_user_role)
    answer = client.post(f"/clusters/{cluster.pk}/connections/", {"tls_verify": "on", field: value})
    assert answer.status_code == 400
    assert said in answer.content.decode()
    assert settings_of(cluster) == ("", "", True)
    assert AuditEvent.objects.get(action="cluster connections changed").outcome == "invalid"


def test_an_operator_changes_nothing_on_the_page(operator_client, cluster, ca):
    assert 'data-form="connections"' not in operator_client.get(f"/clusters/{cluster.pk}/").content.decode()
    answer = operator_client.post(f"/clusters/{cluster.pk}/connections/", {"tls_ca": ca, "credential_hosts": "*"})
    assert answer.status_code == 403 and settings_of(cluster) == ("", "", True)


def test_the_api_sets_only_the_fields_named_admins_only(admin_user_role, operator_user, viewer_user, cluster, ca):
    api_for = token_client
    url = f"/api/v1/clusters/{cluster.pk}/connections/"
    admin = api_for(admin_user_role)
    answer = admin.request("patch", url, {"tls_ca": ca, "tls_verify": False})
    assert answer.status_code == 200, answer.content
    assert answer.json()["tls_verify"] is False and "Shop DBA CA" in answer.json()["tls_ca_described"]
    assert admin.request("patch", url, {"credential_hosts": "192.0.2.10"}).status_code == 200
    assert settings_of(cluster) == ("192.0.2.10", ca.strip(), False)  # the CA and verify kept
    event = AuditEvent.objects.filter(action="cluster connections changed").order_by("-pk").first()
    assert event.details["changed"] == ["credential_hosts"]
    refused = error_of(admin.request("patch", url, {"tls_ca": "nope"}), 400)
    assert "The CA must be PEM certificates" in str(refused["fields"]["tls_ca"])
    assert error_of(admin.request("patch", url, {"tls_verify": "maybe"}), 400)
    assert error_of(api_for(operator_user).request("patch", url, {"credential_hosts": "*"}), 403)
    assert api_for(viewer_user).get(url).json()["credential_hosts"] == "192.0.2.10"
    assert settings_of(cluster) == ("192.0.2.10", ca.strip(), False)
