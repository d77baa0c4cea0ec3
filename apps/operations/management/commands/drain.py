"""manage.py drain CLUSTER --server HOST:PORT --user NAME: a maintenance drain of one backend, from the command
line (apps/operations/cli.py: exit 0 done, 2 refused, 3 rolled back, 4 failed)."""

from apps.operations import drain
from apps.operations.cli import OperationCommand, server_of

from .switchover import add_drain_arguments, drain_timeout


class Command(OperationCommand):
    help = "Drain one backend for maintenance: plan, confirm, run, follow (exit 0/2/3/4)."

    def add_plan_arguments(self, parser):
        parser.add_argument("--server", required=True, metavar="HOST:PORT")
        add_drain_arguments(parser)
        parser.add_argument("--note", default="", help="why (shown on the server page and in the audit log)")

    def build_plan(self, cluster, o):
        return drain.plan_drain(
            server_of(cluster, o["server"]),
            drain_timeout_ms=drain_timeout(o),
            on_timeout=o["on_timeout"],
            note=o["note"],
        )
