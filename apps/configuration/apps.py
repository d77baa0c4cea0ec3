from django.apps import AppConfig


class ConfigurationConfig(AppConfig):
    name = "apps.configuration"
    verbose_name = "configuration versions and change sets"

    def ready(self):
        from apps.operations.choices import OperationKind
        from apps.operations.plans import REPLANNERS, STEP_HANDLERS

        from . import planner, steps

        STEP_HANDLERS[planner.CONFIG_VERIFY] = steps.verify
        STEP_HANDLERS[planner.CONFIG_RECORD] = steps.record
        REPLANNERS[OperationKind.CONFIG] = planner.replan
