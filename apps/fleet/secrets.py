"""Credentials at rest: Fernet tokens with a list of keys (settings.CREDENTIALS_KEYS).

The first key encrypts; every key decrypts. To rotate: put a new key first, keep the old one after
it, run `manage.py rotate_credentials`, then drop the old key.
"""

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models

PREFIX = "fernet:"


def _fernet():
    try:
        return MultiFernet([Fernet(key.encode() if isinstance(key, str) else key) for key in settings.CREDENTIALS_KEYS])
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(f"CREDENTIALS_KEYS holds an invalid Fernet key: {exc}") from None


def encrypt(plain):
    if plain in (None, ""):
        return plain
    return PREFIX + _fernet().encrypt(plain.encode("utf-8")).decode("ascii")


def decrypt(stored):
    if stored in (None, "") or not stored.startswith(PREFIX):
        return stored
    try:
        return _fernet().decrypt(stored[len(PREFIX) :].encode("ascii")).decode("utf-8")
    except InvalidToken:
        raise ImproperlyConfigured(
            "a stored credential cannot be decrypted with CREDENTIALS_KEYS "
            "(was a key removed before rotate_credentials ran?)"
        ) from None


class Ciphertext(str):
    """A value that is already a stored token: written to the column as it is."""


def rotate(stored):
    """Re-encrypt a stored token with the first key."""
    if stored in (None, ""):
        return stored
    if not stored.startswith(PREFIX):
        return Ciphertext(encrypt(stored))
    return Ciphertext(PREFIX + _fernet().rotate(stored[len(PREFIX) :].encode("ascii")).decode("ascii"))


class EncryptedTextField(models.TextField):
    """A text column holding a Fernet token; Python sees the plain value. Never rendered back in forms."""

    def from_db_value(self, value, expression, connection):
        return decrypt(value)

    def get_prep_value(self, value):
        if isinstance(value, Ciphertext):
            return str(value)
        value = super().get_prep_value(value)
        if value is None or value == "":
            return value
        return encrypt(value)
