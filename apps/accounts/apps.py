from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps
from django.contrib.auth.signals import user_logged_out


class AccountsConfig(AppConfig):
    name = "apps.accounts"

    def ready(self):
        # why: models load only once the app registry is ready, which ready() is for
        from .services import audit_logout

        user_logged_out.connect(audit_logout, dispatch_uid="apps.accounts.audit_logout")


class ConsoleAdminConfig(admin_apps.AdminConfig):
    """Django's admin (INSTALLED_APPS names this in its place) on the site of adminsite.py."""

    default = False  # not the accounts app's configuration
    default_site = "apps.accounts.adminsite.ConsoleAdminSite"
