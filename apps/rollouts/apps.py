from django.apps import AppConfig


class RolloutsConfig(AppConfig):
    name = "apps.rollouts"
    verbose_name = "Fleet rollouts"

    def ready(self):
        # why: models load only once the app registry is ready, which ready() is for
        from . import canary

        canary.register()  # the canary's operation kind and its bake step (executor handlers)
