"""Fleet rollouts from the command line (a CI job), through the same service as the API.

    manage.py rollout plan FILE --select env=prod --waves 1,1,25%,100% --user NAME --reason "..."
    manage.py rollout start FILE --select env=prod --waves 1,1,25%,100% --user NAME --reason "..."
    manage.py rollout start --id N --user NAME         (a rollout planned before, e.g. by someone else)
    manage.py rollout status N
    manage.py rollout abort N --user NAME
    manage.py rollout pause N --user NAME               (between waves; resume N --user NAME goes on, here)
    manage.py rollout halt N --user NAME --reason "..." (the wave baking fails its gate with the reason and is
                                                         rolled back; the worker running it acts on it)

FILE is the change: a YAML fragment (the tables and variables it names, as `config apply` reads a file, without
`cluster:`) or a JSON file {"edits": [...]} (a change set's edits, as the API takes them). `--select` is
key=value for a tag, name=CLUSTER for a cluster (repeatable; all must match). `plan` saves the rollout planned and
prints its waves (the exact clusters); `start` plans (or takes --id) and runs it here, wave by wave.

Exit codes: 0 done (plan: planned; status: done; abort: rolled back or aborted), 1 status: not ended yet (halt:
the halt is asked, its worker has not acted yet),
2 refused (bad file, selector, waves, the change does not apply, two-person rule), 3 halted or rolled back.
"""

import json
import sys
from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from apps.audit.actor import Actor
from apps.rollouts import services
from apps.rollouts.models import Rollout, RolloutState

DONE, NOT_ENDED, REFUSED, HALTED = 0, 1, 2, 3
EXIT = {
    RolloutState.DONE: DONE,
    RolloutState.ABORTED: DONE,
    RolloutState.HALTED: HALTED,
    RolloutState.ROLLED_BACK: HALTED,
}


class Command(BaseCommand):
    help = "Plan, start, follow, halt or abort a fleet rollout (one change to many clusters in waves, gated)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["plan", "start", "status", "abort", "pause", "resume", "halt"])
        parser.add_argument("target", nargs="?", help="plan/start: the change FILE; the others: the rollout's id")
        parser.add_argument("--id", type=int, help="start: a rollout planned before")
        parser.add_argument(
            "--select",
            action="append",
            default=[],
            help="env=prod (a tag), name=CLUSTER, or version=2.7 (every node runs 2.7.x)",
        )
        parser.add_argument("--waves", default="1,1,25%,100%")
        parser.add_argument("--user", help="who plans, starts or aborts (an operator)")
        parser.add_argument("--reason", default="")
        parser.add_argument("--bake-canary", type=float, default=60.0, help="seconds the canary wave bakes")
        parser.add_argument("--bake", type=float, default=30.0, help="seconds each other wave bakes")
        parser.add_argument(
            "--max-error-rate",
            type=float,
            default=1.0,
            help="errors per second per node above the window before the wave that halt it",
        )
        parser.add_argument(
            "--when-busy",
            choices=["wait", "skip"],
            default="wait",
            help="a cluster another operation holds: wait for it (up to --busy-wait) or skip it",
        )
        parser.add_argument("--busy-wait", type=float, default=300.0, help="seconds a busy cluster is waited for")
        parser.add_argument(
            "--max-latency-ratio",
            type=float,
            default=2.0,
            help="the latency of the digests the change touches (its rules' matches and hostgroups; every "
            "digest when it edits no rule) since the change against before that halts it",
        )
        parser.add_argument(
            "--max-mirror-queue",
            type=float,
            default=0.8,
            help="a node's mirror queue against its limit (a share, 0.8: 80 %%) that halts it",
        )
        parser.add_argument(
            "--roll-back-before", action="store_true", help="on a halt, roll back every wave before the failing one too"
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, **o):
        try:
            if o["action"] in ("status", "abort", "pause", "resume", "halt"):
                rollout = self.rollout(o["target"])
                if o["action"] == "abort":
                    rollout = services.abort(rollout, actor=Actor.command(self.user(o["user"])), enqueue=False)
                elif o["action"] == "pause":
                    rollout = services.pause(rollout, actor=Actor.command(self.user(o["user"])))
                elif o["action"] == "halt":
                    rollout = services.halt(rollout, actor=Actor.command(self.user(o["user"])), reason=o["reason"])
                elif o["action"] == "resume":
                    rollout = services.resume(rollout, actor=Actor.command(self.user(o["user"])), enqueue=False)
                self.show(o, rollout)
                sys.exit(EXIT.get(rollout.state, NOT_ENDED))
            actor = Actor.command(self.user(o["user"]))
            if o["id"] is not None:
                rollout = self.rollout(o["id"])
            else:
                rollout = services.plan(
                    self.change(o["target"]),
                    services.parse_selector(o["select"]),
                    o["waves"],
                    actor=actor,
                    reason=o["reason"] or f"from {o['target']}",
                    bake_canary_s=o["bake_canary"],
                    bake_s=o["bake"],
                    max_error_rate=o["max_error_rate"],
                    when_busy=o["when_busy"],
                    busy_wait_s=o["busy_wait"],
                    max_latency_ratio=o["max_latency_ratio"],
                    max_mirror_queue_share=o["max_mirror_queue"],
                    roll_back_before=o["roll_back_before"],
                )
            if o["action"] == "plan":
                self.show(o, rollout)
                first = services.first_cluster_plan(rollout)
                if not o["json"]:
                    self.stdout.write(f"the change set of {first['cluster']} (the first cluster), planned now:")
                    for line in first["lines"]:
                        self.stdout.write(f"  {line}")
                sys.exit(DONE)
            services.start(rollout, actor=actor, enqueue=False)
            services.run(rollout.pk)
            rollout.refresh_from_db()
        except services.Refused as exc:
            self.say(o, {"outcome": "refused", "reason": str(exc)}, f"refused: {exc}")
            sys.exit(REFUSED)
        self.show(o, rollout)
        sys.exit(EXIT.get(rollout.state, NOT_ENDED))

    @staticmethod
    def change(path):
        if not path:
            raise CommandError('give the change FILE (a YAML fragment, or JSON {"edits": [...]})')
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc}") from None
        if path.endswith(".json"):
            try:
                return json.loads(text)
            except ValueError as exc:
                raise services.Refused(f"{path} is not JSON: {exc}") from None
        return {"file": text}

    @staticmethod
    def rollout(ident):
        try:
            return Rollout.objects.get(pk=int(ident))
        except (TypeError, ValueError, Rollout.DoesNotExist):
            raise CommandError(f"no rollout {ident!r}") from None

    @staticmethod
    def user(name):
        if not name:
            raise CommandError("--user NAME is required: rollouts are planned, started and aborted by someone")
        try:
            return get_user_model().objects.get(username=name)
        except get_user_model().DoesNotExist:
            raise CommandError(f"no user {name!r}") from None

    def show(self, o, rollout):
        doc = services.describe(rollout)
        if o["json"]:
            self.stdout.write(json.dumps(doc))
            return
        self.stdout.write(f"{rollout}: {doc['state']} ({doc['reason']})")
        for wave in doc["waves"]:
            names = ", ".join(f"{c['name']} [{c['state']}]" for c in wave["clusters"])
            where = (
                f" (node {wave['node']} only)"
                if wave["node"]
                else " (the rest of the canary's cluster)"
                if wave["rest_of_canary"]
                else ""
            )
            self.stdout.write(
                f"  wave {wave['wave']}{' (canary)' if wave['canary'] else ''} {wave['state']}: {names}{where}"
            )
            for c in wave["clusters"]:
                if c["revert"]:
                    self.stdout.write(f"    {c['name']} rolled back by change set #{c['revert']}")
        if doc["halt_reason"]:
            self.stdout.write(f"  halted: {doc['halt_reason']}")

    def say(self, o, doc, text):
        self.stdout.write(json.dumps(doc) if o["json"] else text)
