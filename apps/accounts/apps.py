from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"

    def ready(self):
        from django.contrib.auth.signals import user_logged_out

        from .services import audit_logout

        user_logged_out.connect(audit_logout, dispatch_uid="apps.accounts.audit_logout")
