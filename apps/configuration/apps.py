from django.apps import AppConfig


class ConfigurationConfig(AppConfig):
    name = "apps.configuration"
    verbose_name = "configuration versions and change sets"
