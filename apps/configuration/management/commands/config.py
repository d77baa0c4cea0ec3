"""Configuration as code from the command line, through the same change sets, plans and checks as the pages.

    manage.py config export CLUSTER [FILE]                 the current version (or --config-version N) as YAML
    manage.py config diff [CLUSTER] FILE                   what applying the file would change (writes nothing)
    manage.py config plan [CLUSTER] FILE [--user NAME]      the plan: findings, diffs, SQL per node (saves nothing)
    manage.py config apply [CLUSTER] FILE --user NAME --reason "..." [--yes] [--override-reason "..."]

The file is desired state: it applies against the cluster's current version whatever version it was exported
from, so applying it twice does nothing the second time; `--expect-version N` refuses unless the cluster is at
version N (an optimistic lock). The cluster is the file's `cluster:` unless given before the file.

`diff` exits 0 when the file equals the current intent, 2 when it differs, 1 on any error (unreadable file,
unknown cluster, bad YAML, unknown secret, --expect-version not met). `plan` exits 0 when nothing blocks (or
there is nothing to do), 2 when a finding blocks or the file is refused, so it fits a review pipeline. `apply`
plans, asks unless --yes, confirms as NAME (an operator; an admin to override blocking findings), runs it here
and now, and exits 0 done or nothing to do / 2 refused / 3 rolled back / 4 failed (or a rollback or finish
pending: a node still lacks what it should have).
"""

import json
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.roles import OPERATOR, has_role
from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import files, services
from apps.configuration.models import ChangeSet, ConfigVersion
from apps.configuration.change_set import diff_lines, plan_change_set, plan_from_file
from apps.fleet.models import Cluster
from apps.operations import executor
from apps.operations import services as operations
from apps.plans.vocabulary import Plan

DONE, REFUSED, ROLLED_BACK, FAILED = 0, 2, 3, 4
SAME, ERROR, CHANGES = 0, 1, 2  # config diff


class Command(BaseCommand):
    help = "Export a cluster's configuration as YAML, or diff / plan / apply a YAML file as desired state."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["export", "diff", "plan", "apply"])
        parser.add_argument(
            "names",
            nargs="+",
            metavar="CLUSTER|FILE",
            help="export: CLUSTER [FILE] (where to write it; default stdout); diff/plan/apply: "
            "[CLUSTER] FILE (the cluster defaults to the file's `cluster:`)",
        )
        parser.add_argument(
            "--config-version", type=int, dest="number", help="export: this version instead of the current one"
        )
        parser.add_argument(
            "--expect-version",
            type=int,
            dest="expect_version",
            help="diff/plan/apply: refuse unless the cluster's current version is this one",
        )
        parser.add_argument(
            "--user", help="apply (plan: optional): who plans and confirms (a user with the operator role)"
        )
        parser.add_argument(
            "--reason",
            help="apply: why (kept with the version and in the audit log; default: "
            '"from FILE"; a blank one is refused)',
        )
        parser.add_argument("--yes", action="store_true", help="apply: do not ask")
        parser.add_argument(
            "--override-reason", default="", help="apply: an admin's reason to override blocking findings"
        )
        parser.add_argument(
            "--json", action="store_true", help="diff/plan/apply: print the diff, plan and outcome as JSON"
        )

    def handle(self, **o):
        names = o["names"]
        if len(names) > 2:
            raise CommandError(f"too many arguments: {' '.join(names)} (at most CLUSTER and FILE)")
        if o["action"] == "export":
            return self.export(self.cluster(names[0]), names[1] if len(names) == 2 else None, o)
        path, name = names[-1], (names[0] if len(names) == 2 else None)
        if o["action"] == "diff":
            return self.diff(name, path, o)
        user = self.user(o["user"]) if o["action"] == "apply" or o["user"] else None
        text = self.read(path)
        try:
            cluster = self.cluster(name or files.cluster_of(text))
        except files.FileError as exc:
            self.say(o, {"outcome": "refused", "reason": str(exc)}, f"refused: The file cannot be used: {exc}")
            sys.exit(REFUSED)
        reason = f"from {path}" if o["reason"] is None else o["reason"]
        try:
            if o["action"] == "plan":  # a preview: no change set, no operation left behind
                plan, _ = plan_change_set(
                    services.validate_file(cluster, text, reason=reason, expect_version=o["expect_version"])
                )
            else:
                op = plan_from_file(
                    cluster, text, actor=Actor.command(user), reason=reason, expect_version=o["expect_version"]
                )
                plan = Plan.from_json(op.plan)
        except services.NothingToDo as exc:
            self.say(o, {"outcome": "nothing to do", "version": exc.version.number}, str(exc))
            sys.exit(DONE)
        except services.Refused as exc:  # NotPlanned too: the change set is kept as a draft
            self.say(o, {"outcome": "refused", "reason": str(exc)}, f"refused: {exc}")
            sys.exit(REFUSED)
        if o["action"] == "plan":
            self.print_plan(o, None, plan)
            sys.exit(REFUSED if plan.failed_guards else DONE)
        self.print_plan(o, op, plan)
        if not o["yes"]:
            answer = input(f"Apply this to {cluster.proxysql_nodes.count()} ProxySQL node(s)? Type 'yes': ")
            if answer.strip().lower() != "yes":
                self.say(o, {"outcome": "not confirmed"}, "not confirmed: nothing was done")
                sys.exit(REFUSED)
        try:
            operations.confirm(op, actor=Actor.command(user), override_reason=o["override_reason"], enqueue=False)
        except operations.NotAllowed as exc:
            self.say(o, {"outcome": "refused", "reason": str(exc)}, f"refused: {exc}")
            sys.exit(REFUSED)
        executor.run(op.pk)
        op.refresh_from_db()
        version = ChangeSet.objects.get(operation=op).result
        self.say(
            o,
            {
                "outcome": op.state,
                "operation": op.pk,
                "error": op.error,
                "version": version.number if version else None,
                "timings": op.timings,
            },
            f"{op.state}: operation #{op.pk}"
            + (f", version {version.number}" if version else "")
            + (f" — {op.error}" if op.error else ""),
        )
        sys.exit({"done": DONE, "rolled_back": ROLLED_BACK, "cancelled": ROLLED_BACK}.get(op.state, FAILED))

    def diff(self, name, path, o):
        """The intended diff of a file against the current version; reads only."""
        try:
            text = self.read(path)
            cluster = self.cluster(name or files.cluster_of(text))
            current, edits = services.file_edits(cluster, text, expect_version=o["expect_version"])
            lines = diff_lines(C.diff(current.content, C.apply_edits(current.content, edits)))
        except (CommandError, files.FileError, services.Refused, C.EditError) as exc:
            self.stderr.write(f"error: {exc}")
            sys.exit(ERROR)
        if not edits:
            self.say(
                o,
                {"outcome": "nothing to do", "cluster": cluster.name, "version": current.number, "changes": []},
                str(services.NothingToDo(current)),
            )
            sys.exit(SAME)
        if o["json"]:
            self.say(
                o, {"outcome": "changes", "cluster": cluster.name, "version": current.number, "changes": lines}, ""
            )
        else:
            self.stdout.write(f"changes against version {current.number} of {cluster.name}:")
            self.print_lines(lines)
        sys.exit(CHANGES)

    @staticmethod
    def read(path):
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None

    @staticmethod
    def cluster(name):
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            raise CommandError(f"no cluster named {name!r}")
        return cluster

    def export(self, cluster, path, o):
        version = (
            ConfigVersion.objects.filter(cluster=cluster, number=o["number"]).first()
            if o["number"]
            else services.latest(cluster)
        )
        if version is None:
            raise CommandError("no such version" if o["number"] else f"{cluster} has no configuration version yet")
        text = files.export(version)
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            self.stderr.write(f"version {version.number} of {cluster} written to {path}")
        else:
            self.stdout.write(text, ending="")

    @staticmethod
    def user(name):
        if not name:
            raise CommandError("--user NAME is required: plans and confirmations are made by someone")
        user = get_user_model().objects.filter(username=name).first()
        if user is None or not has_role(user, OPERATOR):
            raise CommandError(f"{name!r} is not a user with the operator role")
        return user

    def print_plan(self, o, op, plan):
        facts = plan.facts
        if o["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "operation": op.pk if op else None,
                        "title": plan.title,
                        "guards": [g.__dict__ for g in plan.guards],
                        "warnings": facts["warnings"],
                        "intended_diff": facts["intended_diff"],
                        "node_diffs": facts["node_diffs"],
                        "passwords": facts.get("passwords", {}),
                        "steps": [{"key": s.key, "nodes": s.nodes} for s in plan.steps],
                    },
                    default=str,
                    indent=2,
                )
            )
            return
        w = self.stdout.write
        w(plan.title)
        for g in plan.guards:
            w(f"  [{'pass' if g.passed else 'BLOCKS'}] {g.label}: {g.value}")
        for f in facts["warnings"]:
            w(f"  [{'info' if f.get('info') else 'warning'}] {f['label']}: {f['value']}")
        w(f"changes against version {facts['base_version']}:")
        self.print_lines(facts["intended_diff"])
        for name, users in facts.get("passwords", {}).items():
            for user, how in users.items():
                w(f"  {name}: {user}: {how}")
        for step in plan.steps:
            for spec in step.nodes.values():
                if spec["sql"]:
                    w(f"-- {step.key} on {spec['name']}")
                    for sql in spec["sql"]:
                        w(f"{sql};")

    def print_lines(self, lines):
        for line in lines:
            fields = ", ".join(f"{f['name']} {f['before']} -> {f['after']}" for f in line["fields"])
            self.stdout.write(f"  {line['table']} {line['key']} {line['change']}{': ' + fields if fields else ''}")

    def say(self, o, doc, text):
        self.stdout.write(json.dumps(doc, default=str) if o["json"] else text)
