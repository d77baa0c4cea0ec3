from django.apps import AppConfig


class ConfigurationConfig(AppConfig):
    name = "apps.configuration"
    verbose_name = "configuration versions and change sets"

    def ready(self):
        from . import change_set_kind

        change_set_kind.register()  # a change set applied: its operation kind and steps (apps.plans.registry)
