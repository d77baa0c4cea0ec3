"""What each kind's INVENTORY step records (its OperationSpec.records, called by the executor's inventory step with
(run, step params, detail)): the operation's change becomes the cluster's next configuration version, and the
inventory follows it in the same transaction (configuration.services.record_operation): a switchover or failover
swaps the two servers' role rows as the plan did on the nodes (fleet/layout.py swapped_roles); or a server goes
into / out of maintenance; or statuses change. A repair records nothing: it resolves what is pending."""

from django.db import transaction

from apps.configuration.models import ConfigVersion
from apps.configuration.services import record_operation
from apps.fleet.layout import swapped_roles
from apps.fleet.models import Server

from . import pending_rows


def resolve_pending_rollbacks(run, p, detail):
    """A repair: what was pending (rollback or finish) on the repaired nodes is resolved by it."""
    pending_rows.resolve_by_repair(run.op, p["nodes"])


def statuses(run, p, detail):
    """A read-pool rule: the servers' statuses as changed."""

    def record():
        servers = {s.pk: s for s in Server.objects.filter(pk__in=[c[0] for c in p["changes"]])}
        return record_operation(
            run.op,
            lambda rows: {
                key: {**rows[key], "status": status}
                for key, status in (
                    ((hg, servers[pk].hostname, servers[pk].port), status) for pk, hg, status in p["changes"]
                )
                if key in rows
            },
        )

    _once(run, detail, record)


def maintenance(run, p, detail):
    """A drain (maintenance_on) or a restore (maintenance_off): the server's flag with the version holding its
    statuses."""

    def record():
        on = p["action"] == "maintenance_on"
        server = Server.objects.get(pk=p["server"])
        statuses = {
            (int(hg), server.hostname, server.port): "OFFLINE_SOFT" if on else status
            for hg, status in p["statuses"].items()
        }
        with transaction.atomic():  # the flag with the version that holds its statuses
            Server.objects.filter(pk=server.pk).update(maintenance=on, maintenance_note=p.get("note", "") if on else "")
            return record_operation(
                run.op,
                lambda rows: {key: {**rows[key], "status": status} for key, status in statuses.items() if key in rows},
            )

    _once(run, detail, record)


def writer_swap(run, p, detail):
    """A switchover or failover: the two servers' role rows swapped as the plan did on the nodes."""

    def record():
        cluster = run.op.cluster
        servers = Server.objects.in_bulk([p["old"], p["new"]])
        old, new = servers[p["old"]], servers[p["new"]]
        return record_operation(
            run.op,
            lambda rows: swapped_roles(
                cluster, rows, (old.hostname, old.port), (new.hostname, new.port), p["old_writer_to"]
            ),
        )

    _once(run, detail, record)


def _once(run, detail, record):
    """record() -> the version, unless this operation already recorded one: its worker died after the record
    committed, and the reaper finishes it (executor._resume)."""
    recorded = ConfigVersion.objects.filter(operation=run.op).order_by("-number").first()
    if recorded is not None:
        detail["version"] = recorded.number
        return
    version = record()
    detail["version"] = version.number if version else None  # the configuration version it recorded
