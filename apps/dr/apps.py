from django.apps import AppConfig


class DrConfig(AppConfig):
    name = "apps.dr"
    verbose_name = "Disaster-recovery channels"

    def ready(self):
        from . import moves

        moves.register()  # the executor's handlers for the channel-move steps
