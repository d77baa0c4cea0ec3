"""Configuration as code from the command line, through the same change sets, plans and checks as the pages.

    manage.py config export CLUSTER [FILE]                 the current version (or --config-version N) as YAML
    manage.py config plan CLUSTER FILE --user NAME          the plan: findings, diffs, SQL per node
    manage.py config apply CLUSTER FILE --user NAME --reason "..." [--yes] [--override-reason "..."]

`plan` exits 0 when nothing blocks, 2 when a finding blocks or the file is refused (stale, unreadable), so
it fits a review pipeline. `apply` plans, asks unless --yes, confirms as NAME (an operator; an admin to
override blocking findings), runs it here and now, and exits 0 done / 2 refused / 3 rolled back / 4 failed (or a rollback or finish pending:
a node still lacks what it should have).
"""
import json
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.roles import OPERATOR, has_role
from apps.configuration import files, services
from apps.configuration.models import ChangeSet, ConfigVersion
from apps.fleet.models import Cluster
from apps.operations import executor
from apps.operations import services as operations
from apps.operations.models import Operation
from apps.operations.plans import Plan

DONE, REFUSED, ROLLED_BACK, FAILED = 0, 2, 3, 4


class Command(BaseCommand):
    help = "Export a cluster's configuration as YAML, or plan / apply a YAML file as a change set."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["export", "plan", "apply"])
        parser.add_argument("cluster")
        parser.add_argument("file", nargs="?", help="the YAML file (export: where to write it; default stdout)")
        parser.add_argument("--config-version", type=int, dest="number", help="export: this version instead of the current one")
        parser.add_argument("--user", help="plan/apply: who plans and confirms (an existing user with the operator role)")
        parser.add_argument("--reason", default="", help="apply: why (kept with the version and in the audit log)")
        parser.add_argument("--yes", action="store_true", help="apply: do not ask")
        parser.add_argument("--override-reason", default="", help="apply: an admin's reason to override blocking findings")
        parser.add_argument("--json", action="store_true", help="plan/apply: print the plan and the outcome as JSON")

    def handle(self, **o):
        cluster = Cluster.objects.filter(name=o["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {o['cluster']!r}")
        if o["action"] == "export":
            return self.export(cluster, o)
        if not o["file"]:
            raise CommandError(f"{o['action']} needs a FILE")
        user = self.user(o["user"])
        try:
            with open(o["file"], encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {o['file']}: {exc}") from None
        try:
            cs = services.start_from_file(cluster, text, user=user, reason=o["reason"] or f"from {o['file']}")
            op = services.plan_and_save(cs, user=user)
        except services.Refused as exc:
            self.say(o, {"outcome": "refused", "reason": str(exc)}, f"refused: {exc}")
            sys.exit(REFUSED)
        plan = Plan.from_json(op.plan)
        self.print_plan(o, op, plan)
        blocking = [g for g in plan.failed_guards]
        if o["action"] == "plan":
            ChangeSet.objects.filter(pk=cs.pk).update(state=ChangeSet.State.DISCARDED)  # a preview only
            Operation.objects.filter(pk=op.pk, state="planned").update(state="cancelled", error="plan only (manage.py config plan)")
            sys.exit(REFUSED if blocking else DONE)
        if not o["yes"]:
            answer = input(f"Apply this to {cluster.proxysql_nodes.count()} ProxySQL node(s)? Type 'yes': ")
            if answer.strip().lower() != "yes":
                self.say(o, {"outcome": "not confirmed"}, "not confirmed: nothing was done")
                sys.exit(REFUSED)
        try:
            operations.confirm(op, user=user, override_reason=o["override_reason"], enqueue=False)
        except operations.NotAllowed as exc:
            self.say(o, {"outcome": "refused", "reason": str(exc)}, f"refused: {exc}")
            sys.exit(REFUSED)
        executor.run(op.pk)
        op.refresh_from_db()
        version = ChangeSet.objects.get(pk=cs.pk).result
        self.say(o, {"outcome": op.state, "operation": op.pk, "error": op.error, "version": version.number if version else None,
                     "timings": op.timings},
                 f"{op.state}: operation #{op.pk}" + (f", version {version.number}" if version else "") +
                 (f" — {op.error}" if op.error else ""))
        sys.exit({"done": DONE, "rolled_back": ROLLED_BACK, "cancelled": ROLLED_BACK}.get(op.state, FAILED))

    def export(self, cluster, o):
        version = (ConfigVersion.objects.filter(cluster=cluster, number=o["number"]).first() if o["number"]
                   else services.latest(cluster))
        if version is None:
            raise CommandError("no such version" if o["number"] else f"{cluster} has no configuration version yet")
        text = files.export(version)
        if o["file"]:
            with open(o["file"], "w", encoding="utf-8") as f:
                f.write(text)
            self.stderr.write(f"version {version.number} of {cluster} written to {o['file']}")
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
            self.stdout.write(json.dumps({"operation": op.pk, "title": plan.title,
                                          "guards": [g.__dict__ for g in plan.guards], "warnings": facts["warnings"],
                                          "intended_diff": facts["intended_diff"], "node_diffs": facts["node_diffs"],
                                          "passwords": facts.get("passwords", {}),
                                          "steps": [{"key": s.key, "nodes": s.nodes} for s in plan.steps]},
                                         default=str, indent=2))
            return
        w = self.stdout.write
        w(plan.title)
        for g in plan.guards:
            w(f"  [{'pass' if g.passed else 'BLOCKS'}] {g.label}: {g.value}")
        for f in facts["warnings"]:
            w(f"  [warning] {f['label']}: {f['value']}")
        w(f"changes against version {facts['base_version']}:")
        for line in facts["intended_diff"]:
            fields = ", ".join(f"{f['name']} {f['before']} -> {f['after']}" for f in line["fields"])
            w(f"  {line['table']} {line['key']} {line['change']}{': ' + fields if fields else ''}")
        for name, users in facts.get("passwords", {}).items():
            for user, how in users.items():
                w(f"  {name}: {user}: {how}")
        for step in plan.steps:
            for spec in step.nodes.values():
                if spec["sql"]:
                    w(f"-- {step.key} on {spec['name']}")
                    for sql in spec["sql"]:
                        w(f"{sql};")

    def say(self, o, doc, text):
        self.stdout.write(json.dumps(doc, default=str) if o["json"] else text)
