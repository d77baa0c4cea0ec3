"""manage.py restore CLUSTER --server HOST:PORT --user NAME: a backend back from maintenance, from the command
line (apps/operations/cli.py: exit 0 done, 2 refused, 3 rolled back, 4 failed)."""

from apps.operations import drain
from apps.operations.cli import OperationCommand, server_of


class Command(OperationCommand):
    help = "Restore a drained backend: plan, confirm, run, follow (exit 0/2/3/4)."

    def add_plan_arguments(self, parser):
        parser.add_argument("--server", required=True, metavar="HOST:PORT")

    def build_plan(self, cluster, o):
        return drain.plan_restore(server_of(cluster, o["server"]))
