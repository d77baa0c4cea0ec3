from django.db import models


class ClusterKind(models.TextChoices):
    GALERA = "galera", "Galera / PXC"
    ASYNC = "async", "Async replication"
    GROUP_REPLICATION = "group_replication", "Group Replication"


class NativeManager(models.TextChoices):
    """Which of ProxySQL's own hostgroup managers (Monitor with an active row) places this cluster's servers."""

    NONE = "", "none: this product places the servers"
    GALERA = "galera", "ProxySQL's mysql_galera_hostgroups"
    REPLICATION = "replication", "ProxySQL's mysql_replication_hostgroups"
    GROUP_REPLICATION = "group_replication", "ProxySQL's mysql_group_replication_hostgroups"


class ServerStatus(models.TextChoices):
    """mysql_servers.status. SHUNNED is ProxySQL's own verdict: we show it, never write it."""

    ONLINE = "ONLINE", "ONLINE"
    OFFLINE_SOFT = "OFFLINE_SOFT", "OFFLINE_SOFT"
    OFFLINE_HARD = "OFFLINE_HARD", "OFFLINE_HARD"
    SHUNNED = "SHUNNED", "SHUNNED"

    @classmethod
    def colour(cls, status):
        return {"ONLINE": "green", "OFFLINE_SOFT": "amber", "OFFLINE_HARD": "red", "SHUNNED": "red"}.get(status, "grey")


WRITABLE_STATUSES = [c for c in ServerStatus.choices if c[0] != ServerStatus.SHUNNED]


class WriterIsAlsoReader(models.IntegerChoices):
    """As ProxySQL's mysql_galera_hostgroups defines it."""

    NO = 0, "0: the writer is not a reader"
    YES = 1, "1: the writer is also a reader"
    ONLY_BACKUP = 2, "2: backup writers are readers, the writer is not"


class HostgroupRole(models.TextChoices):
    WRITER = "writer", "writer"
    READER = "reader", "reader"
    BACKUP_WRITER = "backup_writer", "backup writer"
    OFFLINE = "offline", "offline"
    OTHER = "other", "other"


class ClusterSyncMode(models.TextChoices):
    """How a plan writes nodes that run ProxySQL Cluster sync of what it loads (operations/sync_hold.py)."""

    HOLD = "hold", "every node as one unit, the sync held off for the operation (default)"
    PROPAGATE = "propagate", "write one node, wait until every peer has pulled it"
