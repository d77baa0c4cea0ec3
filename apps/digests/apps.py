from django.apps import AppConfig


class DigestsConfig(AppConfig):
    name = "apps.digests"
    verbose_name = "Query digests"
