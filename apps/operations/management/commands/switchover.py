"""manage.py switchover CLUSTER --to HOST:PORT --user NAME [--yes] [--json]: a planned switchover of the writer,
from the command line (apps/operations/cli.py: exit 0 done, 2 refused, 3 rolled back, 4 failed)."""

import argparse

from django.core.management.base import CommandError

from apps.operations import switchover
from apps.operations.choices import OnDrainTimeout
from apps.operations.cli import OperationCommand, server_of
from apps.operations.forms import DRAIN_TIMEOUT_MAX_MS, DRAIN_TIMEOUT_MIN_MS


def add_drain_arguments(parser):
    parser.add_argument("--drain-timeout-ms", type=int, help="default: the cluster's drain_timeout_ms")
    parser.add_argument(
        "--on-timeout",
        choices=OnDrainTimeout.values,
        default=OnDrainTimeout.ROLLBACK,
        help="when sessions still hold the server at the timeout: roll back (default), or offline_hard (cuts them)",
    )


def drain_timeout(options):
    value = options["drain_timeout_ms"]
    if value is not None and not DRAIN_TIMEOUT_MIN_MS <= value <= DRAIN_TIMEOUT_MAX_MS:
        raise CommandError(f"--drain-timeout-ms must be from {DRAIN_TIMEOUT_MIN_MS} to {DRAIN_TIMEOUT_MAX_MS}")
    return value


class Command(OperationCommand):
    help = "Switch a cluster's writer to another backend: plan, confirm, run, follow (exit 0/2/3/4)."

    def add_plan_arguments(self, parser):
        parser.add_argument("--to", required=True, metavar="HOST:PORT", help="the backend that becomes the writer")
        add_drain_arguments(parser)
        parser.add_argument(
            "--lower-autoinc",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="lower mysql-auto_increment_delay_multiplex to 0 during the drain (restored after): "
            "the way through sessions pinned by auto-increment tokens. Default: the plan lowers it "
            "when it finds such sessions, and says why; --no-lower-autoinc never does",
        )
        parser.add_argument("--old-writer-to", choices=["reader", "offline"], default="reader")

    def build_plan(self, cluster, o):
        return switchover.plan_switchover(
            cluster,
            server_of(cluster, o["to"]),
            drain_timeout_ms=drain_timeout(o),
            on_timeout=o["on_timeout"],
            lower_autoinc=o["lower_autoinc"],
            old_writer_to=o["old_writer_to"],
        )
