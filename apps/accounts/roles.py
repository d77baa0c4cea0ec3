"""Roles: viewer < operator < admin, as Django groups. A superuser is an admin.

viewer   reads every page.
operator also runs operations (switchover, drain) and adopts ProxySQL nodes.
admin    also edits the inventory, overrides failed guards with a reason, manages users.
"""

from functools import wraps

from django.core.exceptions import PermissionDenied

from apps.audit.services import record

VIEWER, OPERATOR, ADMIN = "viewer", "operator", "admin"
ROLES = (VIEWER, OPERATOR, ADMIN)
_RANK = {None: 0, VIEWER: 1, OPERATOR: 2, ADMIN: 3}


def role_of(user):
    """The highest role the user holds, or None."""
    if not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return ADMIN
    names = getattr(user, "_role_names", None)
    if names is None:
        names = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        user._role_names = names
    return role_from(False, names)


def role_from(is_superuser, group_names):
    """The role that a superuser flag and these group names give."""
    if is_superuser:
        return ADMIN
    return next((role for role in reversed(ROLES) if role in group_names), None)


def has_role(user, role):
    return _RANK[role_of(user)] >= _RANK[role]


def require_role(role):
    """View decorator: 403 (and an audited refusal) unless the user holds `role` or higher."""

    def decorator(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not has_role(request.user, role):
                record(
                    f"refused {view.__name__}",
                    request=request,
                    outcome="refused",
                    details={"needed_role": role, "path": request.path, "method": request.method},
                )
                raise PermissionDenied(f"This needs the {role} role.")
            return view(request, *args, **kwargs)

        wrapped.required_role = role
        return wrapped

    return decorator
