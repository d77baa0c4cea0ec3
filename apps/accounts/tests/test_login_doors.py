"""Every login door (the console's /accounts/login/ and the admin's /admin/login/) shares one throttle, per
user name and source address together, and one audit; the throttle holds under concurrent attempts; a password
changed in the admin is audited (who, from where, never the password)."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from django.conf import settings
from django.urls import reverse

from apps.accounts.models import LoginFailure
from apps.audit.models import AuditEvent

NEW_PASSWORD = "Correct-Horse-41-battery"


def admin_login(client, username, password, **extra):
    return client.post(reverse("admin:login"), {"username": username, "password": password}, **extra)


@pytest.mark.django_db
def test_the_admin_login_is_throttled_and_audited_like_the_consoles(client, admin_user_role):
    statuses = [admin_login(client, "ada-admin", f"wrong-{i}").status_code for i in range(12)]
    assert statuses == [200] * settings.LOGIN_MAX_FAILURES + [429] * (12 - settings.LOGIN_MAX_FAILURES)
    refused = admin_login(client, "ada-admin", "pw-ada-admin")
    assert refused.status_code == 429 and b"Too many failed attempts" in refused.content
    assert "_auth_user_id" not in client.session
    failed = AuditEvent.objects.filter(action="login failed")
    assert failed.count() == settings.LOGIN_MAX_FAILURES
    assert {e.details["username"] for e in failed} == {"ada-admin"} and all(e.source_address for e in failed)
    assert AuditEvent.objects.filter(action="login refused", outcome="refused").exists()
    assert not AuditEvent.objects.filter(action="login").exists()


@pytest.mark.django_db
def test_a_good_admin_login_is_audited_and_clears_failures(client, admin_user_role):
    admin_login(client, "ada-admin", "wrong")
    response = admin_login(client, "ada-admin", "pw-ada-admin")
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(admin_user_role.pk)
    event = AuditEvent.objects.get(action="login")
    assert event.actor == "ada-admin" and event.actor_user_id == admin_user_role.pk and event.source_address
    assert not LoginFailure.objects.filter(username="ada-admin").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("first, then", [("accounts:login", "admin:login"), ("admin:login", "accounts:login")])
def test_failures_at_one_door_lock_the_other(client, admin_user_role, first, then):
    for i in range(settings.LOGIN_MAX_FAILURES):  # one user from one address: the lock (issue 34: the pair)
        client.post(reverse(first), {"username": "ada-admin", "password": "wrong"}, REMOTE_ADDR="10.8.0.1")
    refused = client.post(reverse(then), {"username": "ada-admin", "password": "pw-ada-admin"}, REMOTE_ADDR="10.8.0.1")
    assert refused.status_code == 429 and "_auth_user_id" not in client.session


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("door", ["/accounts/login/", "/admin/login/"])
def test_concurrent_wrong_passwords_are_counted_each_one(live_server, admin_user_role, door):
    """16 wrong passwords sent 4 at a time to a live server (its threads, the real database): no more than
    LOGIN_MAX_FAILURES are checked, and with the attempts that follow, exactly that many."""
    url = live_server.url + door

    def session():
        s = requests.Session()
        assert s.get(url, timeout=30).status_code == 200  # the CSRF cookie
        return s

    def attempt(s):
        return s.post(
            url,
            timeout=60,
            data={"username": "ada-admin", "password": "wrong", "csrfmiddlewaretoken": s.cookies["csrftoken"]},
        ).status_code

    sessions = [session() for _ in range(16)]
    with ThreadPoolExecutor(4) as pool:
        burst = list(pool.map(attempt, sessions))
    assert set(burst) <= {200, 429}
    assert 1 <= burst.count(200) <= settings.LOGIN_MAX_FAILURES, burst
    after = [attempt(sessions[0]) for _ in range(settings.LOGIN_MAX_FAILURES)]
    assert burst.count(200) + after.count(200) == settings.LOGIN_MAX_FAILURES, (burst, after)
    assert after[-1] == 429
    assert AuditEvent.objects.filter(action="login failed").count() == settings.LOGIN_MAX_FAILURES
    assert LoginFailure.objects.filter(username="ada-admin").count() == settings.LOGIN_MAX_FAILURES


@pytest.mark.django_db
def test_changing_ones_own_password_in_the_admin_is_audited_without_the_password(client, admin_user_role):
    client.force_login(admin_user_role)
    url = reverse("admin:password_change")
    wrong = client.post(url, {"old_password": "not-it", "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD})
    assert wrong.status_code == 200 and not AuditEvent.objects.exists()  # nothing changed
    hash_before = admin_user_role.password
    response = client.post(
        url,
        {"old_password": "pw-ada-admin", "new_password1": NEW_PASSWORD, "new_password2": NEW_PASSWORD},
        REMOTE_ADDR="10.7.0.9",
    )
    assert response.status_code == 302
    admin_user_role.refresh_from_db()
    assert admin_user_role.check_password(NEW_PASSWORD)
    event = AuditEvent.objects.get()
    assert event.action == "change own password" and event.actor == "ada-admin"
    assert event.actor_user_id == admin_user_role.pk and event.source_address == "10.7.0.9"
    assert event.target == f"user ada-admin (#{admin_user_role.pk})"
    text = str(event.details) + event.target + event.search_text
    assert NEW_PASSWORD not in text and "pw-ada-admin" not in text
    assert (
        hash_before not in text and admin_user_role.password not in text and "pbkdf2" not in text and "md5$" not in text
    )
