from django.apps import AppConfig


class DrConfig(AppConfig):
    name = "apps.dr"
    verbose_name = "Disaster-recovery channels"

    def ready(self):
        # why: models load only once the app registry is ready, which ready() is for
        from apps.monitoring import rollups

        from . import moves
        from .models import ChannelSample

        moves.register()  # the executor's handlers for the channel-move steps
        # History is rolled up (1 min, 1 h) and pruned with the monitoring tables: lag averaged (with its
        # extremes), sequence numbers at their highest, threads and reachability at their worst.
        rollups.SPECS[ChannelSample] = rollups.Spec(
            ["channel_id"],
            ["source_seq", "applied_seq"],
            ["reachable", "io_running", "sql_running"],
        )
        if ChannelSample not in rollups.TABLES:
            rollups.TABLES = rollups.TABLES + (ChannelSample,)
