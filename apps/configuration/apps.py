from django.apps import AppConfig


class ConfigurationConfig(AppConfig):
    name = "apps.configuration"
    verbose_name = "configuration versions and change sets"

    def ready(self):
        # why: models load only once the app registry is ready, which ready() is for
        from . import change_set_kind

        change_set_kind.register()  # a change set applied: its operation kind and steps (apps.plans.registry)
