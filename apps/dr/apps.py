from django.apps import AppConfig


class DrConfig(AppConfig):
    name = "apps.dr"
    verbose_name = "Disaster-recovery channels"
