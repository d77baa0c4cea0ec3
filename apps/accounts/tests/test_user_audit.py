"""Users changed in Django's admin or by ensure_user, and logouts, are audited: who, which user, what
changed; never a password or its hash."""

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.audit.services import verify_chain

pytestmark = pytest.mark.django_db
NEW_PASSWORD = "Correct-Horse-41-battery"


@pytest.fixture
def admin_client(client, admin_user_role):
    client.force_login(admin_user_role)
    return client


def change_form(user, **changes):
    data = {
        "username": user.username,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "email": user.email,
        "date_joined_0": user.date_joined.strftime("%Y-%m-%d"),
        "date_joined_1": user.date_joined.strftime("%H:%M:%S"),
        "is_active": "on",
        "groups": [g.pk for g in user.groups.all()],
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


def no_secret_in(event, user):
    text = str(event.details) + event.target + event.search_text
    return NEW_PASSWORD not in text and user.password not in text and "pbkdf2" not in text and "md5$" not in text


def test_adding_a_user_is_audited(admin_client):
    response = admin_client.post(
        reverse("admin:auth_user_add"),
        {"username": "newbie", "usable_password": "true", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 302
    newbie = User.objects.get(username="newbie")
    event = AuditEvent.objects.get(action="add user")
    assert event.actor == "ada-admin" and event.target == f"user newbie (#{newbie.pk})"
    assert event.details["username"] == "newbie" and event.details["role"] is None
    assert event.details["can_log_in"] is True and no_secret_in(event, newbie)


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({"groups": "operator"}, {"groups": [[], ["operator"]], "role": [None, "operator"]}),
        ({"is_superuser": "on"}, {"is_superuser": [False, True], "role": [None, "admin"]}),
        ({"is_staff": "on"}, {"is_staff": [False, True]}),
        ({"is_active": None}, {"is_active": [True, False], "can_log_in": [True, False]}),
    ],
)
def test_changing_roles_superuser_staff_or_active_is_audited(admin_client, django_user_model, changes, expected):
    vic = django_user_model.objects.create_user(username="vic", password="x")
    if changes.get("groups"):
        changes = {"groups": [Group.objects.get_or_create(name=changes["groups"])[0].pk]}
    response = admin_client.post(reverse("admin:auth_user_change", args=[vic.pk]), change_form(vic, **changes))
    assert response.status_code == 302, response.content[:2000]
    event = AuditEvent.objects.get(action="change user")
    assert event.actor == "ada-admin" and event.details["user_id"] == vic.pk and event.details["username"] == "vic"
    assert event.details["changed"] == expected


def test_saving_a_user_unchanged_writes_nothing(admin_client, django_user_model):
    vic = django_user_model.objects.create_user(username="vic", password="x")
    assert admin_client.post(reverse("admin:auth_user_change", args=[vic.pk]), change_form(vic)).status_code == 302
    assert not AuditEvent.objects.filter(action="change user").exists()


def test_resetting_a_password_is_audited_without_the_password(admin_client, django_user_model):
    vic = django_user_model.objects.create_user(username="vic", password="x")
    response = admin_client.post(
        reverse("admin:auth_user_password_change", args=[vic.pk]),
        {"usable_password": "true", "password1": NEW_PASSWORD, "password2": NEW_PASSWORD},
    )
    assert response.status_code == 302
    vic.refresh_from_db()
    assert vic.check_password(NEW_PASSWORD)
    event = AuditEvent.objects.get(action="reset user password")
    assert event.actor == "ada-admin" and event.target == f"user vic (#{vic.pk})"
    assert event.details["credentials"] == "a new password was set" and no_secret_in(event, vic)
    mismatch = admin_client.post(
        reverse("admin:auth_user_password_change", args=[vic.pk]),
        {"usable_password": "true", "password1": NEW_PASSWORD, "password2": "other"},
    )
    assert mismatch.status_code == 200 and AuditEvent.objects.filter(action="reset user password").count() == 1


def test_deleting_users_is_audited_and_the_chain_still_verifies(admin_client, django_user_model, client):
    vic = django_user_model.objects.create_user(username="vic", password="x")
    client.force_login(vic)
    client.get(reverse("pages:overview"))  # vic has no role: an audited refusal, written under vic's id
    admin_client.force_login(User.objects.get(username="ada-admin"))
    response = admin_client.post(reverse("admin:auth_user_delete", args=[vic.pk]), {"post": "yes"})
    assert response.status_code == 302 and not User.objects.filter(username="vic").exists()
    event = AuditEvent.objects.get(action="delete user")
    assert event.actor == "ada-admin" and event.details["before"]["username"] == "vic"
    a, b = (django_user_model.objects.create_user(username=n, password="x") for n in ("a", "b"))
    response = admin_client.post(
        reverse("admin:auth_user_changelist"),
        {"action": "delete_selected", "_selected_action": [a.pk, b.pk], "post": "yes"},
    )
    assert response.status_code == 302
    assert sorted(e.details["before"]["username"] for e in AuditEvent.objects.filter(action="delete user")) == [
        "a",
        "b",
        "vic",
    ]
    checked, broken, reason = verify_chain()
    assert broken is None, reason


def test_ensure_user_is_audited(db):
    call_command("ensure_user", "olga", "--role", "operator", "--password", NEW_PASSWORD)
    created = AuditEvent.objects.get(action="add user")
    assert (created.actor, created.actor_kind) == ("ensure_user", "command") and created.details["role"] == "operator"
    call_command("ensure_user", "olga", "--role", "operator", "--password", NEW_PASSWORD)
    assert AuditEvent.objects.count() == 1  # nothing changed, nothing to say
    call_command("ensure_user", "olga", "--role", "admin", "--password", NEW_PASSWORD + "!")
    changed = AuditEvent.objects.get(action="change user").details["changed"]
    assert changed["role"] == ["operator", "admin"] and changed["is_superuser"] == [False, True]
    assert AuditEvent.objects.get(action="reset user password").details["username"] == "olga"
    assert all(no_secret_in(e, User.objects.get(username="olga")) for e in AuditEvent.objects.all())


def test_ensure_user_with_the_same_password_keeps_its_sessions(client):
    call_command("ensure_user", "olga", "--role", "operator", "--password", NEW_PASSWORD)
    assert client.login(username="olga", password=NEW_PASSWORD)
    stored = User.objects.get(username="olga").password
    call_command("ensure_user", "olga", "--role", "operator", "--password", NEW_PASSWORD)
    assert User.objects.get(username="olga").password == stored  # not salted again
    assert client.get(reverse("accounts:tokens")).status_code == 200  # still logged in
    call_command("ensure_user", "olga", "--role", "operator", "--password", NEW_PASSWORD + "!")
    assert User.objects.get(username="olga").check_password(NEW_PASSWORD + "!")
    response = client.get(reverse("accounts:tokens"))  # a new password logs the old sessions out
    assert response.status_code == 302 and response["Location"].startswith(reverse("accounts:login"))


def test_logout_is_audited(client, viewer_user):
    client.force_login(viewer_user)
    assert client.post(reverse("accounts:logout")).status_code == 302
    event = AuditEvent.objects.get(action="logout")
    assert event.actor == "vera-viewer" and event.actor_user_id == viewer_user.pk and event.source_address
    client.post(reverse("accounts:logout"))  # not logged in any more: nothing to audit
    assert AuditEvent.objects.filter(action="logout").count() == 1
