from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "apps.rollouts"
    verbose_name = "Fleet rollouts"

    def ready(self):
        from . import canary

        canary.register()  # the canary's operation kind and its bake step (executor handlers)
