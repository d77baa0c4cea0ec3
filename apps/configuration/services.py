"""Writes of the configuration app: versions, change sets, their plans. Each audits in its own short
transaction; the network reads (nodes.py) happen before, never inside one."""

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, overload

from django.db import transaction

from apps.accounts.roles import ADMIN, has_role
from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.credential_hosts import credentials_allowed
from apps.clients.proxysql import SERVER_FIELDS
from apps.fleet.drift import MANAGED_VARIABLES
from apps.fleet.layout import swapped_roles
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.audit.models import AuditEvent

from . import content as C
from . import edits as E
from . import nodes as N
from . import secrets as S
from .models import ChangeSet, ConfigSecret, ConfigVersion
from .tables import MYSQL_SERVERS
from . import files


# A configuration's content (content.py: every managed table's rows, "roles", "hostgroups", "global_variables"), and
# one edit of a change set (edits.py: its shape depends on its "op" and "table"): JSON documents of many shapes.
Content = dict[str, Any]
Edit = dict[str, Any]
# A mysql_servers row's key (hostgroup, hostname, port), and its SERVER_FIELDS.
ServerKey = tuple[int, str, int]
ServerFields = dict[str, Any]


class Refused(Exception):
    """The request cannot go on as it stands; the message says why, in the operator's terms."""


class NotPermitted(Refused):
    """This user may not do it (403): someone else's draft, or what only an admin may change."""

    forbidden = True


class NoReason(Refused):
    """A change set without a reason: a bad request (the API's 400 on its `reason` field), not a conflict."""

    field = "reason"


NEEDS_REASON = "A change set needs a reason: what it is for, for the people after you."


def require_reason(reason: str | None) -> None:
    """The reason rule of every door that makes or plans a change set (page, API, command line)."""
    if not (reason or "").strip():
        raise NoReason(NEEDS_REASON)


def check_editor(cs: ChangeSet, actor: Actor) -> None:
    """Only the author of a draft, or an admin, edits it (two operators never share one unknowingly)."""
    if cs.author_id == actor.user.pk or has_role(actor.user, ADMIN):
        return
    record(
        "change set edit refused",
        actor=actor,
        cluster=cs.cluster,
        target=str(cs),
        outcome="refused",
        details={"change_set": cs.pk, "author": cs.author_name},
    )
    raise NotPermitted(
        f"Change set #{cs.pk} is {cs.author_name}'s draft: only its author or an admin may edit it. "
        "Start your own change set."
    )


def check_host_edits(cluster: Cluster, edits: Iterable[Edit], actor: Actor) -> None:
    """Scheduler rows and admin-* variables run commands on the ProxySQL host or expose it: admins only."""
    host = [C.describe(e) for e in edits if C.on_the_host(e)]
    if not host or has_role(actor.user, ADMIN):
        return
    record(
        "change set refused",
        actor=actor,
        cluster=cluster,
        outcome="refused",
        details={"needed_role": ADMIN, "edits": host[:20]},
    )
    raise NotPermitted(
        f"Only an admin may change scheduler rows and admin-* variables (they run commands on the "
        f"ProxySQL host or expose it): {', '.join(host[:5])}{' ...' if len(host) > 5 else ''}."
    )


def check_credential_hosts(cluster: Cluster, edits: Iterable[Edit], first: int = 1) -> None:
    """A mysql_servers row on a host the cluster's credential hosts do not allow is refused: the pollers would log
    in there every second with the monitor credentials (apps/clients/credential_hosts.py). proxysql_servers rows too,
    once that table is managed: the nodes send their cluster credentials to their peers."""
    for n, edit in enumerate(edits, start=first):
        row = edit.get("row") or {}
        if (
            edit.get("op") != "upsert"
            or edit.get("table") not in (MYSQL_SERVERS.name, "proxysql_servers")
            or not isinstance(row.get("hostname"), str)
        ):
            continue
        allowed, reason = credentials_allowed(cluster, row["hostname"], row.get("port"))
        if not allowed:
            raise Refused(f"edit {n} ({C.describe(edit)}): {reason}. An admin can add the host to the setting.")


def latest(cluster: Cluster) -> ConfigVersion | None:
    return ConfigVersion.objects.filter(cluster=cluster).order_by("-number").first()


def versioned_variables(cluster: Cluster) -> dict[str, tuple[str | None, str]]:
    """{name: (value, source)} for MANAGED_VARIABLES from the cluster's latest configuration version, the one record
    of their intent (repair, drift); (None, why) for one the version does not hold (read in the caller's thread: the
    database is not for node threads)."""
    version = latest(cluster)
    values = (version.content.get("global_variables") or {}) if version else {}
    where = f"configuration version {version.number}" if version else "no configuration version"
    return {
        name: (values[name], where)
        if isinstance(values.get(name), str)
        else (None, f"not in {where}: record what the nodes run as the next version")
        for name in MANAGED_VARIABLES
    }


def inventory_content(cluster: Cluster, base: Content | None = None) -> Content:
    """The inventory's part of a configuration: roles and mysql_servers rows as the inventory holds them,
    on top of `base` (the other tables)."""
    out = dict(base or C.empty())
    out["roles"] = {
        "writer": cluster.writer_hostgroup,
        "reader": cluster.reader_hostgroup,
        "backup_writer": cluster.backup_writer_hostgroup,
        "offline": cluster.offline_hostgroup,
        "writer_is_also_reader": cluster.writer_is_also_reader,
    }
    out[MYSQL_SERVERS.name] = [
        {
            "hostgroup_id": m.hostgroup_id,
            "hostname": m.server.hostname,
            "port": m.server.port,
            "gtid_port": m.gtid_port,
            "status": m.status,
            "weight": m.weight,
            "compression": m.compression,
            "max_connections": m.max_connections,
            "max_replication_lag": m.max_replication_lag,
            "use_ssl": m.use_ssl,
            "max_latency_ms": m.max_latency_ms,
            "comment": m.comment,
        }
        for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server")
    ]
    out["hostgroups"] = sorted(C.claimed_hostgroups(out))
    return C.sort(out)


def _write_inventory_read_model(cluster: Cluster, content: Content) -> None:
    """The inventory, a read model of the latest version, follows it: roles on the cluster, one membership per
    mysql_servers row. Written only here (record_version)."""
    roles = content.get("roles") or {}
    Cluster.objects.filter(pk=cluster.pk).update(
        writer_hostgroup=roles["writer"],
        reader_hostgroup=roles["reader"],
        backup_writer_hostgroup=roles.get("backup_writer"),
        offline_hostgroup=roles.get("offline"),
        **(
            {"writer_is_also_reader": roles["writer_is_also_reader"]}
            if roles.get("writer_is_also_reader") is not None
            else {}
        ),
    )
    wanted = {(r["hostgroup_id"], r["hostname"], r["port"]): r for r in content[MYSQL_SERVERS.name]}
    current = {m.key: m for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server")}
    gone = [m.pk for key, m in current.items() if key not in wanted]
    if gone:
        HostgroupMembership.objects.filter(pk__in=gone).delete()
    # Only the rows that changed are written (an operation's version touches a few rows, not the cluster's every
    # row), in a few statements whatever their number: adopting a cluster wrote two to five a row before.
    changed = {}
    for key, row in wanted.items():
        values, m = {f: row[f] for f in SERVER_FIELDS}, current.get(key)
        if m is None or any(getattr(m, f) != v for f, v in values.items()):
            changed[key] = values
    if not changed:
        return
    servers = _servers_of_cluster(cluster, {(host, port) for _, host, port in changed})
    new, updated = [], []
    for (hg, host, port), values in changed.items():
        m = current.get((hg, host, port))
        if m is None:
            new.append(HostgroupMembership(server=servers[(host, port)], hostgroup_id=hg, **values))
        else:
            for f, v in values.items():
                setattr(m, f, v)
            updated.append(m)
    HostgroupMembership.objects.bulk_create(new)
    HostgroupMembership.objects.bulk_update(updated, list(SERVER_FIELDS))


def _servers_of_cluster(cluster: Cluster, endpoints: set[tuple[str, int]]) -> dict[tuple[str, int], Server]:
    """{(host, port): Server} for these backends, the missing ones created in the cluster; Refused when one belongs
    to another cluster."""

    def read() -> dict[tuple[str, int], Server]:
        hosts, ports = {h for h, _ in endpoints}, {p for _, p in endpoints}
        return {
            (s.hostname, s.port): s
            for s in Server.objects.filter(hostname__in=hosts, port__in=ports)
            if (s.hostname, s.port) in endpoints
        }

    servers = read()
    missing = sorted(endpoints - servers.keys())
    if missing:
        Server.objects.bulk_create([Server(hostname=h, port=p, cluster=cluster) for h, p in missing])
        servers = read()  # their keys (not every backend returns them from a bulk insert)
    for (host, port), server in sorted(servers.items()):
        if server.cluster_id != cluster.pk:
            raise Refused(f"backend {host}:{port} belongs to cluster {server.cluster}")
    return servers


def servers_of(content: Content) -> dict[ServerKey, ServerFields]:
    """{(hostgroup, host, port): SERVER_FIELDS} of a configuration's mysql_servers rows."""
    return {
        (r["hostgroup_id"], r["hostname"], r["port"]): {f: r[f] for f in SERVER_FIELDS}
        for r in content[MYSQL_SERVERS.name]
    }


def with_servers(content: Content, changes: Mapping[ServerKey, ServerFields | None]) -> Content:
    """The configuration with these mysql_servers rows changed: {(hostgroup, host, port): fields, or None: no row}."""
    rows = {(r["hostgroup_id"], r["hostname"], r["port"]): r for r in content[MYSQL_SERVERS.name]}
    for (hg, host, port), fields in changes.items():
        if fields is None:
            rows.pop((hg, host, port), None)
        else:
            rows[(hg, host, port)] = {
                **rows.get((hg, host, port), {}),
                **fields,
                "hostgroup_id": hg,
                "hostname": host,
                "port": port,
            }
    out = {**content, MYSQL_SERVERS.name: list(rows.values())}
    out["hostgroups"] = sorted(C.claimed_hostgroups(out))
    return C.sort(out)


def with_roles(content: Content, roles: Mapping[str, int | bool | None]) -> Content:
    """The configuration with these hostgroup roles changed ({"writer": 100, "offline": None, ...})."""
    out = {**content, "roles": {**content["roles"], **roles}}
    out["hostgroups"] = sorted(C.claimed_hostgroups(out))
    return C.sort(out)


@overload
def record_version(
    cluster: Cluster, content: Content, *, actor: Actor, reason: str, source: str, operation: Any = None
) -> ConfigVersion: ...
@overload
def record_version(
    cluster: Cluster,
    content: Callable[[ConfigVersion | None], Content],
    *,
    actor: Actor,
    reason: str,
    source: str,
    operation: Any = None,
) -> ConfigVersion | None: ...
def record_version(
    cluster: Cluster,
    content: Content | Callable[[ConfigVersion | None], Content],
    *,
    actor: Actor,
    reason: str,
    source: str,
    operation: Any = None,  # an operations.Operation (an app above: not imported)
) -> ConfigVersion | None:
    """The next version of the cluster's configuration; the inventory follows it. One transaction with the
    audit row: the only code that writes inventory rows (roles on Cluster, HostgroupMembership), a read model of
    the latest version, the one record of intent (apps/tests/test_intent_boundary.py holds it). `actor`
    (apps/audit/actor.py) is its author.

    `content` is the new configuration, or a function of the latest version (None only for a cluster's version 1:
    record_first_version, adoption) returning it, read under the cluster's lock (an operation's change on top of
    whatever is latest). Returns the version; None when a change on top of the latest changes nothing (a function
    only: a content given is always recorded)."""
    with transaction.atomic():
        Cluster.objects.select_for_update().filter(pk=cluster.pk).first()  # one version number at a time
        parent = latest(cluster)
        if callable(content):
            made = content(parent)
            if parent is not None and C.diff(parent.content, C.sort(made)).empty:
                return None
        else:
            made = content
        new_content: Content = C.sort(made)
        version = ConfigVersion.objects.create(
            cluster=cluster,
            number=(parent.number + 1) if parent else 1,
            parent=parent,
            author=actor.who[:150],
            reason=reason,
            content=new_content,
            operation=operation,
            source=source,
        )
        _write_inventory_read_model(cluster, new_content)
        changes = C.diff(parent.content, new_content).count() if parent else None
        record(
            "configuration version recorded",
            actor=actor,
            cluster=cluster,
            target=f"{cluster} v{version.number}",
            details={
                "version": version.number,
                "parent": parent.number if parent else None,
                "source": source,
                "reason": reason,
                "operation": operation.pk if operation else None,
                "changes": changes,
            },
        )
    return version


class NoVersion(Refused):
    """A cluster without a configuration version: every way a cluster is made records its version 1."""


def on_latest(cluster: Cluster, change: Callable[[Content], Content]) -> Callable[[ConfigVersion | None], Content]:
    """`change(content)` over the latest version's content, for record_version; a cluster without a version is
    refused (it has no intent to change)."""

    def content(parent: ConfigVersion | None) -> Content:
        if parent is None:
            raise NoVersion(
                f"{cluster} has no configuration version yet: adopt a node first (version 1 is recorded then)."
            )
        return change(parent.content)

    return content


def record_first_version(
    cluster: Cluster, *, actor: Actor, reason: str, source: str, variables: Mapping[str, str] | None = None
) -> ConfigVersion | None:
    """Version 1 of a cluster made where it is made (the admin's new cluster, an adoption whose node could not be
    read for a whole configuration): the inventory's roles and rows, and `variables` ({name: value}: the values
    operations change for a while, as an adoption read them). In the caller's transaction."""
    content = inventory_content(cluster, base=C.empty())
    content["global_variables"] = {**content["global_variables"], **(variables or {})}
    return record_version(cluster, content, actor=actor, reason=reason, source=source)


def record_operation(
    op: Any,  # an operations.Operation (an app above: not imported)
    change: Callable[[dict[ServerKey, ServerFields]], Mapping[ServerKey, ServerFields | None]],
) -> ConfigVersion | None:
    """An operation's change to the servers' rows as the cluster's next version (source "operation", naming
    the operation): `change(rows)` -> {(hostgroup, host, port): fields or None} over the latest version's
    rows (servers_of). The writer moves in configuration only this way (issue 21 §2)."""
    return record_version(
        op.cluster,
        on_latest(op.cluster, lambda base: with_servers(base, change(servers_of(base)))),
        actor=Actor.of_operation(op),
        reason=op.title,
        source="operation",
        operation=op,
    )


def record_admin_edit(cluster: Cluster, change: Callable[[Content], Content], *, actor: Actor) -> ConfigVersion | None:
    """An admin's edit of the inventory in /admin/ is intent: the next version (source "admin") holds it and
    the inventory follows. `change(content)` -> the new content, from the latest version's."""
    return record_version(
        cluster,
        on_latest(cluster, change),
        actor=actor,
        source="admin",
        reason=f"inventory edited in the admin by {actor.who}",
    )


def needs_first_version(cluster_name: str) -> bool:
    """An adoption into this cluster records its version 1 (a new cluster, or one without a version yet)."""
    return not ConfigVersion.objects.filter(cluster__name=cluster_name).exists()


def read_for_adoption(
    name: str, admin_host: str, admin_port: int, admin_user: str, admin_password: str, cluster: Cluster | None = None
) -> N.NodeConfig:
    """The runtime of a node about to be adopted, read before the adoption's transaction (a new cluster's version 1
    is made of it, in that transaction: record_adoption). A NodeConfig; its `error` says why it could not be read.
    `cluster`: an existing cluster (its TLS setting), or None."""
    node = ProxySQLNode(
        name=name,
        admin_host=admin_host,
        admin_port=admin_port,
        admin_user=admin_user,
        admin_password=admin_password,
        cluster=cluster,
    )
    return N.read_node(node, layers=("runtime", "memory"))


def record_adoption(
    cluster: Cluster,
    node_name: str,
    changes: Mapping[ServerKey, ServerFields],
    runtime: N.NodeConfig | None,
    *,
    actor: Actor,
    variables: Mapping[str, Any] | None = None,
) -> ConfigVersion | None:
    """An adoption's rows as intent, inside the adoption's transaction. `changes`: the rows it creates or
    overwrites {(hostgroup, host, port): fields}; `variables`: MANAGED_VARIABLES as the node runs them, kept
    where the version holds none (a re-adoption may read a node mid-operation: the version's value stands). A
    cluster with a version gets the next one with them; a cluster without one gets version 1 made of the node's
    runtime (`runtime`: read_for_adoption(), before the transaction) with those rows, or, when the node could
    not be read, of the adopted rows and variables alone (said in the reason); the inventory follows."""
    readable = runtime is not None and not runtime.error
    variables = {k: str(v) for k, v in (variables or {}).items() if v is not None}

    def with_variables(content: Content) -> Content:
        return {**content, "global_variables": {**variables, **content["global_variables"]}}

    def content(parent: ConfigVersion | None) -> Content:
        if parent is not None:
            return with_variables(with_servers(parent.content, changes))
        inventory = with_servers(inventory_content(cluster, base=C.empty()), changes)
        if runtime is None or not readable:
            return with_variables(inventory)
        first, values = N.as_content(
            runtime.layers["runtime"], inventory["roles"], C.claimed_hostgroups(inventory), runtime.layers.get("memory")
        )
        return with_variables(with_servers(_name_secrets(first, S.store(cluster, values)), changes))

    reason = f"adopted from {node_name}"
    if not readable and latest(cluster) is None:
        reason += " (its runtime could not be read: the adopted rows and variables only; record the nodes for the rest)"
    return record_version(cluster, content, actor=actor, reason=reason, source="adopt")


def record_adopted(cluster: Cluster, node: ProxySQLNode, *, actor: Actor | None = None) -> ConfigVersion | None:
    """Version 1 from what an adopted node runs (no-op when the cluster already has a version: adoption records
    it): a cluster whose versions were set aside. Reads the node
    first, then writes. Returns the version, or None when the node could not be read (said in the audit).
    `actor`: by default the system."""
    actor = actor or Actor.system()
    if latest(cluster) is not None:
        return None
    nc = N.read_node(node, layers=("runtime", "memory"))
    if nc.error:
        record(
            "configuration version not recorded",
            actor=actor,
            cluster=cluster,
            target=str(node),
            outcome="failure",
            details={"error": nc.error},
        )
        return None
    roles = inventory_content(cluster)["roles"]
    hostgroups = C.claimed_hostgroups(inventory_content(cluster))
    content, values = N.as_content(nc.layers["runtime"], roles, hostgroups, nc.layers["memory"])
    with transaction.atomic():
        refs = S.store(cluster, values)
        content = _name_secrets(content, refs)
        return record_version(cluster, content, actor=actor, reason=f"adopted from {node.name}", source="adopt")


def _name_secrets(content: Content, refs: Mapping[str, str]) -> Content:
    """Replace base secret names ({"secret": "mysql_users/app"}) by their stored refs."""

    def fix(value: Any) -> Any:
        return {"secret": refs[value["secret"]]} if C.is_secret(value) and value["secret"] in refs else value

    out = dict(content)
    out["mysql_users"] = [{**r, "password": fix(r["password"])} for r in content["mysql_users"]]
    out["global_variables"] = {k: fix(v) for k, v in content["global_variables"].items()}
    return out


def known_secrets(cluster: Cluster) -> dict[str, str]:
    return dict(ConfigSecret.objects.filter(cluster=cluster).values_list("ref", "value"))


# -- change sets -----------------------------------------------------------------------------------
def start_change_set(
    cluster: Cluster,
    *,
    actor: Actor,
    reason: str = "",
    source: str = "change",
    edits: Sequence[Edit] = (),
    base: ConfigVersion | None = None,
) -> ChangeSet:
    """A draft for `actor` (a person: apps/audit/actor.py) to edit, on `base` (by default the current version)."""
    base = base or _current_base(cluster)
    check_edits(cluster, base, edits, actor)
    cs = ChangeSet.objects.create(
        cluster=cluster,
        base=base,
        author=actor.user,
        author_name=actor.who,
        reason=reason,
        source=source,
        edits=list(edits),
    )
    return cs


def _current_base(cluster: Cluster) -> ConfigVersion:
    base = latest(cluster)
    if base is None:
        raise Refused(
            f"{cluster} has no configuration version yet: adopt a node first (or record one from its runtime)"
        )
    return base


def check_edits(cluster: Cluster, base: ConfigVersion, edits: Sequence[Edit], actor: Actor) -> None:
    """The checks a change set's edits pass before it is saved (start_change_set, validate_change_set): who may
    make them, that they apply to `base` (refuse a file or revert that cannot apply, now), where credentials go."""
    check_host_edits(cluster, edits, actor)
    if edits:
        _applies(base.content, list(edits))
        check_credential_hosts(cluster, edits)


# Each edit added replays the ones before it (they must still apply), so a draft's size bounds what one more costs.
# The API takes at most as many edits at once; a file is bounded by its rows (files.py).
MAX_EDITS = 5000


def add_edit(cs: ChangeSet, edit: Edit, *, actor: Actor) -> ChangeSet:
    """Append one edit (a plain dict, built by edits.py's helpers or given as is) to a draft by its author or an
    admin, refused if it cannot apply; a new password in it is stored encrypted and named by reference. Audited."""
    if cs.state != ChangeSet.State.DRAFT:
        raise Refused("This change set is no longer a draft.")
    check_editor(cs, actor)
    if len(cs.edits) >= MAX_EDITS:
        raise Refused(
            f"This change set holds {len(cs.edits):,} edits, the most one may hold: apply it, or put the "
            "rest in another change set (or a file)."
        )
    built = _build(edit, known_secrets(cs.cluster), lambda: target_of(cs), n=len(cs.edits) + 1)
    check_host_edits(cs.cluster, [built.edit], actor)
    _applies(cs.base.content, cs.edits + [built.edit])
    check_credential_hosts(cs.cluster, [built.edit], first=len(cs.edits) + 1)
    with transaction.atomic():
        edit = _store_secret(cs.cluster, built)
        cs.edits = cs.edits + [edit]
        cs.save(update_fields=["edits", "updated_at"])
        _edited(cs, "edit added", edit, actor=actor)
    return cs


def _build(edit: Edit, known: Mapping[str, str], target: Callable[[], Content] | None, *, n: int) -> E.Built:
    try:
        return E.build(edit, known=known, target=target, n=n)
    except E.EditRefused as exc:
        raise Refused(str(exc)) from None


def _store_secret(cluster: Cluster, built: E.Built) -> Edit:
    """The built edit, its new password (if any) stored encrypted and the edit pointed at it."""
    if built.secret is None:
        return built.edit
    ref = S.new_ref(built.secret[0])
    ConfigSecret.objects.create(cluster=cluster, ref=ref, value=built.secret[1])
    return E.pointed_at(built.edit, ref)


def _edited(cs: ChangeSet, action: str, edit: Edit, *, actor: Actor) -> None:
    """Who changed which table and row of a draft, and how: the change set page lists its editors from these."""
    record(
        "change set edited",
        actor=actor,
        cluster=cs.cluster,
        target=str(cs),
        details={
            "change_set": cs.pk,
            "action": action,
            "table": edit.get("table", "hostgroup roles"),
            "row": edit.get("key") or edit.get("name") or C.describe(edit),
            "edit": C.describe(edit),
        },
    )


def editors(cs: ChangeSet) -> list[str]:
    """The names of those who edited a draft after its author started it (from the audit log)."""
    # (cluster_id, created_at) is indexed: only the cluster's events since the draft began are read
    names = AuditEvent.objects.filter(
        cluster_id=cs.cluster_id, created_at__gte=cs.created_at, action="change set edited", target=str(cs)
    ).values_list("actor", flat=True)
    return sorted(set(names))


def create_change_set(
    cluster: Cluster,
    *,
    actor: Actor,
    reason: str,
    edits: Sequence[Edit] | None = None,
    file: str | None = None,
    expect_version: int | None = None,
) -> ChangeSet:
    """A draft change set (the API's): from JSON edits, each as the editor makes it and checked as a whole,
    or from a configuration file (start_from_file: NothingToDo when it equals the current intent). A password
    in clear text (a mysql_users row's, a password variable's) is stored encrypted and named by reference, as
    the editor's password fields do. All or nothing; audited. The doors that make a change set from a file (the
    page's upload, `manage.py config apply`) come here through change_set.plan_from_file."""
    require_reason(reason)
    with transaction.atomic():
        if file is not None:
            cs = start_from_file(cluster, file, actor=actor, reason=reason, expect_version=expect_version)
        else:
            stored = [_store_secret(cluster, built) for built in _built_edits(cluster, edits)]
            cs = start_change_set(cluster, actor=actor, reason=reason, edits=stored)
        record(
            "change set created",
            actor=actor,
            cluster=cluster,
            target=str(cs),
            details={"change_set": cs.pk, "source": cs.source, "edits": [C.describe(e) for e in cs.edits][:100]},
        )
    return cs


def _built_edits(cluster: Cluster, edits: Sequence[Edit] | None) -> list[E.Built]:
    known = known_secrets(cluster)
    return [_build(edit, known, None, n=n) for n, edit in enumerate(edits or [], start=1)]


def validate_change_set(
    cluster: Cluster,
    *,
    actor: Actor,
    reason: str = "",
    edits: Sequence[Edit] | None = None,
    file: str | None = None,
    expect_version: int | None = None,
) -> ChangeSet:
    """The change set create_change_set would make, checked the same way (check_edits; a file as start_from_file
    checks it), and not saved: no row is written (a new password is pointed at a reference that is not stored).
    Refused as create_change_set refuses; NothingToDo for a file equal to the current intent."""
    if file is not None:
        cs = preview_from_file(cluster, file, reason=reason, expect_version=expect_version)
        check_host_edits(cluster, cs.edits, actor)
    else:
        base = _current_base(cluster)
        unstored = [
            E.pointed_at(b.edit, S.new_ref(b.secret[0])) if b.secret else b.edit for b in _built_edits(cluster, edits)
        ]
        check_edits(cluster, base, unstored, actor)
        cs = ChangeSet(cluster=cluster, base=base, reason=reason, source="change", edits=unstored)
    cs.author, cs.author_name = actor.user, actor.who
    return cs


def _applies(content: Content, edits: list[Edit]) -> Content:
    try:
        return C.apply_edits(content, edits)
    except C.EditError as exc:
        raise Refused(str(exc)) from None


def remove_edit(cs: ChangeSet, index: int, *, actor: Actor) -> None:
    if cs.state != ChangeSet.State.DRAFT:
        raise Refused("This change set is no longer a draft.")
    check_editor(cs, actor)
    edits = list(cs.edits)
    if not 0 <= index < len(edits):
        raise Refused("No such edit.")
    removed = edits.pop(index)
    _applies(cs.base.content, edits)
    with transaction.atomic():
        cs.edits = edits
        cs.save(update_fields=["edits", "updated_at"])
        _edited(cs, "edit removed", removed, actor=actor)


def set_reason(cs: ChangeSet, reason: str, *, actor: Actor) -> None:
    """A draft's reason, changed by its author or an admin (planning asks for it); audited."""
    if reason == cs.reason or cs.state != ChangeSet.State.DRAFT:
        return
    check_editor(cs, actor)
    with transaction.atomic():
        if ChangeSet.objects.filter(pk=cs.pk, state=ChangeSet.State.DRAFT).update(reason=reason):
            record(
                "change set edited",
                actor=actor,
                cluster=cs.cluster,
                target=str(cs),
                details={"change_set": cs.pk, "action": "reason changed", "before": cs.reason, "after": reason},
            )
    cs.refresh_from_db()


def target_of(cs: ChangeSet) -> Content:
    return C.apply_edits(cs.base.content, cs.edits)


def _changed_since(old: ConfigVersion, current: ConfigVersion) -> str:
    since = C.diff(old.content, current.content)
    lines = [f"{c.table} {list(c.key)} {c.change}" for c in since.rows]
    lines += [f"{name}: {_shown(before)} → {_shown(after)}" for name, before, after in since.variables]
    lines += [f"role {k}: {a} → {b}" for k, (a, b) in since.roles.items()]
    return (
        f"version {current.number} was recorded since ({current.author}: {current.reason}). Changed since "
        f"version {old.number}: "
        + ("; ".join(lines) or "nothing in the tables")
        + ". Start again from the current version."
    )


def _shown(value: Any) -> Any:
    return "(secret)" if C.is_secret(value) else value


def check_base(cs: ChangeSet) -> ConfigVersion:
    """Refuse a change set based on an old version, with what changed since (two operators on one cluster)."""
    current = _current_base(cs.cluster)
    if current.pk != cs.base_id:
        raise Refused(f"This change set is based on version {cs.base.number}, but " + _changed_since(cs.base, current))
    return current


class NothingToDo(Exception):
    """A file equal to the current intent: not an error, and nothing to plan (declarative apply is idempotent)."""

    def __init__(self, version: ConfigVersion) -> None:
        self.version = version
        super().__init__(f"nothing to do: the cluster already runs this file (version {version.number})")


def file_edits(cluster: Cluster, text: str, *, expect_version: int | None = None) -> tuple[ConfigVersion, list[Edit]]:
    """(current version, edits) that make the current intent what a configuration file (files.py) says. The file
    is desired state: it applies against the latest version whatever version it was exported from (its
    `version:` is informational), and wins for every row it lists. `expect_version` keeps an optimistic lock:
    refused unless the current version is that one, with what changed since. Reads only; no edits when the
    file equals the current intent. Refused when the file cannot be read or names a secret the console lacks."""
    try:
        _, file_content = files.read(text, cluster)
    except files.FileError as exc:
        raise Refused(f"The file cannot be used: {exc}") from None
    current = latest(cluster)
    if current is None:
        raise Refused(f"{cluster} has no configuration version yet.")
    if expect_version is not None and expect_version != current.number:
        old = ConfigVersion.objects.filter(cluster=cluster, number=expect_version).first()
        if old is None:
            raise Refused(f"This file expected version {expect_version}, but {cluster} is at version {current.number}.")
        raise Refused(f"This file expected version {expect_version}, but " + _changed_since(old, current))
    target = files.target_from_file(current.content, file_content)
    refs = {v["secret"] for r in target["mysql_users"] for v in [r["password"]] if C.is_secret(v)}
    refs |= {v["secret"] for v in target["global_variables"].values() if C.is_secret(v)}
    unknown = refs - set(known_secrets(cluster))
    if unknown:
        raise Refused(
            f"The file names secret(s) the console does not hold: {', '.join(sorted(unknown))}. "
            "Set new passwords in the browser's change set form."
        )
    return current, C.edits_between(current.content, target)


def preview_from_file(cluster: Cluster, text: str, *, reason: str = "", expect_version: int | None = None) -> ChangeSet:
    """The change set a configuration file makes against the current version (file_edits), not saved: what
    `config plan` shows, leaving nothing behind. NothingToDo when the file equals the current intent."""
    current, edits = file_edits(cluster, text, expect_version=expect_version)
    if not edits:
        raise NothingToDo(current)
    _applies(current.content, edits)
    check_credential_hosts(cluster, edits)
    return ChangeSet(
        cluster=cluster, base=current, reason=reason or "from a configuration file", source="file", edits=edits
    )


def validate_file(
    cluster: Cluster, text: str, *, reason: str, expect_version: int | None = None, actor: Actor | None = None
) -> ChangeSet:
    """Validate only: the change set a configuration file would make (unsaved; nothing written, nothing audited), or
    the refusal create_change_set would give it (the reason rule; the file's own checks; with `actor`, the checks of
    validate_change_set, e.g. the host-level edits only an admin makes); NothingToDo when it equals the current
    intent."""
    require_reason(reason)
    if actor is None:  # a preview that names no one (`config plan` without --user): the file's own checks
        return preview_from_file(cluster, text, reason=reason, expect_version=expect_version)
    return validate_change_set(cluster, actor=actor, reason=reason, file=text, expect_version=expect_version)


def start_from_file(
    cluster: Cluster, text: str, *, actor: Actor, reason: str = "", expect_version: int | None = None
) -> ChangeSet:
    """The change set of a configuration file (preview_from_file, which checked that its edits apply), saved as a
    draft."""
    cs = validate_change_set(cluster, actor=actor, reason=reason, file=text, expect_version=expect_version)
    cs.save()
    return cs


def revert_to(cluster: Cluster, version: ConfigVersion, *, actor: Actor, reason: str) -> ChangeSet:
    """A change set back to `version`, keeping what operations own: the current writer and every server's
    current status (a revert is no switchover and no drain); the reason says what was kept."""
    current = _current_base(cluster)  # `version` is the cluster's: it has one
    target, notes = kept_operational(cluster, current, version)
    edits = C.edits_between(current.content, target)
    kept = f"The revert {'; '.join(notes)}." if notes else ""
    if not edits:
        if notes:
            raise Refused(
                f"Version {current.number} differs from version {version.number} only in what operations "
                f"own, which a revert keeps: nothing to revert. {kept}"
            )
        raise Refused(f"Version {current.number} already equals version {version.number}.")
    reason = reason or f"revert to version {version.number}"
    return start_change_set(
        cluster, actor=actor, reason=f"{reason}. {kept}" if kept else reason, source="revert", edits=edits, base=current
    )


def kept_operational(cluster: Cluster, current: ConfigVersion, old: ConfigVersion) -> tuple[Content, list[str]]:
    """(content, notes): `old`'s content with `current`'s writer and server statuses. When the writer moved
    from A to B since, A's and B's role rows are swapped as a switchover swaps them (A→B→A gives back the rows
    of A), so the layout still says who is who; otherwise the writer hostgroup's rows are the current ones."""
    target, notes = copy.deepcopy(old.content), []
    roles, now_roles = target.get("roles") or {}, current.content.get("roles") or {}
    was, now = C.writers(target), C.writers(current.content)
    rows = {(r["hostgroup_id"], r["hostname"], r["port"]): r for r in target[MYSQL_SERVERS.name]}
    if was != now:
        if len(was) == 1 and len(now) == 1 and all(roles.get(k) == now_roles.get(k) for k in C.ROLE_KEYS):
            layout = SimpleNamespace(
                writer_hostgroup=roles["writer"],
                reader_hostgroup=roles.get("reader"),
                backup_writer_hostgroup=roles.get("backup_writer"),
                writer_is_also_reader=roles.get("writer_is_also_reader", cluster.writer_is_also_reader),
            )
            fields = {key: {f: r[f] for f in SERVER_FIELDS} for key, r in rows.items()}
            for key, value in swapped_roles(layout, fields, was[0], now[0]).items():
                if value is None:
                    rows.pop(key, None)
                else:
                    rows[key] = {"hostgroup_id": key[0], "hostname": key[1], "port": key[2], **value}
        if C.writers({"roles": roles, MYSQL_SERVERS.name: list(rows.values())}) != now:
            rows = {k: r for k, r in rows.items() if k[0] != roles.get("writer")}
            for r in current.content[MYSQL_SERVERS.name]:
                if r["hostgroup_id"] == now_roles["writer"]:
                    rows[(roles["writer"], r["hostname"], r["port"])] = {**r, "hostgroup_id": roles["writer"]}
        notes.append(
            f"keeps the writer {C.endpoints(now)} ({_moved_in(current, old)}); version {old.number}'s "
            f"writer was {C.endpoints(was)}"
        )
    for key, r in C.index(current.content, MYSQL_SERVERS).items():
        mine = rows.get(key)
        if mine is not None and mine["status"] != r["status"]:
            rows[key] = {**mine, "status": r["status"]}
            if not (was != now and key[0] == roles.get("writer")):  # the writer's own rows: said above
                notes.append(
                    f"keeps {key[1]}:{key[2]} in hostgroup {key[0]} {r['status']} (version {old.number} "
                    f"had it {mine['status']})"
                )
    target[MYSQL_SERVERS.name] = list(rows.values())
    target["hostgroups"] = sorted(C.claimed_hostgroups(target))
    return C.sort(target), notes


def _moved_in(current: ConfigVersion, old: ConfigVersion) -> str:
    """ "moved since version N by operations, last in version M: its reason": the newest version since `old` that
    changed the writer (a switchover's or failover's, or another source's, named)."""
    last, previous = None, C.writers(old.content)
    for v in ConfigVersion.objects.filter(
        cluster=current.cluster, number__gt=old.number, number__lte=current.number
    ).order_by("number"):
        if C.writers(v.content) != previous:
            last, previous = v, C.writers(v.content)
    if last is None:
        return f"moved since version {old.number}"
    by = "operations" if last.source == "operation" else f"a {last.source} version"
    return f"moved since version {old.number} by {by}, last in version {last.number}: {last.reason}"


def take_runtime(cluster: Cluster, node: ProxySQLNode, *, actor: Actor, reason: str) -> ChangeSet:
    """A change set that makes the node's runtime (changed outside the console) the next version; planned and
    applied like any other, so every node of the cluster ends with it."""
    current = _current_base(cluster)  # a cluster without a version is refused (mypy found the None unhandled)
    nc = N.read_node(node, layers=("runtime", "memory"))
    if nc.error:
        raise Refused(f"{node.name} could not be read: {nc.error}")
    content, values = N.as_content(
        nc.layers["runtime"],
        current.content.get("roles") or {},
        C.claimed_hostgroups(current.content),
        nc.layers["memory"],
    )
    refs = S.store(cluster, values)
    content = _name_secrets(content, refs)
    content = _same_refs(current.content, content, cluster)
    edits = C.edits_between(current.content, content)
    if not edits:
        raise Refused(f"{node.name}'s runtime already equals version {current.number}.")
    return start_change_set(
        cluster,
        actor=actor,
        reason=reason or f"take {node.name}'s runtime",
        source="runtime",
        edits=edits,
        base=current,
    )


def _same_refs(current: Content, content: Content, cluster: Cluster) -> Content:
    """Where a secret read from a node equals the version's secret, keep the version's reference."""
    values = known_secrets(cluster)

    def keep(old: Any, new: Any) -> Any:
        if C.is_secret(old) and C.is_secret(new) and values.get(old["secret"]) == values.get(new["secret"]):
            return old
        return new

    users = {r["username"]: r for r in current["mysql_users"]}
    content["mysql_users"] = [
        {**r, "password": keep(users.get(r["username"], {}).get("password"), r["password"])}
        for r in content["mysql_users"]
    ]
    content["global_variables"] = {
        k: keep(current["global_variables"].get(k), v) for k, v in content["global_variables"].items()
    }
    return content


def write_back(cluster: Cluster, *, actor: Actor, nodes: Sequence[ProxySQLNode] = (), reason: str = "") -> ChangeSet:
    """A change set with no edit that writes the current version back to nodes changed outside the console
    (all of them, or `nodes`); applied like any other, it records no new version."""
    current = latest(cluster)
    if current is None:
        raise Refused(f"{cluster} has no configuration version yet.")
    names = ", ".join(n.name for n in nodes) or "every node that differs"
    cs = ChangeSet.objects.create(
        cluster=cluster,
        base=current,
        author=actor.user,
        author_name=actor.who,
        reason=reason or f"write version {current.number} back to {names}",
        source="write_back",
        nodes=[n.pk for n in nodes],
    )
    return cs


def discard(cs: ChangeSet, *, actor: Actor) -> None:
    check_editor(cs, actor)
    with transaction.atomic():  # the state and its audit row together
        updated = ChangeSet.objects.filter(pk=cs.pk, state=ChangeSet.State.DRAFT).update(
            state=ChangeSet.State.DISCARDED
        )
        record(
            "change set discarded",
            actor=actor,
            cluster=cs.cluster,
            target=str(cs),
            outcome="success" if updated else "refused",
            details={"change_set": cs.pk},
        )
    if not updated:
        raise Refused("Only a draft can be discarded.")
