"""Issue 34: the login lock is per user name and client address together. Five failures with made-up names from
one address locked every account (admins included); behind a reverse proxy one anonymous client locked out
everyone. The client address is read from X-Forwarded-For only when the peer is a TRUSTED_PROXY_ADDRESSES proxy.
A failed login's typed name that no user has (often a mistyped password) is not in the audit log viewers read."""

import pytest
from django.conf import settings
from django.urls import reverse

from apps.audit.models import AuditEvent

LOGIN = "accounts:login"


def login(client, username, password, address, forwarded=None, door=LOGIN):
    extra = {"REMOTE_ADDR": address}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return client.post(reverse(door), {"username": username, "password": password}, **extra)


@pytest.mark.django_db
@pytest.mark.parametrize("door", [LOGIN, "admin:login"])
def test_made_up_names_from_one_address_lock_no_one_else(client, admin_user_role, door):
    for i in range(settings.LOGIN_MAX_FAILURES * 2):
        assert login(client, f"nobody{i}", "wrong", "10.7.0.1", door=door).status_code == 200
    assert login(client, "ada-admin", "pw-ada-admin", "10.7.0.1", door=door).status_code == 302
    assert client.session["_auth_user_id"] == str(admin_user_role.pk)


@pytest.mark.django_db
def test_one_client_behind_the_proxy_locks_only_itself(client, settings, admin_user_role, viewer_user):
    settings.TRUSTED_PROXY_ADDRESSES = ["10.0.0.5"]
    for _ in range(settings.LOGIN_MAX_FAILURES):
        assert login(client, "ada-admin", "wrong", "10.0.0.5", "203.0.113.7").status_code == 200
    # The guesser is locked, whatever it writes to the left of what the proxy appended.
    assert login(client, "ada-admin", "pw-ada-admin", "10.0.0.5", "6.6.6.6, 203.0.113.7").status_code == 429
    # Another client through the same proxy is not.
    assert login(client, "ada-admin", "pw-ada-admin", "10.0.0.5", "198.51.100.2").status_code == 302
    event = AuditEvent.objects.filter(action="login failed").first()
    assert event.source_address == "203.0.113.7"


@pytest.mark.django_db
def test_a_forwarded_header_is_not_believed_from_an_untrusted_peer(client, settings, admin_user_role):
    settings.TRUSTED_PROXY_ADDRESSES = []
    for i in range(settings.LOGIN_MAX_FAILURES):  # a new made-up forwarded address each time: no escape
        assert login(client, "ada-admin", "wrong", "10.0.0.9", f"192.0.2.{i + 1}").status_code == 200
    assert login(client, "ada-admin", "pw-ada-admin", "10.0.0.9", "192.0.2.99").status_code == 429
    settings.TRUSTED_PROXY_ADDRESSES = ["10.0.0.5"]  # a proxy is named, but this peer is not it
    assert login(client, "ada-admin", "pw-ada-admin", "10.0.0.9", "192.0.2.100").status_code == 429


@pytest.mark.django_db
def test_a_typed_name_no_user_has_is_not_in_the_audit_log(client, viewer_user):
    assert login(client, "Hunter2-my-password", "x", "10.6.0.1").status_code == 200
    for _ in range(settings.LOGIN_MAX_FAILURES):
        login(client, "Hunter2-my-password", "x", "10.6.0.1")
    events = AuditEvent.objects.filter(action__in=["login failed", "login refused"])
    assert events.count() == settings.LOGIN_MAX_FAILURES + 1
    assert all("Hunter2" not in str(e.details) and "Hunter2" not in e.target for e in events)
    assert all("no such user" in e.details["username"] for e in events)
    client.force_login(viewer_user)
    for url in (reverse("audit:list"), reverse("audit:export_csv"), reverse("audit:export_json")):
        response = client.get(url)
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert b"Hunter2" not in body, url


@pytest.mark.django_db
def test_guesses_at_one_name_from_many_addresses_stop_at_the_user_wide_limit(client, settings, admin_user_role):
    """A botnet guessing one user's password, a few guesses an address (under the per-address lock), is refused
    once the name's failures from every address pass LOGIN_MAX_FAILURES_PER_USER; the owner still logs in from
    an address they logged in from before, and nowhere else until the window passes."""
    settings.LOGIN_MAX_FAILURES_PER_USER = 12
    assert login(client, "ada-admin", "pw-ada-admin", "10.9.0.1").status_code == 302  # the owner's usual address
    client.logout()
    for i in range(settings.LOGIN_MAX_FAILURES_PER_USER):
        assert login(client, "ada-admin", "wrong", f"198.18.{i}.1").status_code == 200
    # Each new address has used none of its own five tries, yet the name is refused there now.
    response = login(client, "ada-admin", "pw-ada-admin", "198.18.200.1")
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    refusal = AuditEvent.objects.filter(action="login refused").first()
    assert refusal.details["recent_failures_every_address"] == settings.LOGIN_MAX_FAILURES_PER_USER
    # The owner, from where they logged in before, gets in (and that clears the failures).
    assert login(client, "ada-admin", "pw-ada-admin", "10.9.0.1").status_code == 302
    client.logout()
    assert login(client, "ada-admin", "pw-ada-admin", "198.18.200.1").status_code == 302


@pytest.mark.django_db
def test_made_up_names_from_many_addresses_do_not_reach_the_user_wide_limit(client, settings, admin_user_role):
    settings.LOGIN_MAX_FAILURES_PER_USER = 3
    for i in range(10):
        assert login(client, "nobody-at-all", "wrong", f"198.19.{i}.1").status_code == 200
    assert not AuditEvent.objects.filter(
        action="login refused"
    ).exists()  # no user has the name: only the per-address lock counts it
