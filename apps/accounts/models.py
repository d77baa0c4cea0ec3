from django.conf import settings
from django.db import models


class LoginFailure(models.Model):
    """A login attempt, counted for throttling (by user name and by source address): written before its password
    is checked (views.claim_attempt), deleted when the login succeeds or is refused; the failures stay."""

    username = models.CharField(max_length=150, db_index=True)
    source_address = models.GenericIPAddressField(null=True, db_index=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)


class ApiToken(models.Model):
    """A user's token for the JSON API. The secret is shown once, when it is made; only its SHA-256 is kept
    (a random 256-bit secret needs no slow hash), with a short visible prefix to tell tokens apart. A token
    acts with its user's role, as the user would in the browser. See apps/accounts/tokens.py."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100, help_text="what it is for (e.g. ci-runner); named in the audit log")
    prefix = models.CharField(max_length=16, help_text="the token's first characters, shown to tell tokens apart")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the whole token, hex")
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_from = models.GenericIPAddressField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]

    def __str__(self):
        return f"{self.name} ({self.prefix}…)"

    def state(self, now):
        if self.revoked_at:
            return "revoked"
        if self.expires_at and self.expires_at <= now:
            return "expired"
        return "active"
