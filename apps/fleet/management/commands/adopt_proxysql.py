"""Adopt a ProxySQL node from the command line, through the same preview and apply as the web form.

    manage.py adopt_proxysql --host 10.0.0.5 --port 6032 --user admin --cluster galera-prod --node-name proxysql-a
    (password from $PROXYSQL_ADMIN_PASSWORD; prints the preview with how each role was decided; --yes applies it)

A new cluster's kind, hostgroups and writer-is-also-reader policy are inferred from the node; --kind,
--writer-hostgroup, --reader-hostgroup, --backup-writer-hostgroup, --offline-hostgroup and
--writer-is-also-reader correct them (validated like the form's fields).
"""

import os

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from apps.audit.actor import Actor
from apps.configuration import adoption as adopt
from apps.fleet.choices import ClusterKind, WriterIsAlsoReader
from apps.fleet.forms import RolesForm, parse_backend_hosts, parse_hostgroups
from apps.fleet.models import ProxySQLNode

ROLE_OPTIONS = (
    "kind",
    "writer_hostgroup",
    "reader_hostgroup",
    "backup_writer_hostgroup",
    "offline_hostgroup",
    "writer_is_also_reader",
)


class Command(BaseCommand):
    help = "Read a ProxySQL admin endpoint, print what adopting it would change, and apply it with --yes."

    def add_arguments(self, parser):
        parser.add_argument("--host", required=True)
        parser.add_argument("--port", type=int, default=6032)
        parser.add_argument("--user", required=True)
        parser.add_argument(
            "--password-env",
            default="PROXYSQL_ADMIN_PASSWORD",
            help="environment variable holding the admin password (never a command-line argument)",
        )
        parser.add_argument("--cluster", required=True, help="existing cluster name, or the name of a new one")
        parser.add_argument("--node-name", required=True)
        parser.add_argument("--kind", help="cluster kind: " + ", ".join(ClusterKind.values))
        for role in ("writer", "reader", "backup-writer", "offline"):
            parser.add_argument(f"--{role}-hostgroup", metavar="ID", help=f"the {role.replace('-', ' ')} hostgroup")
        parser.add_argument(
            "--writer-is-also-reader",
            metavar="0|1|2",
            help="; ".join(str(label) for label in WriterIsAlsoReader.labels),
        )
        parser.add_argument(
            "--hostgroups",
            default="",
            help="for a ProxySQL that fronts several clusters: this "
            "cluster's hostgroup ids, comma-separated (default: the proposed group)",
        )
        parser.add_argument(
            "--backend-hosts",
            default="",
            help="a new cluster: the node's backends (host:port, "
            "comma-separated) that may receive its monitor credentials; the others are not read, and "
            "not polled after the adoption until an admin adds them to its credential hosts",
        )
        parser.add_argument("--overwrite", action="store_true")
        parser.add_argument("--yes", action="store_true", help="apply the plan (without it: preview only)")
        parser.add_argument("--if-new", action="store_true", help="do nothing when this endpoint is already adopted")

    def handle(self, **o):
        choices = RolesForm({name: "" if o[name] is None else o[name] for name in ROLE_OPTIONS})
        if not choices.is_valid():
            raise CommandError(
                "; ".join(
                    f"--{name.replace('_', '-')}: {' '.join(errors)}" if name != "__all__" else " ".join(errors)
                    for name, errors in choices.errors.items()
                )
            )
        if (
            o["if_new"]
            and ProxySQLNode.objects.filter(
                cluster__name=o["cluster"], admin_host=o["host"], admin_port=o["port"]
            ).exists()
        ):
            self.stdout.write(f"{o['host']}:{o['port']} is already adopted in cluster {o['cluster']}")
            return
        try:
            hostgroups = parse_hostgroups(o["hostgroups"])
        except ValidationError as exc:
            raise CommandError(f"--hostgroups: {' '.join(exc.messages)}") from None
        try:
            backend_hosts = parse_backend_hosts(o["backend_hosts"])
        except ValidationError as exc:
            raise CommandError(f"--backend-hosts: {' '.join(exc.messages)}") from None
        password = os.environ.get(o["password_env"], "")
        data = choices.cleaned_data
        try:
            plan, monitor = adopt.preview(
                admin_host=o["host"],
                admin_port=o["port"],
                admin_user=o["user"],
                admin_password=password,
                cluster_name=o["cluster"],
                node_name=o["node_name"],
                kind=data["kind"] or None,
                roles=choices.roles,
                writer_is_also_reader=data["writer_is_also_reader"],
                overwrite=o["overwrite"],
                hostgroups=hostgroups or None,
                backend_hosts=backend_hosts,
            )
        except adopt.AdoptionError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"cluster {plan.cluster_name} ({'existing' if plan.cluster_exists else 'new'}), "
            f"kind {plan.kind}, hostgroups {plan.roles}, writer is also reader: {plan.policy_label}"
        )
        self.stdout.write("how it was decided:")
        for reason in plan.reasons:
            self.stdout.write(f"  {reason['label']}: {reason['shown']}")
            for evidence in reason["evidence"]:
                self.stdout.write(f"    by: {evidence}")
            for conflict in reason["conflicts"]:
                self.stdout.write(f"    against: {conflict}")
        for b in plan.backends:
            if b["error"]:
                self.stdout.write(f"  backend {b['hostname']}:{b['port']} not read: {b['error']}")
        self.stdout.write(f"rows: {plan.counts()}; new backends: {', '.join(plan.servers_new) or 'none'}")
        for m in plan.members:
            self.stdout.write(
                f"ProxySQL Cluster node {m['hostname']}:{m['port']}: "
                + (f"already adopted as {m['adopted_as']}" if m["adopted_as"] else f"adopted as {m['name']}")
            )
        for warning in plan.warnings:
            self.stdout.write(f"warning: {warning}")
        if not plan.ok:
            raise CommandError("; ".join(plan.errors))
        if not o["yes"]:
            self.stdout.write("preview only: run again with --yes to apply")
            return
        actor = Actor.command(label=f"adopt_proxysql ({o['user']}@{o['host']})")  # no console user: the account read
        try:
            cluster, nodes, versions = adopt.confirm(
                plan,
                monitor,
                admin_user=o["user"],
                admin_password=password,
                actor=actor,
                peers=adopt.listed_peers(plan),
                backend_hosts=backend_hosts,
            )
        except adopt.AdoptionError as exc:
            raise CommandError(str(exc)) from None
        for node, version in zip(nodes, versions):
            self.stdout.write(
                f"adopted {node} into cluster {cluster}"
                + (f"; configuration version {version.number} recorded" if version else "")
            )
