from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "apps.rollouts"
    verbose_name = "Fleet rollouts"
