"""Adopt a ProxySQL node from the command line, through the same preview and apply as the web form.

    manage.py adopt_proxysql --host 10.0.0.5 --port 6032 --user admin --cluster galera-prod --node-name proxysql-a
    (password from $PROXYSQL_ADMIN_PASSWORD; prints the preview; --yes applies it)
"""
import os

from django.core.management.base import BaseCommand, CommandError

from apps.clients.proxysql import ProxySQLAdmin
from apps.clients.wire import ClientError
from apps.fleet import adopt
from apps.fleet.models import ProxySQLNode


class Command(BaseCommand):
    help = "Read a ProxySQL admin endpoint, print what adopting it would change, and apply it with --yes."

    def add_arguments(self, parser):
        parser.add_argument("--host", required=True)
        parser.add_argument("--port", type=int, default=6032)
        parser.add_argument("--user", required=True)
        parser.add_argument("--password-env", default="PROXYSQL_ADMIN_PASSWORD",
                            help="environment variable holding the admin password (never a command-line argument)")
        parser.add_argument("--cluster", required=True, help="existing cluster name, or the name of a new one")
        parser.add_argument("--node-name", required=True)
        parser.add_argument("--overwrite", action="store_true")
        parser.add_argument("--yes", action="store_true", help="apply the plan (without it: preview only)")
        parser.add_argument("--if-new", action="store_true", help="do nothing when this endpoint is already adopted")

    def handle(self, **o):
        if o["if_new"] and ProxySQLNode.objects.filter(admin_host=o["host"], admin_port=o["port"]).exists():
            self.stdout.write(f"{o['host']}:{o['port']} is already adopted")
            return
        password = os.environ.get(o["password_env"], "")
        admin = ProxySQLAdmin(o["host"], o["port"], o["user"], password, name=f"ProxySQL {o['host']}:{o['port']}")
        try:
            with admin:
                snapshot = adopt.read_snapshot(admin)
                monitor = adopt.read_monitor_credentials(admin)
        except ClientError as exc:
            raise CommandError(f"Could not read the ProxySQL node: {exc}") from None
        plan = adopt.plan_adoption(snapshot, cluster_name=o["cluster"], node_name=o["node_name"], admin_host=o["host"],
                                   admin_port=o["port"], overwrite=o["overwrite"])
        self.stdout.write(f"cluster {plan.cluster_name} ({'existing' if plan.cluster_exists else 'new'}), "
                          f"kind {plan.kind}, hostgroups {plan.roles}")
        self.stdout.write(f"rows: {plan.counts()}; new backends: {', '.join(plan.servers_new) or 'none'}")
        for warning in plan.warnings:
            self.stdout.write(f"warning: {warning}")
        if not plan.ok:
            raise CommandError("; ".join(plan.errors))
        if not o["yes"]:
            self.stdout.write("preview only: run again with --yes to apply")
            return
        try:
            cluster, node = adopt.apply_adoption(plan, admin_user=o["user"], admin_password=password, monitor=monitor)
        except adopt.AdoptionError as exc:
            raise CommandError(str(exc)) from None
        from apps.configuration.services import record_adopted

        version = record_adopted(cluster, node, author=f"adopt_proxysql ({o['user']}@{o['host']})")
        self.stdout.write(f"adopted {node} into cluster {cluster}"
                          + (f"; configuration version {version.number} recorded" if version else ""))
