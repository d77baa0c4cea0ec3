"""The operation kinds of this app, registered with the executor's re-check (plans.REPLANNERS): how each is
planned again at start from the options its planner stored in Plan.options, and the change set's own steps
(plans.STEP_HANDLERS). Other apps register theirs in their own AppConfig.ready() (dr: channel moves)."""
from apps.accounts.roles import ADMIN
from apps.fleet.models import Server

from . import change_set, config_steps, drain, repair, rules, switchover
from .choices import OperationKind
from .plans import CONFIRM_POLICIES, REPLANNERS, STEP_HANDLERS


def _switchover(cluster, o):
    return switchover.plan_switchover(cluster, Server.objects.get(pk=o["new_writer"]),
                                      drain_timeout_ms=o["drain_timeout_ms"], on_timeout=o["on_timeout"],
                                      lower_autoinc=o["lower_autoinc"], old_writer_to=o["old_writer_to"])


def _drain(cluster, o):
    return drain.plan_drain(Server.objects.get(pk=o["server"]), drain_timeout_ms=o["drain_timeout_ms"],
                            on_timeout=o["on_timeout"], note=o.get("note", ""))


def _restore(cluster, o):
    return drain.plan_restore(Server.objects.get(pk=o["server"]))


def _read_pool(cluster, o):
    changes = {(server, hg): (status, reason) for server, hg, status, reason in o["changes"]}
    return rules.plan_changes(cluster, changes, figures={}, alerts=[])


def _failover(cluster, o):
    return rules.plan_failover(cluster, Server.objects.get(pk=o["dead"]), o["new"], o["evidence"],
                               manual=o.get("manual", False))


def _repair(cluster, o):
    return repair.plan_repair(cluster, o.get("nodes"))


def _config_confirm(op):
    """A cluster may ask that only an admin confirm its configuration changes (Cluster.config_confirm_role)."""
    if op.cluster.config_confirm_role == ADMIN:
        return ADMIN, "On this cluster only an admin confirms configuration changes."
    return None


def register():
    REPLANNERS.update({OperationKind.SWITCHOVER: _switchover, OperationKind.DRAIN: _drain,
                       OperationKind.RESTORE: _restore, OperationKind.READ_POOL: _read_pool,
                       OperationKind.FAILOVER: _failover, OperationKind.REPAIR: _repair,
                       OperationKind.CONFIG: change_set.replan})
    STEP_HANDLERS.update({change_set.CONFIG_VERIFY: config_steps.verify, change_set.CONFIG_RECORD: config_steps.record})
    CONFIRM_POLICIES.update({OperationKind.CONFIG: _config_confirm})
