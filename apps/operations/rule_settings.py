"""The read-pool rules' and automatic failover's settings per cluster, for their operator page
(/operations/rules/<cluster>/): who may change which field, the audited change, what the rules decided
recently (their audit events) and what each rule would do now (rules.decide() and elect() on the current
latest-state documents: nothing is planned, run or remembered).

Roles: viewers read; operators tune the read-pool thresholds (when a reader leaves and comes back); admins
decide whether the product acts on its own: the rules on or off, dry run off, automatic failover and failback.
"""

from django.db import transaction

from apps.accounts.roles import ADMIN, OPERATOR, has_role
from apps.audit.models import ActorKind, AuditEvent
from apps.audit.services import record
from apps.fleet.models import HostgroupMembership
from apps.monitoring import live

from . import rules
from .switchover import current_writer

OPERATOR_FIELDS = (
    "max_replication_lag",
    "reader_return_mark",
    "reader_return_after_s",
    "offline_hard_grace_s",
    "min_available_readers",
)
ADMIN_FIELDS = (
    "read_pool_rules_enabled",
    "rules_dry_run",
    "auto_failover_enabled",
    "failover_after_polls",
    "failback_enabled",
    "failback_after_s",
)
FIELDS = OPERATOR_FIELDS + ADMIN_FIELDS
RULE_NAMES = (rules.RULE, rules.FAILOVER_RULE, rules.FAILBACK_RULE)


class NotAllowed(Exception):
    pass


def editable(user):
    """The fields this user may change."""
    if has_role(user, ADMIN):
        return FIELDS
    return OPERATOR_FIELDS if has_role(user, OPERATOR) else ()


def change(cluster, values, *, actor):
    """Save the changed settings ({field: value}), each within the user's role; audited with before and after.
    A field outside the role refuses the whole change (audited). Returns {field: [before, after]}."""
    changes = {f: [getattr(cluster, f), v] for f, v in values.items() if getattr(cluster, f) != v}
    beyond = sorted(set(changes) - set(editable(actor.user)))
    if beyond:
        record(
            "rule settings refused",
            actor=actor,
            cluster=cluster,
            outcome="refused",
            details={"needed_role": ADMIN, "fields": beyond},
        )
        raise NotAllowed(f"Only an admin changes {', '.join(beyond)}.")
    if changes:
        for f, (_, after) in changes.items():
            setattr(cluster, f, after)
        with transaction.atomic():  # the settings and their audit row together
            cluster.save(update_fields=[*changes, "updated_at"])
            record(
                "rule settings changed", actor=actor, cluster=cluster, target=cluster.name, details={"changes": changes}
            )
    return changes


def decisions(cluster, limit=20):
    """What the rules decided recently on this cluster, newest first: dry-run decisions, alerts, refusals and
    the operations they ran, as audited; each with a line in the operator's words."""
    names = {s.pk: str(s) for s in cluster.servers.all()}
    events = AuditEvent.objects.filter(cluster_id=cluster.pk, actor_kind=ActorKind.RULE, actor__in=RULE_NAMES).order_by(
        "-created_at", "-pk"
    )[:limit]
    return [{"event": e, "what": _described(e, names)} for e in events]


def _described(event, names):
    d = event.details or {}
    if "would_change" in d:  # a dry run: {"server_pk:hostgroup": [status, reason]}
        return "; ".join(
            f"{_server(k, names)} → {status} ({reason})" for k, (status, reason) in d["would_change"].items()
        )
    if d.get("alerts"):
        return "; ".join(d["alerts"])
    if d.get("failed_guards"):
        return "guards failed: " + "; ".join(f"{g['label']} ({g['value']})" for g in d["failed_guards"])
    return d.get("reason") or event.target


def _server(key, names):
    server_pk, _, hostgroup = key.partition(":")
    return f"{names.get(int(server_pk), 'server #' + server_pk)} in hostgroup {hostgroup}"


class _Peek:
    """The rules' Redis as decide() sees it, for a look only: the hysteresis timers are read, never started or
    cleared (the rules do that after each poll)."""

    def __init__(self, client):
        self.client = client

    def get(self, key):
        return self.client.get(key)

    def set(self, *args, **kwargs):
        return None

    def delete(self, *keys):
        return None


def would_do_now(cluster):
    """What each rule would decide on the latest-state documents now, acting on nothing: {"read_pool": lines,
    "figures", "alerts", "failover": line, "failback": line} or {"unavailable": why}."""
    servers = {s.pk: s for s in cluster.servers.all()}
    try:
        docs = rules.read_polls(servers)
        changes, figures, alerts = rules.decide(cluster, docs, r=_Peek(live.client()))
    except live.LiveUnavailable as exc:
        return {"unavailable": str(exc) or "the latest state (Redis) does not answer"}
    current = {
        (m.server_id, m.hostgroup_id): m.status for m in HostgroupMembership.objects.filter(server__cluster=cluster)
    }
    lines = []
    for (server_pk, hostgroup), (status, reason) in sorted(changes.items()):
        verb = "put back" if status == "ONLINE" else "take out"
        lines.append(
            f"would {verb} {servers[server_pk]} in {cluster.hostgroup_roles().get(hostgroup, 'other')} "
            f"hostgroup {hostgroup} ({current.get((server_pk, hostgroup))} → {status}): {reason}"
        )
    return {"read_pool": lines, "figures": figures, "alerts": alerts, "failover": _failover_now(cluster, docs, servers)}


def _failover_now(cluster, docs, servers):
    if cluster.native_manager:
        return (
            f"nothing: {cluster.get_native_manager_display()} with Monitor moves the writer here (this product "
            f"stays out, and says on the cluster page what the manager did)"
        )
    writer = current_writer(cluster)
    if writer is None:
        return "no writer in the inventory's writer hostgroup: nothing to fail over from"
    doc = docs.get(writer.server_id)
    if not rules.writer_down(doc):
        return f"the writer {writer.server} answers as a writer: nothing to do"
    new = servers.get(rules.elect(cluster, docs, exclude=writer.server_id))
    why = "no poll of it in the latest state" if doc is None else doc.error or "not in the Primary component"
    return (
        f"the writer {writer.server} counts as down in the latest poll ({why}): after "
        f"{cluster.failover_after_polls} such poll(s) in a row and a re-probe that confirms it, "
        + (f"would fail over to {new}" if new else "would refuse: no Synced Primary node to elect")
    )
