"""What the operation commands share: `manage.py switchover | drain | restore | failover | repair`.

Each plans through the same planner as the page and the API, saves the plan (services.save_plan), prints it
(guards with their values, the notes the plan page shows, the SQL per ProxySQL node; --plan-only prints it and
stores nothing), asks unless --yes, confirms through
services.confirm as --user (an operator; an admin to override failed guards with --override-reason; the
cluster's two-person rule applies), then runs the operation here, in this process, through the executor a
Celery worker would use, and prints each step as it ends. Exit codes, for runbooks:

    0 done   2 refused (guards, not confirmed, refused or expired at start)   3 rolled back (or cancelled)
    4 failed, rollback pending, or finish pending (not done: a node still lacks the change; the operation ends
      done by itself once that node takes it)   1 usage error (no such cluster, user or server)

Why here and not through a worker: a runbook's exit code must not depend on the broker or a worker being
healthy (during an incident they may be what is broken), and a plan must start within its cluster's
validity window, which a queue does not promise. The lock, the re-check at start, the heartbeat and the
rollback are the executor's, as with a worker; if this process is killed, the reaper rolls the operation
back as it would for a dead worker. Ctrl-C asks the operation to cancel (it rolls back at its next step).

--json prints JSON lines instead: {"event": "plan", ...}, {"event": "step", ...} per step that ends, and
last {"event": "outcome", "state", "exit_code", ...}.
"""

import json
import sys
import threading

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from apps.accounts.roles import OPERATOR, has_role
from apps.audit.actor import Actor
from apps.fleet.models import Cluster, Server
from apps.fleet.validators import parse_endpoint
from apps.monitoring.formatting import milliseconds
from apps.plans.registry import step_handler

from . import executor, services, switchover
from .choices import OperationState, StepState

DONE, REFUSED, ROLLED_BACK, FAILED = 0, 2, 3, 4
EXIT_CODES = {
    OperationState.DONE: DONE,
    OperationState.ROLLED_BACK: ROLLED_BACK,
    OperationState.CANCELLED: ROLLED_BACK,
    OperationState.REFUSED: REFUSED,
    OperationState.EXPIRED: REFUSED,
    OperationState.FINISH_PENDING: FAILED,
}  # not done: a node still lacks the change (and any other state)
FOLLOW_EVERY_S = 0.1


def exit_code(state):
    return EXIT_CODES.get(state, FAILED)


def user_named(name):
    user = get_user_model().objects.filter(username=name).first()
    if user is None or not has_role(user, OPERATOR):
        raise CommandError(f"{name!r} is not a user with the operator role")
    return user


def endpoint(text):
    """'host:port' or '[v6]:port' -> (host, port)."""
    try:
        return parse_endpoint(text)
    except ValueError as e:
        raise CommandError(str(e)) from None


def server_of(cluster, text):
    host, port = endpoint(text)
    server = Server.objects.filter(cluster=cluster, hostname=host, port=port).first()
    if server is None:
        known = ", ".join(str(s) for s in cluster.servers.order_by("hostname", "port")) or "none"
        raise CommandError(f"no backend {host}:{port} in cluster {cluster.name} (its backends: {known})")
    return server


class OperationCommand(BaseCommand):
    """A command that plans one kind of operation; subclasses add their arguments and build the plan."""

    # No system checks: they load every URLconf, hence the reports' matplotlib and numpy, about a second of
    # CPU before the plan, taken from the clients on a host shared with ProxySQL or the databases.
    # `manage.py check`, migrate and the servers still run them.
    requires_system_checks = []

    def add_arguments(self, parser):
        self.add_target_arguments(parser)
        self.add_plan_arguments(parser)
        parser.add_argument(
            "--user",
            required=True,
            help="who plans and confirms: an existing user with the operator role (an admin to override failed guards)",
        )
        parser.add_argument("--yes", action="store_true", help="confirm without asking")
        parser.add_argument(
            "--override-reason",
            default="",
            help="an admin's reason to confirm despite failed guards that may be overridden (audited)",
        )
        parser.add_argument(
            "--plan-only",
            action="store_true",
            help="print the plan and exit 0, or 2 when a guard fails; nothing runs, no operation is stored",
        )
        parser.add_argument("--json", action="store_true", help="JSON lines: the plan, each step, the outcome")

    def add_target_arguments(self, parser):
        parser.add_argument("cluster", help="the cluster's name")

    def add_plan_arguments(self, parser):
        pass

    def cluster_of(self, o):
        """The cluster the operation runs on (its lock, its two-person rule)."""
        cluster = Cluster.objects.filter(name=o["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {o['cluster']!r}")
        return cluster

    def build_plan(self, cluster, options):
        raise NotImplementedError

    # -- the run -----------------------------------------------------------------------------------------
    def handle(self, **o):
        self.json = o["json"]
        cluster = self.cluster_of(o)
        user = user_named(o["user"])
        plan = self.build_plan(cluster, o)
        if o["plan_only"]:  # a read: no operation is stored
            self.show_plan(None, plan)
            self.finish(REFUSED if plan.failed_guards else DONE, None, "planned only: nothing ran, nothing was stored")
        op = services.save_plan(plan, actor=Actor.command(user))
        self.show_plan(op, plan)
        if not o["yes"] and not self.ask(f"Run this on {cluster.name}? Type 'yes': "):
            services.discard(op, actor=Actor.command(user), reason="not confirmed at the command's prompt")
            self.finish(REFUSED, op, "not confirmed: nothing was done")
        try:
            services.confirm(op, actor=Actor.command(user), override_reason=o["override_reason"], enqueue=False)
        except services.NotAllowed as exc:  # it stays planned: someone else may confirm it (page or API)
            self.finish(REFUSED, op, f"refused: {exc} (operation #{op.pk} stays planned)")
        op = self.follow(op, user)
        self.finish(
            exit_code(op.state),
            op,
            f"{op.get_state_display()}: {op}"
            + (f" in {milliseconds(op.duration_ms)}" if op.duration_ms is not None else "")
            + (f" — {op.error}" if op.error else ""),
        )

    def follow(self, op, user):
        """Run the operation on a thread of its own (as a worker would) and print each step as it ends."""
        outcome = {}

        def run():
            try:
                executor.run(op.pk)
            except Exception as exc:  # the executor ends every operation in a state; this is a bug, say so
                outcome["error"] = repr(exc)
            finally:
                connections.close_all()  # this thread's connections

        worker = threading.Thread(target=run, name=f"operation-{op.pk}", daemon=True)
        worker.start()
        shown = {}
        while True:
            try:
                worker.join(FOLLOW_EVERY_S)
                self.show_steps(op, shown)
                if not worker.is_alive():
                    break
            except KeyboardInterrupt:
                try:
                    services.cancel(op, actor=Actor.command(user))
                    self.say(
                        {"event": "cancel_requested", "operation": op.pk},
                        "cancel requested: the operation rolls back at its next step",
                    )
                except services.NotAllowed as exc:
                    self.say({"event": "cancel_refused", "operation": op.pk, "reason": str(exc)}, str(exc))
        op.refresh_from_db()
        if outcome.get("error"):
            op.error = f"{op.error} (the executor raised {outcome['error']})".strip()
        return op

    def show_steps(self, op, shown):
        for step in op.steps.order_by("index"):
            if step.state in (StepState.PENDING, StepState.RUNNING) or shown.get(step.index) == step.state:
                continue
            shown[step.index] = step.state
            self.say(
                {
                    "event": "step",
                    "operation": op.pk,
                    "index": step.index,
                    "key": step.key,
                    "state": step.state,
                    "duration_ms": step.duration_ms,
                    "executed": step.executed,
                },
                f"  [{step.state}] {step.title}" + (f" ({milliseconds(step.duration_ms)})" if step.duration_ms else ""),
            )

    # -- output ------------------------------------------------------------------------------------------
    def show_plan(self, op, plan):
        notes = switchover.notes(plan)
        if self.json:
            return self.say(
                {
                    "event": "plan",
                    "operation": op and op.pk,
                    "kind": plan.kind,
                    "title": plan.title,
                    "guards": [g.__dict__ for g in plan.guards],
                    "notes": notes,
                    "steps": [
                        {
                            "key": s.key,
                            "title": s.title,
                            "kind": s.kind,
                            "nodes": s.nodes,
                            "point_of_no_return": s.point_of_no_return,
                        }
                        for s in plan.steps
                    ],
                    "facts": plan.facts,
                },
                None,
            )
        w = self.stdout.write
        w(f"{plan.title}" + (f" (operation #{op.pk})" if op else " (plan only, not stored)"))
        for g in plan.guards:
            verdict = "pass" if g.passed else ("FAIL, an admin may override" if g.overridable else "FAIL")
            w(f"  [{verdict}] {g.label}: {g.value}")
        for node in plan.facts.get("nodes", {}).values():
            if "changes" in node:  # a repair: what differs on each node, layer by layer
                w(f"  {node['name']}: {'; '.join(node['changes']) or 'nothing to do'}")
        for note in notes:  # what the plan page shows besides guards and steps
            w(f"  {note['level'].upper()}: {note['text']}")
        for step in plan.steps:
            w(f"-- {step.key}: {step.title}" + (" (point of no return)" if step.point_of_no_return else ""))
            handler = step_handler(step.kind)
            if handler.on_timeout:  # a drain: how long it waits, then what
                w(f"   timeout {step.params.get('timeout_ms')} ms, then {step.params.get('on_timeout')}")
            if handler.sends_nodes:
                for spec in step.nodes.values():
                    w(f"   on {spec.get('name')}:")
                    for sql in spec.get("sql", []):
                        w(f"     {sql};")
            elif step.params.get("sql") and step.params.get("name"):  # a step on one backend (a DR channel move)
                w(f"   on {step.params['name']}:")
                for sql in step.params["sql"]:
                    w(f"     {sql};")

    def ask(self, question):
        self.stderr.write(question, ending="")
        self.stderr.flush()
        return sys.stdin.readline().strip().lower() == "yes"

    def say(self, doc, text):
        if self.json:
            self.stdout.write(json.dumps(doc, default=str))
        elif text is not None:
            self.stdout.write(text)
        self.stdout.flush()

    def finish(self, code, op, text):
        if op is None:  # --plan-only: nothing stored
            self.say(
                {"event": "outcome", "operation": None, "state": None, "exit_code": code, "error": "", "timings": {}},
                text,
            )
            sys.exit(code)
        op.refresh_from_db()
        self.say(
            {
                "event": "outcome",
                "operation": op.pk,
                "state": op.state,
                "exit_code": code,
                "error": op.error,
                "timings": op.timings,
            },
            text,
        )
        sys.exit(code)
