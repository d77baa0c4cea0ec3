"""API tokens: made and revoked on the tokens page by their user, shown once, stored hashed; expired, revoked
and unknown tokens are 401; writes are audited with the token's name; the browser session works too, with
CSRF for writes."""

import hashlib
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from apps.accounts import tokens
from apps.accounts.models import ApiToken
from apps.audit.actor import Actor
from apps.audit.models import AuditEvent

from .conftest import ApiClient

pytestmark = pytest.mark.django_db


def test_the_tokens_page_makes_a_token_shows_it_once_and_keeps_only_its_hash(client, operator_user):
    client.force_login(operator_user)
    response = client.post(reverse("accounts:tokens"), {"name": "ci-runner", "expires_in_days": "30"}, follow=True)
    assert response.redirect_chain == [(reverse("accounts:tokens"), 302)]
    token = ApiToken.objects.get(user=operator_user)
    secret = response.context["created"]["secret"]
    assert secret.startswith("pfc_") and len(secret) > 40 and secret in response.content.decode()
    assert token.key_hash == hashlib.sha256(secret.encode()).hexdigest() and token.prefix == secret[:12]
    assert secret not in str(ApiToken.objects.values().get())  # only its hash and its prefix are kept
    assert timedelta(days=29) < token.expires_at - timezone.now() <= timedelta(days=30)
    page = client.get(reverse("accounts:tokens")).content.decode()
    assert secret not in page and token.prefix in page and "ci-runner" in page  # shown once, then only its prefix
    assert ApiClient(secret).get("/api/v1/me/").json()["token"]["name"] == "ci-runner"
    event = AuditEvent.objects.get(action="api token created")
    assert event.actor == operator_user.username and secret not in str(event.details)

    # A second active token of the same name is refused: the audit log tells tokens apart by name.
    response = client.post(reverse("accounts:tokens"), {"name": "ci-runner"})
    assert response.status_code == 400 and ApiToken.objects.count() == 1

    response = client.post(reverse("accounts:token_revoke", args=[token.pk]))
    assert response.status_code == 302
    assert ApiToken.objects.get().revoked_at is not None
    assert AuditEvent.objects.filter(action="api token revoked", actor=operator_user.username).exists()
    assert ApiClient(secret).get("/api/v1/me/").status_code == 401


def test_a_user_cannot_revoke_anothers_token(client, operator_user, viewer_user):
    token, _ = tokens.create(operator_user, "theirs")
    client.force_login(viewer_user)
    assert client.post(reverse("accounts:token_revoke", args=[token.pk])).status_code == 404
    assert ApiToken.objects.get().revoked_at is None


@pytest.mark.parametrize("case", ["expired", "revoked", "unknown", "inactive user", "not ours", "basic auth"])
def test_refused_tokens_are_401_in_the_error_shape_and_audited(viewer_user, case):
    token, raw = tokens.create(viewer_user, "script", expires_at=timezone.now() + timedelta(days=1))
    header = f"Bearer {raw}"
    if case == "expired":
        ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    elif case == "revoked":
        tokens.revoke(token, actor=Actor.command(viewer_user))
    elif case == "unknown":
        header = f"Bearer {raw[:-4]}abcd"
    elif case == "inactive user":
        viewer_user.is_active = False
        viewer_user.save()
    elif case == "not ours":
        header = "Bearer " + "x" * 5000
    else:
        header = "Basic dmVyYTpwdw=="
    response = Client().get("/api/v1/clusters/", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401, response.content
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    error = response.json()["error"]
    assert error["code"] == "authentication_failed"
    expected = {
        "expired": "expired",
        "revoked": "revoked",
        "unknown": "unknown token",
        "inactive user": "inactive",
        "not ours": "not an API token",
        "basic auth": "Bearer",
    }[case]
    assert expected in error["message"]
    if case != "basic auth":
        refused = AuditEvent.objects.get(action="api token refused")
        assert expected in refused.details["reason"] and raw not in str(refused.details)


def test_last_use_is_written_at_most_once_a_minute(viewer_user):
    token, raw = tokens.create(viewer_user, "poller")
    api = ApiClient(raw)
    assert api.get("/api/v1/me/").status_code == 200
    first = ApiToken.objects.get().last_used_at
    assert first is not None and ApiToken.objects.get().last_used_from == "127.0.0.1"
    api.get("/api/v1/me/")
    assert ApiToken.objects.get().last_used_at == first  # no write per request
    ApiToken.objects.update(last_used_at=first - timedelta(seconds=61))
    api.get("/api/v1/me/")
    assert ApiToken.objects.get().last_used_at > first


def test_writes_are_audited_with_the_tokens_name(operator_user, objects):
    api = ApiClient(tokens.create(operator_user, "ci-runner")[1])
    response = api.post(f"/api/v1/clusters/{objects['cluster']}/repair/")
    assert response.status_code == 201, response.content
    event = AuditEvent.objects.get(action="repair planned")
    assert event.actor == "otto-operator (token ci-runner)" and event.actor_kind == "api"
    assert event.actor_user_id == operator_user.pk
    # The operation still belongs to its user (the two-person rule compares people, not tokens).
    assert response.json()["planned_by"] == "otto-operator"


def test_the_browser_session_reads_and_writes_with_csrf(operator_user, objects):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(operator_user)
    assert browser.get("/api/v1/me/").json() == {
        "username": "otto-operator",
        "role": "operator",
        "authenticated_by": "session",
        "token": None,
    }
    url = f"/api/v1/clusters/{objects['cluster']}/repair/"
    refused = browser.post(url, "{}", content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
    browser.get(reverse("accounts:tokens"))  # any page sets the CSRF cookie
    csrf = browser.cookies["csrftoken"].value
    done = browser.post(url, "{}", content_type="application/json", HTTP_X_CSRFTOKEN=csrf)
    assert done.status_code == 201, done.content
    assert AuditEvent.objects.get(action="repair planned").actor == "otto-operator"
