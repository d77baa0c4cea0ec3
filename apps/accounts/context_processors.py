from .roles import ADMIN, OPERATOR, has_role, role_of


def roles(request):
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"user_role": role_of(user), "can_operate": has_role(user, OPERATOR), "can_admin": has_role(user, ADMIN)}
