"""Changes to users and roles, audited: who did it, which user, what changed -- never a password or
its hash. Django's admin (apps/accounts/admin.py) and `manage.py ensure_user` call these."""

from typing import Any

from django.contrib.auth.models import AbstractUser
from django.http import HttpRequest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.audit.services import record

from .roles import role_from


def user_state(user: AbstractUser) -> dict[str, Any]:
    """What an audit event says about a user: everything that grants or takes away access."""
    groups = sorted(user.groups.values_list("name", flat=True)) if user.pk else []
    return {
        "username": user.get_username(),
        "email": user.email,
        "first_name": user.first_name,
        "last_name": user.last_name,
        "is_active": user.is_active,
        "is_staff": user.is_staff,
        "is_superuser": user.is_superuser,
        "groups": groups,
        "role": role_from(user.is_superuser, groups),
        "permissions": sorted(
            f"{p.content_type.app_label}.{p.codename}" for p in user.user_permissions.select_related("content_type")
        )
        if user.pk
        else [],
        "can_log_in": user.is_active and user.has_usable_password(),
    }


def target_of(user: AbstractUser) -> str:
    return f"user {user.get_username()} (#{user.pk})"


def record_user_saved(user: AbstractUser, before: dict[str, Any] | None, *, actor: Actor) -> AuditEvent | None:
    """An "add user" event (before is None) or a "change user" event with each changed item as
    [before, after]; nothing when nothing changed."""
    after = user_state(user)
    if before is None:
        return record("add user", actor=actor, target=target_of(user), details={"user_id": user.pk, **after})
    changed = {key: [before[key], after[key]] for key in after if before.get(key) != after[key]}
    if changed:
        return record(
            "change user",
            actor=actor,
            target=target_of(user),
            details={"user_id": user.pk, "username": after["username"], "changed": changed},
        )
    return None


def record_credentials_reset(user: AbstractUser, *, actor: Actor) -> AuditEvent | None:
    """Its password was set or password-based login disabled (the event says which, not the value)."""
    how = "a new password was set" if user.has_usable_password() else "password-based login was disabled"
    return record(
        "reset user password",
        actor=actor,
        target=target_of(user),
        details={"user_id": user.pk, "username": user.get_username(), "credentials": how},
    )


def record_own_password_changed(user: AbstractUser, *, actor: Actor) -> AuditEvent | None:
    """A user changed its own password (the admin's password change page): who and from where, not the value."""
    return record(
        "change own password",
        actor=actor,
        target=target_of(user),
        details={"user_id": user.pk, "username": user.get_username()},
    )


def record_user_deleted(user_id: int, state: dict[str, Any], *, actor: Actor) -> AuditEvent | None:
    return record(
        "delete user",
        actor=actor,
        target=f"user {state['username']} (#{user_id})",
        details={"user_id": user_id, "before": state},
    )


def audit_logout(sender: type, request: HttpRequest, user: AbstractUser | None, **kwargs: Any) -> None:
    """user_logged_out: the console's logout and the admin's alike."""
    if user is not None:
        record("logout", request=request, user=user)
