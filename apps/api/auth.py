"""Who is asking: an API token (Authorization: Bearer ...) or the browser's session (with CSRF for writes)."""

from rest_framework import authentication, exceptions

from apps.accounts import tokens


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer <token>`, checked against the hashed tokens of apps.accounts. A request without
    the header is left to the session; a token that is unknown, revoked or expired is a 401."""

    keyword = "bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != self.keyword:
            raise exceptions.AuthenticationFailed("Use `Authorization: Bearer <token>`.")
        try:
            # The Django request, not DRF's: an audited refusal must not ask DRF who the user is (recursion).
            return tokens.authenticate(raw.strip(), request=request._request)
        except tokens.Refused as exc:
            raise exceptions.AuthenticationFailed(f"Token refused: {exc}.") from None

    def authenticate_header(self, request):
        return 'Bearer realm="api"'


class SessionAuthentication(authentication.SessionAuthentication):
    """The browser's login (the docs page's "Try it out"): writes need the CSRF token, as forms do."""
