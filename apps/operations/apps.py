from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "apps.operations"
