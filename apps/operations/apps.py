from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "apps.operations"

    def ready(self):
        from . import kinds, steps

        kinds.register()  # this app's operation kinds, one spec each (registry.py)
        steps.register()  # this app's step kinds, one handler each: the executor looks them up
