from django.db import models


class ChannelState(models.TextChoices):
    """One word for the operator about a replication channel (polling.channel_state), in its latest document."""

    RUNNING = "running", "running"
    CONNECTING = "connecting", "connecting"
    STOPPED = "stopped", "stopped"
    ERROR = "error", "error"
    UNREACHABLE = "unreachable", "unreachable"
    MISDIRECTED = "misdirected", "misdirected"
