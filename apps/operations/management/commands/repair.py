"""manage.py repair CLUSTER [--node NAME] --user NAME: ProxySQL nodes back to the inventory's rows and managed
variables (apps/operations/cli.py: exit 0 done, 2 refused, 3 rolled back, 4 failed)."""

from django.core.management.base import CommandError

from apps.operations import repair
from apps.operations.cli import OperationCommand


class Command(OperationCommand):
    help = "Repair one ProxySQL node (or every node) of a cluster from the inventory (exit 0/2/3/4)."

    def add_plan_arguments(self, parser):
        parser.add_argument("--node", metavar="NAME", help="one ProxySQL node of the cluster, by name (default: all)")

    def build_plan(self, cluster, o):
        node_ids = None
        if o["node"]:
            node = cluster.proxysql_nodes.filter(name=o["node"]).first()
            if node is None:
                names = ", ".join(cluster.proxysql_nodes.order_by("name").values_list("name", flat=True))
                raise CommandError(f"no ProxySQL node {o['node']!r} in cluster {cluster.name} (its nodes: {names})")
            node_ids = [node.pk]
        return repair.plan_repair(cluster, node_ids)
