"""manage.py failover CLUSTER --to HOST:PORT --user NAME: the failover planner on an operator's word (the writer
is gone: the new one takes its place at once, without a drain). apps/operations/cli.py: exit 0 done,
2 refused (a writer that still answers is switched over instead, unless an admin overrides), 3, 4."""

from apps.operations import rules
from apps.operations.cli import OperationCommand, server_of


class Command(OperationCommand):
    help = "Fail a cluster's writer over to another backend now, without a drain (exit 0/2/3/4)."

    def add_plan_arguments(self, parser):
        parser.add_argument("--to", required=True, metavar="HOST:PORT", help="the backend that becomes the writer")

    def build_plan(self, cluster, o):
        return rules.plan_manual_failover(cluster, server_of(cluster, o["to"]))
