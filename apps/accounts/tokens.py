"""API tokens: made and revoked by their user (the tokens page), checked on every API request.

A token is "pfc_" and 43 random URL-safe characters (256 bits). It is shown once; the database keeps
its SHA-256 (a lookup by a unique index: one indexed read per request) and its first 12 characters,
so the user can tell their tokens apart. A token may expire; a revoked or expired token is refused with
401. Its last use is written at most once a minute, so a busy script does not turn reads into writes.
Making and revoking a token are audited; a refused token is audited as a refusal (folded when repeated).
"""

import hashlib
import hmac
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.fleet.validators import has_invisible
from controlplane.client_address import client_address

from .models import ApiToken

PREFIX = "pfc_"
VISIBLE = len(PREFIX) + 8
LAST_USED_EVERY = timedelta(seconds=60)
MAX_LENGTH = 200  # anything longer is not one of ours: refused before hashing


class Refused(Exception):
    """The token cannot be used; the message says why (unknown, revoked, expired, user inactive)."""


def digest(raw):
    return hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def create(user, name, *, actor=None, expires_at=None):
    """(token, the secret to show once). Refused when the user already has an active token of that name
    (the audit log tells tokens apart by name). `actor`: who makes it (by default the user, at the command line)."""
    actor = actor or Actor.command(user)
    name = name.strip()
    now = timezone.now()
    if not name:
        raise Refused("A token needs a name (what it is for).")
    if has_invisible(name):
        raise Refused("A token's name cannot hold line breaks, tabs or invisible characters.")
    if expires_at is not None and expires_at <= now:
        raise Refused("The expiry must be in the future.")
    raw = PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        taken = [
            t
            for t in ApiToken.objects.select_for_update().filter(user=user, name=name, revoked_at__isnull=True)
            if t.state(now) == "active"
        ]
        if taken:
            raise Refused(f"You already have an active token named {name!r}: revoke it first, or choose another name.")
        token = ApiToken.objects.create(
            user=user, name=name, prefix=raw[:VISIBLE], key_hash=digest(raw), expires_at=expires_at
        )
        record(
            "api token created",
            actor=actor,
            target=f"token {token}",
            details={
                "token": token.pk,
                "name": name,
                "prefix": token.prefix,
                "expires_at": expires_at.isoformat() if expires_at else None,
            },
        )
    return token, raw


def revoke(token, *, actor):
    with transaction.atomic():
        updated = ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        record(
            "api token revoked",
            actor=actor,
            target=f"token {token}",
            outcome="success" if updated else "refused",
            details={"token": token.pk, "name": token.name, "prefix": token.prefix, "owner": token.user.get_username()},
        )
    if not updated:
        raise Refused("This token was already revoked.")


def authenticate(raw, *, request=None):
    """The token's (user, token) for a raw bearer value; Refused with the reason otherwise (audited)."""
    now = timezone.now()
    token = None
    if not raw or len(raw) > MAX_LENGTH or not raw.startswith(PREFIX):
        reason = "not an API token of this console"
    else:
        wanted = digest(raw)
        token = ApiToken.objects.select_related("user").filter(key_hash=wanted).first()
        # The index found it by its hash; compare again in constant time all the same.
        if token is None or not hmac.compare_digest(token.key_hash, wanted):
            token, reason = None, "unknown token"
        elif token.state(now) != "active":
            reason = f"this token is {token.state(now)}"
        elif not token.user.is_active:
            reason = "this token's user is inactive"
        else:
            reason = None
    if reason:
        record(
            "api token refused",
            request=request,
            outcome="refused",
            target=f"token {token}" if token else "",
            details={
                "reason": reason,
                "prefix": raw[:VISIBLE] if raw and raw.startswith(PREFIX) else "",
                "user": token.user.get_username() if token else None,
            },
        )
        raise Refused(reason)
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
        address = client_address(request) if request is not None else None
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now, last_used_from=address or None)
        token.last_used_at, token.last_used_from = now, address
    return token.user, token
