"""The same roles as the pages, per endpoint and method: a view lists {method: role} in `roles`.

A method the view handles but does not list is refused (fail closed); the API's permission test
enumerates every URL and method, so an endpoint without a role fails it.
"""

from rest_framework import exceptions, permissions

from apps.accounts.roles import _RANK, has_role
from apps.audit.services import record

ALIASES = {"head": "get"}


def required_role(view_class, method):
    method = method.lower()
    return view_class.roles.get(ALIASES.get(method, method))


class RolePermission(permissions.BasePermission):
    def has_permission(self, request, view):
        if request.method not in view.allowed_methods:
            return True  # dispatch answers 405
        needed = required_role(type(view), request.method)
        if not request.user or not request.user.is_authenticated:
            raise exceptions.NotAuthenticated("Authenticate with `Authorization: Bearer <token>` or log in.")
        if needed is None or needed not in _RANK:
            raise exceptions.PermissionDenied(f"{request.method} on this endpoint declares no role.")
        if not has_role(request.user, needed):
            record(
                f"refused api {type(view).__name__}",
                request=request,
                outcome="refused",
                details={"needed_role": needed, "path": request.path[:300], "method": request.method},
            )
            raise exceptions.PermissionDenied(f"This needs the {needed} role.")
        return True
