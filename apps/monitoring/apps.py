from django.apps import AppConfig


class MonitoringConfig(AppConfig):
    name = "apps.monitoring"
