from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "apps.operations"

    def ready(self):
        from . import kinds

        kinds.register()  # how each operation kind is planned again at start (recheck.replan), change sets' steps
