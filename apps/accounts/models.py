from django.db import models


class LoginFailure(models.Model):
    """A failed login, kept for throttling (by user name and by source address)."""

    username = models.CharField(max_length=150, db_index=True)
    source_address = models.GenericIPAddressField(null=True, db_index=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
