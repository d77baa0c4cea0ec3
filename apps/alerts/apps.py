from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "apps.alerts"
    verbose_name = "Alerts and notifications"
