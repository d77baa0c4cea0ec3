"""manage.py channel_move CHANNEL --source HOST:PORT | --replica HOST:PORT --user NAME: a planned move of either
end of a DR channel (or both), the same plan as the channel page's. apps/operations/cli.py: the plan printed
(guards, the SQL per backend), asked unless --yes, run here; exit 0 done, 2 refused, 3 rolled back, 4 failed;
--json lines."""

from django.core.management.base import CommandError

from apps.dr import moves
from apps.dr.models import ReplicationChannel
from apps.operations.cli import OperationCommand, server_of


class Command(OperationCommand):
    help = "Move a DR channel's source and/or replica to another node of its cluster (exit 0/2/3/4)."

    def add_target_arguments(self, parser):
        parser.add_argument("channel", help="the channel's name")

    def add_plan_arguments(self, parser):
        parser.add_argument(
            "--source", metavar="HOST:PORT", help="the source cluster's node the channel reads from next"
        )
        parser.add_argument(
            "--replica", metavar="HOST:PORT", help="the replica cluster's node that runs the channel next"
        )

    def cluster_of(self, o):
        """A channel move runs on its replica cluster (where the channel's statements go)."""
        self.channel = (
            ReplicationChannel.objects.select_related(
                "source_cluster", "replica_cluster", "source_server__cluster", "replica_server__cluster"
            )
            .filter(name=o["channel"])
            .first()
        )
        if self.channel is None:
            raise CommandError(f"no DR channel named {o['channel']!r}")
        if not (o["source"] or o["replica"]):
            raise CommandError("say where to: --source HOST:PORT, --replica HOST:PORT, or both")
        return self.channel.replica_cluster

    def build_plan(self, cluster, o):
        channel = self.channel
        new_source = server_of(channel.source_cluster, o["source"]) if o["source"] else None
        new_replica = server_of(channel.replica_cluster, o["replica"]) if o["replica"] else None
        return moves.plan_move(channel, new_source=new_source, new_replica=new_replica, reason="planned move")
