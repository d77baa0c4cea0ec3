"""Who may scrape /metrics. Prometheus has no session, so the page is outside the login (LoginRequiredMiddleware)
and has this check of its own instead: a bearer token (settings.METRICS_TOKEN, compared in constant time as
SHA-256 digests, so neither its length nor its bytes leak through timing), a user's API token whose user is a
viewer or above, or the peer address (REMOTE_ADDR, never a forwarded header a client could write) in
settings.METRICS_ALLOWED_ADDRESSES. A refusal is a 401 (a token
would let the scraper in: WWW-Authenticate says Bearer) or a 403, and audited (repeated identical refusals are
folded into one summary per window by apps.audit.services.record)."""

import hashlib
import hmac
import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpResponse

from apps.accounts import tokens as api_tokens
from apps.accounts.roles import VIEWER, has_role
from apps.audit.services import record

REALM = 'Bearer realm="proxysql-fleet metrics"'


def _digest(token):
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@lru_cache(maxsize=8)
def _expected(configured):
    """The digest of the configured token (settings.py has checked its form), or None when there is none."""
    if not configured:
        return None
    if configured.startswith("sha256:"):
        return bytes.fromhex(configured[len("sha256:") :])
    return _digest(configured)


@lru_cache(maxsize=8)
def _networks(cidrs):
    return tuple(ipaddress.ip_network(c, strict=False) for c in cidrs)


def address_allowed(address, cidrs):
    """True when the address is inside one of the CIDRs (an IPv4-mapped IPv6 address counts as its IPv4 one)."""
    try:
        ip = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return False
    candidates = [ip] + ([ip.ipv4_mapped] if ip.version == 6 and ip.ipv4_mapped else [])
    return any(c in net for c in candidates for net in _networks(tuple(cidrs)) if c.version == net.version)


def token_matches(presented):
    expected = _expected(settings.METRICS_TOKEN)
    return expected is not None and hmac.compare_digest(_digest(presented), expected)


def _bearer(request):
    """The bearer token of the Authorization header, "" when there is none, None for another scheme."""
    header = request.META.get("HTTP_AUTHORIZATION", "")
    if not header:
        return ""
    scheme, _, credentials = header.strip().partition(" ")
    return credentials.strip() if scheme.lower() == "bearer" else None


def refusal(request):
    """None when this request may read /metrics; else the 401/403 response to send (the refusal is audited)."""
    token = _bearer(request)
    if token:
        if token_matches(token):
            return None
        if token.startswith(api_tokens.PREFIX):
            return _api_token_refusal(request, token)
        return _refuse(request, 401, "the bearer token is not valid for /metrics")
    if token is None:
        return _refuse(request, 401, "/metrics takes a bearer token (Authorization: Bearer ...), not another scheme")
    if address_allowed(request.META.get("REMOTE_ADDR"), settings.METRICS_ALLOWED_ADDRESSES):
        return None
    if _expected(settings.METRICS_TOKEN) is not None:
        return _refuse(request, 401, "no bearer token, and the address is not in METRICS_ALLOWED_ADDRESSES")
    return _refuse(request, 403, "the address is not in METRICS_ALLOWED_ADDRESSES (and no METRICS_TOKEN is set)")


def _api_token_refusal(request, raw):
    """A user's API token (apps/accounts/tokens.py) lets in a viewer or above: a script with a viewer token reads
    here what the pages show it. The token's own refusals (unknown, expired, revoked) are audited by authenticate()."""
    try:
        user, _ = api_tokens.authenticate(raw, request=request)
    except api_tokens.Refused as exc:
        return _refuse(request, 401, f"the API token is refused: {exc}", audited=True)
    if not has_role(user, VIEWER):
        return _refuse(
            request,
            403,
            f"the API token's user {user.get_username()!r} has no role (a viewer at least may read /metrics)",
        )
    return None


def _refuse(request, status, reason, audited=False):
    if not audited:
        record(
            "refused metrics scrape",
            request=request,
            outcome="refused",
            target=request.path,
            details={"reason": reason, "status": status},
        )
    response = HttpResponse(reason + "\n", status=status, content_type="text/plain; charset=utf-8")
    if status == 401:
        response["WWW-Authenticate"] = REALM
    return response
