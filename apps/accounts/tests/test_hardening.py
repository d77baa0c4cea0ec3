"""Login throttling, security headers and Django's deployment checks with production settings."""

import os
import secrets
import subprocess
import sys

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.urls import reverse

from apps.accounts.middleware import CSP
from apps.audit.models import AuditEvent

pytestmark = pytest.mark.django_db


def login(client, username, password):
    return client.post(reverse("accounts:login"), {"username": username, "password": password})


def test_failed_logins_are_throttled_then_refused_even_with_the_right_password(client, viewer_user):
    for _ in range(settings.LOGIN_MAX_FAILURES):
        assert login(client, viewer_user.username, "wrong").status_code == 200
    refused = login(client, viewer_user.username, "pw-" + viewer_user.username)
    assert refused.status_code == 429 and b"Too many failed attempts" in refused.content
    assert "_auth_user_id" not in client.session
    assert AuditEvent.objects.filter(action="login failed").count() == settings.LOGIN_MAX_FAILURES
    assert AuditEvent.objects.filter(action="login refused", outcome="refused").count() == 1


def test_a_good_login_is_audited_and_clears_failures(client, viewer_user):
    login(client, viewer_user.username, "wrong")
    response = login(client, viewer_user.username, "pw-" + viewer_user.username)
    assert response.status_code == 302
    assert AuditEvent.objects.filter(action="login", actor=viewer_user.username).exists()


def test_pages_carry_a_strict_content_security_policy(viewer_client):
    response = viewer_client.get(reverse("pages:overview"))
    csp = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    assert response.headers["X-Frame-Options"] == "DENY" and response.headers["Cache-Control"] == "private, no-store"
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_admin_pages_carry_the_same_content_security_policy(client, admin_user_role):
    assert client.get(reverse("admin:login")).headers["Content-Security-Policy"] == CSP
    client.force_login(admin_user_role)
    for url in (reverse("admin:index"), reverse("admin:auth_user_change", args=[admin_user_role.pk])):
        response = client.get(url)
        assert response.status_code == 200 and response.headers["Content-Security-Policy"] == CSP, url


def test_deploy_checks_are_clean_with_production_settings():
    env = {
        **os.environ,
        "DJANGO_DEBUG": "0",
        "SECRET_KEY": Fernet.generate_key().decode() * 2,
        "CREDENTIALS_KEYS": Fernet.generate_key().decode(),
        "ALLOWED_HOSTS": "console.example.org",
    }
    env.pop("DATABASE_URL", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_its_secrets():
    env = {**os.environ, "DJANGO_DEBUG": "0"}
    env.pop("SECRET_KEY", None)
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "SECRET_KEY must be set" in result.stderr


def settings_in_a_fresh_process(**env_changes):
    """(returncode, stdout, stderr) of a process that loads controlplane.settings with the test's
    environment changed by env_changes (None removes a variable) and prints a few production settings."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings"}
    env.pop("DATABASE_URL", None)
    for name, value in env_changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    show = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.DEBUG, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, s.SECURE_SSL_REDIRECT)"
    )
    result = subprocess.run(
        [sys.executable, "-c", show], cwd=settings.BASE_DIR, env=env, capture_output=True, text=True, timeout=60
    )
    return result.returncode, result.stdout.strip(), result.stderr


PRODUCTION_KEYS = {"SECRET_KEY": secrets.token_urlsafe(50), "CREDENTIALS_KEYS": Fernet.generate_key().decode()}


def test_without_DJANGO_DEBUG_the_settings_are_production():
    code, out, err = settings_in_a_fresh_process(DJANGO_DEBUG=None, **PRODUCTION_KEYS)
    assert code == 0, err
    assert out == "False True True 31536000 True"  # no debug pages, Secure cookies, HSTS, HTTPS redirect


def test_without_DJANGO_DEBUG_or_keys_it_refuses_to_start_and_says_what_to_set():
    code, out, err = settings_in_a_fresh_process(DJANGO_DEBUG=None, SECRET_KEY=None, CREDENTIALS_KEYS=None)
    assert code != 0 and "SECRET_KEY must be set in production" in err and "DJANGO_DEBUG=1" in err
    code, out, err = settings_in_a_fresh_process(
        DJANGO_DEBUG=None, SECRET_KEY=PRODUCTION_KEYS["SECRET_KEY"], CREDENTIALS_KEYS=None
    )
    assert code != 0 and "CREDENTIALS_KEYS must be set in production" in err and "Fernet.generate_key" in err


@pytest.mark.parametrize("variable", ["SECRET_KEY", "CREDENTIALS_KEYS"])
def test_production_refuses_the_repositorys_development_keys(variable):
    development = {
        "SECRET_KEY": settings_module()._DEV_SECRET_KEY,
        # even as the second, decrypt-only key
        "CREDENTIALS_KEYS": f"{Fernet.generate_key().decode()},{settings_module()._DEV_CREDENTIALS_KEY}",
    }
    code, out, err = settings_in_a_fresh_process(
        DJANGO_DEBUG="0", **{**PRODUCTION_KEYS, variable: development[variable]}
    )
    assert code != 0 and f"{variable} " in err and "development key" in err
    code, out, err = settings_in_a_fresh_process(
        DJANGO_DEBUG="1", **{**PRODUCTION_KEYS, variable: development[variable]}
    )
    assert code == 0 and out.startswith("True False False 0 False"), err  # development mode: allowed


@pytest.mark.parametrize(
    "secret_key", ["a", "x" * 60, "abcd" * 20, "django-insecure-" + "k3y-ch4rs" * 6, "short-but-varied-0123456789"]
)
def test_production_refuses_a_weak_secret_key(secret_key):
    code, out, err = settings_in_a_fresh_process(DJANGO_DEBUG="0", **{**PRODUCTION_KEYS, "SECRET_KEY": secret_key})
    assert code != 0 and "SECRET_KEY is too weak" in err and "secrets.token_urlsafe(50)" in err, err
    assert len(secret_key) < 8 or secret_key not in err  # a secret is never printed


@pytest.mark.parametrize("keys", ["notakey", "c2hvcnQ=", f"{Fernet.generate_key().decode()},notakey", ","])
def test_production_refuses_malformed_credentials_keys(keys):
    code, out, err = settings_in_a_fresh_process(DJANGO_DEBUG="0", **{**PRODUCTION_KEYS, "CREDENTIALS_KEYS": keys})
    assert code != 0 and "CREDENTIALS_KEYS" in err and "Fernet.generate_key" in err, err
    if keys != ",":
        assert "is not a Fernet key" in err and "notakey" not in err


def test_malformed_credentials_keys_are_refused_in_development_too():
    code, out, err = settings_in_a_fresh_process(DJANGO_DEBUG="1", CREDENTIALS_KEYS="notakey")
    assert code != 0 and "CREDENTIALS_KEYS: key 1 of 1 is not a Fernet key" in err, err


def test_the_tests_ask_for_development_mode_explicitly():
    assert os.environ["DJANGO_DEBUG"] == "1"  # controlplane/settings_tests.py, named in pytest.ini
    assert settings.SESSION_COOKIE_SECURE is False


def settings_module():
    import controlplane.settings

    return controlplane.settings


def test_spaces_around_the_user_name_do_not_escape_the_per_user_lock(client, viewer_user):
    """The form strips the spaces and logs " vera-viewer " in as vera-viewer: the failures count against
    vera-viewer too: every spelling counts against one lock (vera-viewer from this address)."""
    spellings = [
        " vera-viewer",
        "vera-viewer ",
        "\tvera-viewer\n",
        "  vera-viewer  ",
        "vera-viewer\u00a0",
        "\u3000vera-viewer",
    ]
    for i, name in enumerate(spellings[: settings.LOGIN_MAX_FAILURES]):
        response = client.post(
            reverse("accounts:login"), {"username": name, "password": "wrong"}, REMOTE_ADDR="10.9.0.1"
        )
        assert response.status_code == 200
    refused = client.post(
        reverse("accounts:login"), {"username": "vera-viewer ", "password": "pw-vera-viewer"}, REMOTE_ADDR="10.9.0.1"
    )
    assert refused.status_code == 429 and "_auth_user_id" not in client.session
    assert AuditEvent.objects.get(action="login refused").details["username"] == "vera-viewer"
