"""manage.py record_nodes CLUSTER --user NAME --reason "..." [--yes]: record what every ProxySQL node of the cluster
runs (its mysql_servers rows) as the next configuration version (apps/operations/record_nodes.py). Prints the
difference first; without --yes it asks. Exit 0 recorded, 2 refused."""

import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.audit.actor import Actor
from apps.configuration.services import Refused
from apps.fleet.models import Cluster
from apps.operations import record_nodes


class Command(BaseCommand):
    help = "Record what every node of a cluster runs (mysql_servers) as its next configuration version (admin)."

    def add_arguments(self, parser):
        parser.add_argument("cluster")
        parser.add_argument("--user", required=True, help="who records it (a user with the admin role)")
        parser.add_argument("--reason", required=True, help="why the nodes' rows become intent")
        parser.add_argument("--yes", action="store_true", help="do not ask")

    def handle(self, *args, **o):
        cluster = Cluster.objects.filter(name=o["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster {o['cluster']!r}")
        user = get_user_model().objects.filter(username=o["user"]).first()
        if user is None:
            raise CommandError(f"no user {o['user']!r}")
        reading = record_nodes.read(cluster)
        if reading.refusal:
            self.stderr.write(reading.refusal)
            sys.exit(2)
        self.stdout.write(f"version {reading.version} -> what every node runs:")
        for line in reading.lines:
            fields = "; ".join(f"{f['name']}: {f['before']} -> {f['after']}" for f in line["fields"])
            self.stdout.write(f"  {line['table']} {line['key']} {line['change']}" + (f" ({fields})" if fields else ""))
        if not o["yes"] and input(f"Record version {reading.version + 1}? [y/N] ").strip().lower() != "y":
            self.stderr.write("nothing recorded")
            sys.exit(2)
        try:
            version = record_nodes.record_nodes(
                cluster, actor=Actor.command(user), reason=o["reason"], expect_version=reading.version
            )
        except Refused as exc:
            self.stderr.write(str(exc))
            sys.exit(2)
        self.stdout.write(f"version {version.number} records what the nodes run")
