"""Record what the nodes run as the next version (issue 39): when every ProxySQL node of a cluster runs the same
mysql_servers rows and they differ from the latest version (a writer moved, a server drained, by a worker that died or
by hand), an admin records them as intent, with a reason, the difference shown first. Nothing is written to the nodes:
the version follows them, never the reverse (a repair would move the writer back without a drain).

Only the mysql_servers rows of the cluster's hostgroups are taken from the nodes; every other table stays as the latest
version has it. Network reads happen before the transaction that records the version and its audit row.
"""

from dataclasses import dataclass, field

from django.db import transaction

from apps.accounts.roles import ADMIN, has_role
from apps.audit.services import record
from apps.clients.proxysql import configured, on_each_node
from apps.configuration import content as C
from apps.configuration.change_set import diff_lines
from apps.configuration.services import NotPermitted, Refused, latest, record_version
from apps.configuration.tables import MYSQL_SERVERS

from .locks import current_holder

SOURCE = "nodes"


@dataclass
class Reading:
    """What the nodes run, against the latest version: `content` (the version it would record), `lines` (the diff for
    the page), `refusal` (why it cannot be recorded, or "")."""

    version: int | None
    content: dict | None = None
    lines: list = field(default_factory=list)
    refusal: str = ""


def read(cluster):
    """Every node's runtime mysql_servers rows in the cluster's hostgroups, compared with the latest version."""
    current = latest(cluster)
    if current is None:
        return Reading(None, refusal=f"{cluster} has no configuration version yet: adopt a node first.")
    hostgroups = cluster.hostgroup_ids() | C.claimed_hostgroups(current.content)

    def rows_of(node, admin):
        return sorted(
            (
                configured(r) | {"hostgroup_id": r.hostgroup_id, "hostname": r.hostname, "port": r.port}
                for r in admin.servers("runtime")
                if r.hostgroup_id in hostgroups
            ),
            key=lambda r: (r["hostgroup_id"], r["hostname"], r["port"]),
        )

    results = on_each_node(cluster.proxysql_nodes.order_by("pk"), rows_of)
    silent = [f"{node.name} ({error.message})" for node, _, error in results if error is not None]
    if not results or silent:
        return Reading(
            current.number,
            refusal="Every node must answer to record what the nodes run: "
            + ("; ".join(silent) or "the cluster has no ProxySQL node")
            + ".",
        )
    first = results[0][1]
    differ = [node.name for node, rows, _ in results if rows != first]
    if differ:
        return Reading(
            current.number,
            refusal=f"The nodes do not run the same mysql_servers rows ({', '.join(differ)} "
            f"differ from {results[0][0].name}): nothing to record. Repair the node that differs, or plan a "
            f"switchover.",
        )
    content = {**current.content, MYSQL_SERVERS.name: first}
    content["hostgroups"] = sorted(C.claimed_hostgroups(content))
    content = C.sort(content)
    difference = C.diff(current.content, content)
    if difference.empty:
        return Reading(current.number, refusal=f"Every node runs version {current.number}'s rows: nothing to record.")
    return Reading(current.number, content, diff_lines(difference))


def record_nodes(cluster, *, actor, reason, expect_version):
    """The nodes' rows as the cluster's next version (source "nodes"), by an admin with a reason, when the version is
    still the one the admin saw (`expect_version`) and every node still runs the same rows. Returns the version."""
    if not has_role(actor.user, ADMIN):
        record(
            "nodes recorded as intent", actor=actor, cluster=cluster, outcome="refused", details={"needed_role": ADMIN}
        )
        raise NotPermitted("Only an admin may record what the nodes run as the next version.")
    reason = (reason or "").strip()
    if not reason:
        raise Refused("Say why the nodes' rows become intent (the reason is kept with the version).")
    holder = current_holder(cluster)
    if holder is not None:
        raise Refused(f"An operation runs on this cluster ({holder}): record what the nodes run once it ended.")
    reading = read(cluster)  # network: before the transaction
    if reading.refusal:
        raise Refused(reading.refusal)
    if reading.version != expect_version:
        raise Refused(
            f"The latest version is now {reading.version}, not {expect_version}: look at the difference again."
        )
    with transaction.atomic():
        version = record_version(cluster, reading.content, actor=actor, reason=reason, source=SOURCE)
        if version.number != expect_version + 1:  # another version was recorded meanwhile: not on a stale diff
            raise Refused(f"Version {expect_version + 1} was recorded meanwhile: look at the difference again.")
        record(
            "nodes recorded as intent",
            actor=actor,
            cluster=cluster,
            target=f"{cluster} v{version.number}",
            details={"version": version.number, "reason": reason, "changes": reading.lines[:200]},
        )
    return version
