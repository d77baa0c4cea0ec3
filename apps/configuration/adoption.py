"""Adopt a live ProxySQL node into the inventory: read it, show what will change, then apply all of it
or nothing. A second node of an existing cluster goes through the same path.

read_snapshot()  network: everything adopt needs from one ProxySQL admin endpoint, and what its backends
                 say about themselves (read with ProxySQL's own monitor user)
plan_adoption()  pure: snapshot + operator's choices -> AdoptionPlan (what will be created/updated, and
                 how the roles were decided: inference.py)
apply_adoption() database only, one transaction, audited

The service every door calls (the page, the command line, the API):
read_node()  the one read of a node to adopt (network)
preview()    read + plan, nothing saved; a person's preview is rate limited and audited
confirm()    read the ProxySQL Cluster's other nodes, apply all in one transaction (audited), record version 1
"""

import hashlib
import json
import logging
import math
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.clients.backend import BackendClient
from apps.clients.credential_hosts import credentials_allowed
from apps.clients.proxysql import CLUSTER_VARIABLES, SERVER_FIELDS, ProxySQLAdmin, configured, configured_status
from apps.clients.wire import ClientError, Rejected, tcp_host
from apps.monitoring import proxysql_cluster

from apps.fleet.choices import ClusterKind, NativeManager, ServerStatus, WriterIsAlsoReader
from apps.fleet.drift import MANAGED_VARIABLES
from apps.fleet.inference import LABELS, Reason, conflicts_as_warnings, infer_roles, reasons_as_dicts
from apps.fleet.models import Cluster, HostgroupMembership, MirrorRule, ProxySQLNode, Server, endpoint_key
from apps.fleet.native import managed_hostgroups
from apps.audit.models import AuditEvent

from .services import needs_first_version, read_for_adoption
from . import services as configuration
from .models import ConfigVersion


class AdoptionError(Exception):
    """The plan cannot be applied as it stands; the message says why, in the operator's terms."""


@dataclass
class Snapshot:
    """What one ProxySQL node says about itself, as plain data (it is kept in the session between
    preview and confirm, and its fingerprint tells whether the node changed in between)."""

    version: str
    runtime_servers: list
    memory_servers: list
    galera_hostgroups: list
    replication_hostgroups: list
    group_replication_hostgroups: list
    peers: list
    mirror_rules: list
    variables: dict = field(default_factory=dict)  # MANAGED_VARIABLES at runtime: their intended values
    users: list = field(default_factory=list)  # UserRow: where each application user's queries go by default
    query_rules: list = field(default_factory=list)  # QueryRule: where matching queries go
    backends: list = field(default_factory=list)  # BackendFacts of every backend in runtime_mysql_servers
    # ProxySQL Cluster: {"user": cluster credentials set, "sync_on": [modules], "self": [host, port] of the node's own
    # proxysql_servers row or None} (read_cluster)
    cluster: dict = field(default_factory=dict)

    def fingerprint(self):
        """The node's configuration: a row ProxySQL shuns or recovers by itself between preview and
        confirm changes nothing that is adopted, nor does Monitor moving the servers of an active native manager's
        hostgroups (their memory rows are adopted)."""
        data = asdict(self)
        managed = managed_hostgroups(
            self.galera_hostgroups + self.replication_hostgroups + self.group_replication_hostgroups
        )
        data["runtime_servers"] = [
            {**r, "status": configured_status(r["status"])}
            for r in self.runtime_servers
            if r["hostgroup_id"] not in managed
        ]
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


@dataclass
class BackendFacts:
    """What one backend says about its role, read with ProxySQL's monitor user. Only facts that tell roles
    apart and hold still between a preview and its confirm (no lag, no counters): they are fingerprinted."""

    hostname: str
    port: int
    read_only: bool | None = None
    wsrep_on: bool | None = None
    cluster_size: int | None = None
    cluster_uuid: str | None = None
    replica_of: str | None = None  # "host:port" of its replication source
    error: str | None = None  # why it could not be read: the evidence is weaker, the preview goes on


def may_receive(cluster, confirmed=()):
    """(host, port) -> (allowed, reason): where adoption may send credentials (the node's monitor user's to its
    backends, the typed admin user's to its ProxySQL Cluster peers). An existing cluster: its credential hosts only;
    a new one: loopback and the (host, port) the person confirmed."""
    confirmed = {endpoint_key(h, p) for h, p in confirmed}

    def allowed(host, port):
        if cluster is None and endpoint_key(host, port) in confirmed:
            return True, f"{host}:{port} confirmed"
        return credentials_allowed(cluster, host, port)

    return allowed


def read_snapshot(admin: ProxySQLAdmin, allowed=None) -> Snapshot:
    """`allowed` (may_receive()): the backends read with the node's monitor credentials; the others are listed, not
    read (their facts say why). By default loopback only."""
    allowed = allowed or may_receive(None)
    runtime = admin.servers("runtime")
    endpoints = sorted({(r.hostname, r.port) for r in runtime})
    verdicts = {ep: allowed(*ep) for ep in endpoints}
    tls = {"tls_ca": admin.wire.tls_ca, "tls_verify": admin.wire.tls_verify}  # the cluster's, as the node's read
    read = {
        (f.hostname, f.port): f
        for f in read_backends([ep for ep in endpoints if verdicts[ep][0]], *read_monitor_credentials(admin), tls=tls)
    }
    return Snapshot(
        version=admin.version(),
        runtime_servers=[asdict(r) for r in runtime],
        memory_servers=[asdict(r) for r in admin.servers("memory")],
        galera_hostgroups=[asdict(r) for r in admin.galera_hostgroups()],
        replication_hostgroups=[asdict(r) for r in admin.replication_hostgroups()],
        group_replication_hostgroups=[asdict(r) for r in admin.group_replication_hostgroups()],
        peers=[asdict(r) for r in admin.proxysql_servers()],
        mirror_rules=[asdict(r) for r in admin.mirror_rules()],
        variables=admin.global_variables(MANAGED_VARIABLES),
        users=[asdict(r) for r in admin.users()],
        query_rules=[asdict(r) for r in admin.query_rules()],
        backends=[asdict(read.get(ep) or BackendFacts(*ep, error=verdicts[ep][1])) for ep in endpoints],
        cluster=read_cluster(admin),
    )


def read_cluster(admin: ProxySQLAdmin):
    """Whether this node is in a ProxySQL Cluster: its cluster credentials, the modules its native sync carries, and
    which proxysql_servers row is itself (the one whose checksums are its own, whatever name it is listed by)."""
    part = proxysql_cluster.settings_part(
        admin.global_variables(CLUSTER_VARIABLES), [(p.hostname, p.port) for p in admin.proxysql_servers()]
    )
    if not proxysql_cluster.configured(part):
        return {"user": part["user"], "sync_on": [], "self": None}
    part.update(proxysql_cluster.checks_part(admin.checksums(), admin.peer_checksums()))
    me = proxysql_cluster.self_row(part, *admin.endpoint)
    return {
        "user": True,
        "sync_on": [
            m
            for m in proxysql_cluster.MODULES  # of the modules this ProxySQL has
            if proxysql_cluster.sync_on(part, m) and m in part["checksums"] and m not in proxysql_cluster.SETTINGS_OF
        ],  # (mysql_servers_v2: mysql_servers')
        "self": list(me) if me else None,
    }


def is_proxysql_cluster(snapshot):
    """A node of a ProxySQL Cluster: cluster credentials, native sync on for some module, and peers besides itself."""
    return bool(snapshot.cluster.get("sync_on")) and bool(cluster_peers(snapshot))


def cluster_peers(snapshot):
    """The other nodes in this node's proxysql_servers: [(hostname, port, comment)]."""
    me = tuple(snapshot.cluster.get("self") or ())
    return [(p["hostname"], p["port"], p["comment"]) for p in snapshot.peers if (p["hostname"], p["port"]) != me]


def read_backend(hostname, port, user, password, tls=None):
    facts = BackendFacts(hostname, port)
    if not user:
        facts.error = "ProxySQL has no monitor user (mysql-monitor_username) to read it with"
        return facts
    try:
        with BackendClient(hostname, port, user, password, **(tls or {})) as client:
            state = client.state()
            facts.read_only, facts.wsrep_on = state.read_only, state.wsrep_on
            facts.cluster_size, facts.cluster_uuid = state.cluster_size, state.cluster_state_uuid
            try:
                replica = client.replica_status()
            except Rejected as exc:  # no privilege for it: the rest still counts
                facts.error = f"replica status not readable: {exc.message}"
                replica = None
            if replica and replica.get("Master_Host"):
                facts.replica_of = f"{tcp_host(replica['Master_Host'])}:{replica.get('Master_Port')}"
    except ClientError as exc:
        facts = BackendFacts(hostname, port, error=f"{exc.kind}: {exc.message}")
    return facts


def read_backends(endpoints, user, password, workers=16, tls=None):
    """BackendFacts per (hostname, port), read concurrently. Each read is bounded by the backend client's
    timeouts; a name lookup is not, so the whole read is bounded too: what has not answered by then is
    reported as such and left behind (daemon threads)."""
    if not endpoints:
        return []
    todo, results = list(endpoints), {}

    def work():
        while todo:
            try:
                hostname, port = todo.pop()
            except IndexError:
                return
            results[(hostname, port)] = read_backend(hostname, port, user, password, tls)

    threads = [
        threading.Thread(target=work, name="adopt: read backends", daemon=True)
        for _ in range(min(workers, len(endpoints)))
    ]
    for t in threads:
        t.start()
    budget = (settings.BACKEND_CONNECT_TIMEOUT + 4 * settings.BACKEND_READ_TIMEOUT) * math.ceil(
        len(endpoints) / len(threads)
    )
    deadline = time.monotonic() + budget
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    return [results.get(ep) or BackendFacts(*ep, error=f"timeout: no answer within {budget:g}s") for ep in endpoints]


NATIVE_COLUMNS = ("writer_hostgroup", "backup_writer_hostgroup", "reader_hostgroup", "offline_hostgroup")


def split_hostgroups(snapshot):
    """The node's hostgroups grouped by cluster, as a proposal: hostgroups are one cluster's when they share a
    backend, a row of mysql_galera_hostgroups / mysql_replication_hostgroups / mysql_group_replication_hostgroups,
    backends of one Galera cluster (wsrep_cluster_state_uuid) or of one replication tree, or one user's queries
    (its default hostgroup and its query rules' destinations). [sorted hostgroup ids], largest group first.
    One group: the node serves one cluster. Only hostgroups with servers count."""
    parent = {}

    def find(hg):
        parent.setdefault(hg, hg)
        while parent[hg] != hg:
            parent[hg] = parent[parent[hg]]
            hg = parent[hg]
        return hg

    def join(group):
        group = [hg for hg in group if hg is not None]
        for hg in group:
            parent[find(hg)] = find(group[0])

    by_backend = defaultdict(list)
    for r in snapshot.runtime_servers:
        find(r["hostgroup_id"])
        by_backend[(r["hostname"], r["port"])].append(r["hostgroup_id"])
    for group in by_backend.values():
        join(group)
    for rows in (snapshot.galera_hostgroups, snapshot.replication_hostgroups, snapshot.group_replication_hostgroups):
        for row in rows:
            join([row.get(c) for c in NATIVE_COLUMNS])
    # Backends that say they are one cluster: the same Galera cluster, or replicating one from another.
    groups_of = {f"{h}:{p}": hgs for (h, p), hgs in by_backend.items()}
    by_uuid = defaultdict(list)
    for b in snapshot.backends:
        mine = groups_of.get(f"{b['hostname']}:{b['port']}", [])
        if b.get("wsrep_on") and b.get("cluster_uuid"):
            by_uuid[b["cluster_uuid"]] += mine
        if b.get("replica_of") in groups_of:
            join(mine + groups_of[b["replica_of"]])
    for group in by_uuid.values():
        join(group)
    # Where a user's queries go: its default hostgroup and the query rules' destinations for it (a rule
    # without a user name is every user's).
    defaults = defaultdict(set)
    for u in snapshot.users:
        defaults[u["username"]].add(u["default_hostgroup"])
    for q in snapshot.query_rules:
        if q.get("destination_hostgroup") is None:
            continue
        users = [q["username"]] if q.get("username") else list(defaults)
        for name in users:
            join([q["destination_hostgroup"], *defaults.get(name, ())])
    served = {r["hostgroup_id"] for r in snapshot.runtime_servers}
    groups = defaultdict(set)
    for hg in parent:
        if hg in served:
            groups[find(hg)].add(hg)
    return sorted((sorted(g) for g in groups.values()), key=lambda g: (-len(g), g))


def within(snapshot, hostgroups):
    """The snapshot as if the node held only these hostgroups (one cluster of a shared node): its rows, the
    native rows, users and query rules that touch them, and the backends in them."""
    hostgroups = set(hostgroups)
    rows = [r for r in snapshot.runtime_servers if r["hostgroup_id"] in hostgroups]
    endpoints = {(r["hostname"], r["port"]) for r in rows}

    def native(table):
        return [r for r in table if hostgroups & {r.get(c) for c in NATIVE_COLUMNS}]

    return Snapshot(
        version=snapshot.version,
        runtime_servers=rows,
        memory_servers=[r for r in snapshot.memory_servers if r["hostgroup_id"] in hostgroups],
        galera_hostgroups=native(snapshot.galera_hostgroups),
        replication_hostgroups=native(snapshot.replication_hostgroups),
        group_replication_hostgroups=native(snapshot.group_replication_hostgroups),
        peers=snapshot.peers,
        mirror_rules=snapshot.mirror_rules,
        variables=snapshot.variables,
        users=[u for u in snapshot.users if u["default_hostgroup"] in hostgroups],
        query_rules=[q for q in snapshot.query_rules if q.get("destination_hostgroup") in hostgroups],
        backends=[b for b in snapshot.backends if (b["hostname"], b["port"]) in endpoints],
    )


def native_managers(snapshot):
    """ProxySQL's own hostgroup managers configured on this node, with the kind of each."""
    out = []
    for kind, rows in (
        ("galera", snapshot.galera_hostgroups),
        ("replication", snapshot.replication_hostgroups),
        ("group_replication", snapshot.group_replication_hostgroups),
    ):
        for row in rows:
            out.append({"kind": kind, "active": bool(row.get("active", 1)), **row})
    return out


@dataclass
class RowChange:
    hostgroup_id: int
    hostname: str
    port: int
    action: str  # create / update / unchanged / keep (differs, inventory kept: shown as drift)
    values: dict
    differences: dict = field(default_factory=dict)  # field -> [inventory, node]


@dataclass
class AdoptionPlan:
    cluster_name: str
    cluster_exists: bool
    kind: str
    roles: dict  # writer/reader/backup_writer/offline -> hostgroup id or None
    node_name: str
    admin_host: str
    admin_port: int
    node_exists: bool
    version: str
    servers_new: list  # ["host:port", ...]
    rows: list  # RowChange
    ignored_rows: list  # runtime rows in hostgroups outside this cluster
    peers: list
    mirror_rules: list
    native: list
    warnings: list
    errors: list
    fingerprint: str
    variables: dict = field(default_factory=dict)
    writer_is_also_reader: int = WriterIsAlsoReader.YES
    reasons: list = field(default_factory=list)  # inference.Reason as dicts: how each role was decided
    backends: list = field(default_factory=list)  # BackendFacts as dicts: what each backend said
    groups: list = field(default_factory=list)  # the node's hostgroups split by cluster (split_hostgroups)
    hostgroups: list = field(default_factory=list)  # the group taken (empty: the whole node)
    shared_with: list = field(default_factory=list)  # other clusters this ProxySQL already serves
    # ProxySQL Cluster: the modules its native sync carries, and the other nodes of its proxysql_servers, adopted
    # with it: [{"hostname", "port", "name", "adopted_as"}] ("adopted_as": already in this cluster as that node)
    native_sync: list = field(default_factory=list)
    members: list = field(default_factory=list)

    @property
    def ok(self):
        return not self.errors

    @property
    def policy_label(self):
        return WriterIsAlsoReader(self.writer_is_also_reader).label

    def counts(self):
        counts = defaultdict(int)
        for row in self.rows:
            counts[row.action] += 1
        return dict(counts)


@dataclass
class AdoptionRead:
    """Everything the database says for one adoption's plan, read once (read_adoption): the judgement and the build
    (judge_adoption) read nothing more."""

    cluster: Cluster | None
    same_endpoint: list  # ProxySQLNode at the admin address (any spelling of the host), with its cluster
    owned: dict  # ProxySQLNode pk -> the hostgroups its cluster owns (Cluster.hostgroup_ids())
    cluster_nodes: list  # (admin_host, admin_port, name) of the cluster's ProxySQL nodes
    memberships: dict  # (hostgroup_id, hostname, port) -> the cluster's HostgroupMembership
    known_servers: dict  # (hostname, port) -> Server (with its cluster), for every host in the snapshot's rows
    credentials: dict  # (hostname, port) -> credentials_allowed(cluster, ...) (empty without a cluster)


def read_adoption(snapshot, cluster_name, admin_host, admin_port) -> AdoptionRead:
    """The database's part of plan_adoption, read before any judgement. Backends and the credentials answer are
    read for every row of the snapshot (runtime and memory, every hostgroup): more than the plan may need, so that
    whichever hostgroups the judgement takes, it finds its answer here."""
    cluster = Cluster.objects.filter(name=cluster_name).first()
    same_endpoint = list(
        ProxySQLNode.objects.filter(admin_host__iexact=admin_host, admin_port=admin_port).select_related("cluster")
    )
    endpoints = {(r["hostname"], r["port"]) for r in [*snapshot.runtime_servers, *snapshot.memory_servers]}
    memberships, cluster_nodes, credentials = {}, [], {}
    if cluster:
        memberships = {
            m.key: m for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server")
        }
        cluster_nodes = [(n.admin_host, n.admin_port, n.name) for n in cluster.proxysql_nodes.all()]
        credentials = {ep: credentials_allowed(cluster, *ep) for ep in sorted(endpoints)}
    return AdoptionRead(
        cluster=cluster,
        same_endpoint=same_endpoint,
        owned={n.pk: n.cluster.hostgroup_ids() for n in same_endpoint},
        cluster_nodes=cluster_nodes,
        memberships=memberships,
        known_servers={
            (s.hostname, s.port): s
            for s in Server.objects.filter(hostname__in={ep[0] for ep in endpoints}).select_related("cluster")
        },
        credentials=credentials,
    )


def plan_adoption(
    snapshot,
    *,
    cluster_name,
    node_name,
    admin_host,
    admin_port,
    kind=None,
    roles=None,
    writer_is_also_reader=None,
    overwrite=False,
    hostgroups=None,
):
    """Decide what adopting this snapshot would change. Reads the database once (read_adoption), writes nothing.

    kind, roles (role -> hostgroup) and writer_is_also_reader are the operator's corrections for a new
    cluster; None (or a missing role) means: infer it from the snapshot. `hostgroups`: adopt only this
    group of the node's hostgroups (one cluster of a ProxySQL that fronts several, see split_hostgroups)."""
    read = read_adoption(snapshot, cluster_name, admin_host, admin_port)
    return judge_adoption(
        snapshot,
        read,
        cluster_name=cluster_name,
        node_name=node_name,
        admin_host=admin_host,
        admin_port=admin_port,
        kind=kind,
        roles=roles,
        writer_is_also_reader=writer_is_also_reader,
        overwrite=overwrite,
        hostgroups=hostgroups,
    )


def judge_adoption(
    snapshot,
    read: AdoptionRead,
    *,
    cluster_name,
    node_name,
    admin_host,
    admin_port,
    kind=None,
    roles=None,
    writer_is_also_reader=None,
    overwrite=False,
    hostgroups=None,
):
    """plan_adoption's judgement and build, from the snapshot, the database's read and the options alone."""
    full, groups = snapshot, split_hostgroups(snapshot)
    cluster = read.cluster
    proposed = None
    if not hostgroups and not cluster and len(groups) > 1:
        proposed = _proposed_group(groups, roles, read)
        hostgroups = proposed = proposed if len(proposed) < sum(map(len, groups)) else None
    if hostgroups:
        snapshot = within(snapshot, hostgroups)
    warnings, errors = [], []
    entered = {
        "kind": kind or None,
        **{r: v for r, v in (roles or {}).items() if v is not None},
        "writer_is_also_reader": writer_is_also_reader,
    }
    entered = {k: v for k, v in entered.items() if v is not None}
    if cluster:
        chosen = {
            "writer": cluster.writer_hostgroup,
            "reader": cluster.reader_hostgroup,
            "backup_writer": cluster.backup_writer_hostgroup,
            "offline": cluster.offline_hostgroup,
        }
        kind, policy = cluster.kind, cluster.writer_is_also_reader
        existing = {"kind": kind, **chosen, "writer_is_also_reader": policy}
        reasons = [
            Reason(k, LABELS[k], v, evidence=[f"cluster {cluster.name} already has it"]) for k, v in existing.items()
        ]
        differs = {k: v for k, v in entered.items() if existing[k] != v}
        if differs:
            errors.append(
                f"Cluster {cluster.name} already exists with "
                + ", ".join(f"{LABELS[k].lower()} {existing[k]}" for k in differs)
                + "; adopting a node does not change them (entered: "
                + ", ".join(f"{LABELS[k].lower()} {v}" for k, v in differs.items())
                + "). Leave them empty, or change the cluster itself."
            )
    else:
        inferred = infer_roles(snapshot, given=entered)
        if inferred is None:
            inferred = {
                "kind": entered.get("kind", ClusterKind.GALERA),
                "reasons": [],
                "writer_is_also_reader": entered.get("writer_is_also_reader", WriterIsAlsoReader.YES),
            }
        chosen = {r: inferred.get(r) for r in ("writer", "reader", "backup_writer", "offline")}
        kind, policy, reasons = inferred["kind"], inferred["writer_is_also_reader"], inferred["reasons"]
        warnings += conflicts_as_warnings(reasons)
        if chosen["writer"] is None or chosen["reader"] is None:
            errors.append("No writer and reader hostgroups could be found on this node: enter them in the form.")
    ids = [hg for hg in chosen.values() if hg is not None]
    if len(ids) != len(set(ids)):
        errors.append(f"Each role needs its own hostgroup; got {chosen}.")
    mine = set(ids)

    same_endpoint = read.same_endpoint
    node = next((n for n in same_endpoint if n.cluster.name == cluster_name), None)
    shared_with = [n for n in same_endpoint if n.cluster.name != cluster_name]
    if same_endpoint:
        # One spelling per ProxySQL: the poll shards group a ProxySQL's rows by the host as stored.
        admin_host = same_endpoint[0].admin_host
    for other in shared_with:
        # One ProxySQL may serve several clusters, each in hostgroups of its own.
        overlap = sorted(mine & read.owned[other.pk])
        if overlap:
            errors.append(
                f"{admin_host}:{admin_port} is already adopted as {other.name} in cluster "
                f"{other.cluster.name}, which owns hostgroup(s) {', '.join(map(str, overlap))} on it."
            )
    if proposed:
        warnings.append(
            f"This ProxySQL seems to front {len(groups)} clusters (hostgroups "
            + " | ".join(", ".join(map(str, g)) for g in groups)
            + f"): this adoption takes hostgroups {', '.join(map(str, proposed))} as cluster {cluster_name}. "
            "Adopt the others as clusters of their own, or enter the hostgroups to take."
        )
    if shared_with and not errors:
        warnings.append(
            f"This ProxySQL also serves cluster(s) {', '.join(n.cluster.name for n in shared_with)}: "
            "operations on either are serialised on it, and touch only their own hostgroups' rows."
        )
    if not node and cluster and node_name in {name for _, _, name in read.cluster_nodes}:
        errors.append(f"Cluster {cluster_name} already has a ProxySQL node named {node_name!r}.")

    # The runtime is what the proxy does: adopt it. Unloaded edits in memory are worth a warning. In the hostgroups
    # of an active native manager the runtime is Monitor's placement: the rows configured (memory) are adopted there.
    native = native_managers(snapshot)
    managed = managed_hostgroups([n for n in native if mine & {n.get(c) for c in NATIVE_COLUMNS}])
    memory = {(r["hostgroup_id"], r["hostname"], r["port"]): r for r in snapshot.memory_servers}
    runtime = {
        (r["hostgroup_id"], r["hostname"], r["port"]): r
        for r in snapshot.runtime_servers
        if r["hostgroup_id"] not in managed
    }
    runtime.update({k: r for k, r in memory.items() if k[0] in managed})
    if {k: configured(v) for k, v in runtime.items()} != {k: configured(v) for k, v in memory.items()}:
        warnings.append(
            "This node's mysql_servers (memory) differs from its runtime: someone edited it without "
            "LOAD MYSQL SERVERS TO RUNTIME. The runtime is adopted."
        )

    existing = read.memberships
    known_servers = read.known_servers

    rows, ignored, servers_new = [], [], []
    for key, row in sorted(runtime.items()):
        if key[0] not in mine:
            ignored.append(row)
            continue
        endpoint = (key[1], key[2])
        owner = known_servers.get(endpoint)
        if owner and owner.cluster.name != cluster_name:
            errors.append(f"Backend {key[1]}:{key[2]} already belongs to cluster {owner.cluster.name}.")
        elif not owner and f"{key[1]}:{key[2]}" not in servers_new:
            servers_new.append(f"{key[1]}:{key[2]}")
            allowed, reason = read.credentials[endpoint] if cluster else (True, "")
            if not allowed:  # the pollers would log in there with the cluster's monitor credentials
                errors.append(f"Backend {reason}. An admin can add the host to the setting.")
        values = _fields(row)
        if values["status"] == ServerStatus.SHUNNED:
            values["status"] = ServerStatus.ONLINE  # ProxySQL's verdict, not an intent
            warnings.append(f"{key[1]}:{key[2]} is SHUNNED by ProxySQL in hostgroup {key[0]}; adopted as ONLINE.")
        current = existing.get(key)
        if current is None:
            rows.append(RowChange(*key, action="create", values=values))
            continue
        diff = {f: [getattr(current, f), values[f]] for f in SERVER_FIELDS if getattr(current, f) != values[f]}
        action = "unchanged" if not diff else ("update" if overwrite else "keep")
        rows.append(RowChange(*key, action=action, values=values, differences=diff))
    if cluster:
        seen = {(r.hostgroup_id, r.hostname, r.port) for r in rows}
        for key in existing.keys() - seen:
            warnings.append(
                f"hg {key[0]} {key[1]}:{key[2]} is in the inventory but not on this node (it will show as drift)."
            )
    if not rows and not errors:
        errors.append(f"This node has no servers in hostgroups {sorted(mine)}.")

    members = []
    if is_proxysql_cluster(full):
        members = _members(full, read.cluster_nodes, node_name)
        warnings.append(
            f"This node is in a ProxySQL Cluster (native sync of {', '.join(full.cluster['sync_on'])}): "
            f"the {len(members)} other node(s) of its proxysql_servers are adopted with it, read with the "
            "same admin credentials."
        )
    for n in native:
        if n["active"] and mine & {n.get("writer_hostgroup"), n.get("reader_hostgroup")}:
            warnings.append(
                f"ProxySQL's native {n['kind']} hostgroups are ACTIVE for writer {n['writer_hostgroup']} / "
                f"reader {n['reader_hostgroup']}: ProxySQL moves these servers itself, so this product "
                "will not apply its own rules there. Their configured rows (memory) are adopted; where "
                "Monitor places them at runtime is not drift."
            )

    return AdoptionPlan(
        cluster_name=cluster_name,
        cluster_exists=bool(cluster),
        kind=kind,
        roles=chosen,
        node_name=node_name,
        admin_host=admin_host,
        admin_port=admin_port,
        node_exists=bool(node),
        version=snapshot.version,
        servers_new=servers_new,
        rows=rows,
        ignored_rows=ignored,
        peers=snapshot.peers,
        mirror_rules=snapshot.mirror_rules,
        native=native,
        warnings=warnings,
        errors=errors,
        fingerprint=full.fingerprint(),
        variables=snapshot.variables,
        writer_is_also_reader=policy,
        reasons=reasons_as_dicts(reasons),
        backends=snapshot.backends,
        groups=groups,
        hostgroups=sorted(hostgroups or []),
        shared_with=[n.cluster.name for n in shared_with],
        native_sync=list(full.cluster.get("sync_on") or []),
        members=members,
    )


def _members(snapshot, cluster_nodes, node_name):
    """The other nodes of a ProxySQL Cluster as the preview lists them: each named by its proxysql_servers comment
    (else host:port), and whether this cluster (its nodes: AdoptionRead.cluster_nodes) already has it."""
    known = {endpoint_key(host, port): name for host, port, name in cluster_nodes}
    names = {node_name, *known.values()}
    out = []
    for host, port, comment in cluster_peers(snapshot):
        adopted_as = known.get(endpoint_key(host, port), "")
        name = adopted_as or (comment if comment and comment not in names else f"{host}:{port}")
        names.add(name)
        out.append({"hostname": host, "port": port, "name": name, "adopted_as": adopted_as})
    return out


def listed_peers(plan):
    """The members a preview listed, as confirm()'s `peers`: a door passes them once the person confirmed that preview
    (its fingerprint unchanged)."""
    return [(m["hostname"], m["port"]) for m in plan.members]


def unconfirmed_backends(plan, backend_hosts):
    """The (host, port) a new cluster's plan adopts that may not receive its monitor credentials: neither loopback nor
    confirmed by the person (`backend_hosts`). Its preview did not read them; after the adoption they are not polled
    (new_cluster_credential_hosts)."""
    allowed = may_receive(None, backend_hosts)
    return sorted({(r.hostname, r.port) for r in plan.rows if not allowed(r.hostname, r.port)[0]})


def new_cluster_credential_hosts(plan, backend_hosts):
    """A new cluster's credential hosts: empty (its own hosts, the usual) when every backend it adopts is confirmed or
    loopback; else the confirmed backends, its ProxySQL nodes and loopback, so that the pollers send the monitor
    credentials to no backend the person did not confirm (an admin adds them on the cluster page)."""
    if not unconfirmed_backends(plan, backend_hosts):
        return ""
    hosts = [h for h, _ in backend_hosts] + [plan.admin_host] + [m["hostname"] for m in plan.members]
    return " ".join(dict.fromkeys([*hosts, "127.0.0.0/8", "::1", "localhost"]))


def read_members(plan, admin_user, admin_password, allowed=None, tls=None):
    """Network: the snapshot of every member of the plan's ProxySQL Cluster not yet in the cluster, read with the
    same admin credentials, only where `allowed` (may_receive()) says so: a member it refuses refuses the whole
    adoption, before any connection. Returns ({(host, port): Snapshot}, None) or (None, a message)."""
    allowed = allowed or may_receive(None)
    todo = [m for m in plan.members if not m["adopted_as"]]
    for m in todo:
        ok, reason = allowed(m["hostname"], m["port"])
        if not ok:
            return None, (
                f"{m['name']}, a node of this ProxySQL Cluster, was not confirmed: the admin credentials are "
                f"not sent there ({reason})."
            )
    snapshots = {}
    for m in todo:
        try:
            with ProxySQLAdmin(
                m["hostname"],
                m["port"],
                admin_user,
                admin_password,
                name=f"ProxySQL {m['hostname']}:{m['port']}",
                **(tls or {}),
            ) as admin:
                snapshots[(m["hostname"], m["port"])] = read_snapshot(admin, allowed)
        except ClientError as exc:
            return (
                None,
                f"Could not read {m['name']} ({m['hostname']}:{m['port']}), a node of this ProxySQL Cluster: {exc}",
            )
    return snapshots, None


def apply_cluster_adoption(
    plan, snapshots, *, admin_user, admin_password, monitor=("", ""), actor=None, credential_hosts=""
):
    """apply_adoption() of the plan and of every member of its ProxySQL Cluster (`snapshots`: read_members()), into
    the same cluster and its hostgroups, in one transaction: all of them or none. Returns (cluster, [nodes]).
    `credential_hosts`: a new cluster's (new_cluster_credential_hosts()), set and audited in that transaction."""
    runtime = (
        read_for_adoption(
            plan.node_name,
            plan.admin_host,
            plan.admin_port,
            admin_user,
            admin_password,
            cluster=Cluster.objects.filter(name=plan.cluster_name).first(),
        )
        if needs_first_version(plan.cluster_name)
        else None
    )  # read before the transaction
    with transaction.atomic():
        new = not Cluster.objects.filter(name=plan.cluster_name).exists()
        cluster, node = apply_adoption(
            plan, admin_user=admin_user, admin_password=admin_password, monitor=monitor, actor=actor, runtime=runtime
        )
        if new and credential_hosts:
            Cluster.objects.filter(pk=cluster.pk).update(credential_hosts=credential_hosts)
            cluster.credential_hosts = credential_hosts
            record(
                "cluster connections changed",
                actor=actor or Actor.system(),
                cluster=cluster,
                target=cluster.name,
                details={
                    "changed": ["credential_hosts"],
                    "before": {"credential_hosts": ""},
                    "after": {"credential_hosts": credential_hosts},
                    "why": "adopted with backends nobody confirmed: their monitor credentials stay here",
                },
            )
        nodes = [node]
        for m in plan.members:
            snapshot = snapshots.get((m["hostname"], m["port"]))
            if snapshot is None:
                continue
            member = plan_adoption(
                snapshot,
                cluster_name=plan.cluster_name,
                node_name=m["name"],
                admin_host=m["hostname"],
                admin_port=m["port"],
                hostgroups=plan.hostgroups or None,
            )
            if not member.ok:
                raise AdoptionError(f"{m['name']} ({m['hostname']}:{m['port']}): " + "; ".join(member.errors))
            nodes.append(
                apply_adoption(
                    member, admin_user=admin_user, admin_password=admin_password, actor=actor, runtime=runtime
                )[1]
            )  # the first node's read: no network in the transaction
    return cluster, nodes


def _proposed_group(groups, roles, read):
    """The hostgroups a new cluster takes by default: the groups holding the hostgroups the operator entered
    (entering roles across groups joins them), else the first group that no cluster on this ProxySQL owns yet."""
    entered = {hg for hg in (roles or {}).values() if hg is not None}
    chosen = sorted(hg for group in groups if entered & set(group) for hg in group)
    if chosen:
        return chosen
    owned = set()
    for node in read.same_endpoint:
        owned |= read.owned[node.pk]
    return next((g for g in groups if not owned & set(g)), groups[0])


def _fields(row):
    return {f: row[f] for f in SERVER_FIELDS}


MONITOR_VARIABLES = ("mysql-monitor_username", "mysql-monitor_password")


def read_monitor_credentials(admin: ProxySQLAdmin):
    """ProxySQL's own monitor user: a sensible default for a new cluster's backend credentials.
    Kept out of the Snapshot so that the password never sits in a session."""
    values = admin.global_variables(MONITOR_VARIABLES)
    return values.get("mysql-monitor_username") or "", values.get("mysql-monitor_password") or ""


def apply_adoption(plan, *, admin_user, admin_password, monitor=("", ""), actor=None, runtime=None):
    """Write the plan to the inventory in one transaction, with its audit event. All or nothing.

    `monitor` (user, password) becomes a new cluster's backend credentials; an existing cluster keeps its own.
    The rows are intent: they are recorded as the cluster's next configuration version, or its version 1 made of
    the node's runtime (`runtime`, read here before the transaction unless given), and the inventory follows it,
    in the same transaction (configuration.services.record_adoption).
    """
    actor = actor or Actor.system()

    if not plan.ok:
        raise AdoptionError("; ".join(plan.errors))
    if runtime is None and configuration.needs_first_version(plan.cluster_name):
        runtime = configuration.read_for_adoption(
            plan.node_name,
            plan.admin_host,
            plan.admin_port,
            admin_user,
            admin_password,
            cluster=Cluster.objects.filter(name=plan.cluster_name).first(),
        )
    try:
        with transaction.atomic():
            cluster, created = Cluster.objects.get_or_create(
                name=plan.cluster_name,
                defaults={
                    "kind": plan.kind,
                    "writer_hostgroup": plan.roles["writer"],
                    "reader_hostgroup": plan.roles["reader"],
                    "backup_writer_hostgroup": plan.roles["backup_writer"],
                    "offline_hostgroup": plan.roles["offline"],
                    "writer_is_also_reader": plan.writer_is_also_reader,
                    "monitor_user": monitor[0],
                    "monitor_password": monitor[1],
                },
            )
            cluster.native_hostgroups = plan.native
            active = cluster.active_native_hostgroups()  # natively managed: Monitor places the servers
            cluster.native_manager = active[0]["kind"] if active else NativeManager.NONE
            cluster.save(update_fields=["native_hostgroups", "native_manager", "updated_at"])
            node, _ = ProxySQLNode.objects.update_or_create(
                cluster=cluster,
                admin_host=plan.admin_host,
                admin_port=plan.admin_port,
                defaults={
                    "name": plan.node_name,
                    "admin_user": admin_user,
                    "admin_password": admin_password,
                    "version": plan.version,
                    "peers": plan.peers,
                    "adopted_at": timezone.now(),
                },
            )
            changes = {}
            for row in plan.rows:
                server, _ = Server.objects.get_or_create(
                    hostname=row.hostname, port=row.port, defaults={"cluster": cluster}
                )
                if server.cluster_id != cluster.pk:
                    raise AdoptionError(f"Backend {server} belongs to another cluster.")
                if row.action in ("create", "update"):
                    changes[(row.hostgroup_id, row.hostname, row.port)] = row.values
            node.mirror_rules.all().delete()
            MirrorRule.objects.bulk_create(
                [
                    MirrorRule(
                        proxysql_node=node,
                        rule_id=r["rule_id"],
                        active=bool(r["active"]),
                        match_digest=r["match_digest"] or "",
                        match_pattern=r["match_pattern"] or "",
                        destination_hostgroup=r["destination_hostgroup"],
                        mirror_hostgroup=r["mirror_hostgroup"],
                        mirror_flag_out=r["mirror_flagOUT"],
                    )
                    for r in plan.mirror_rules
                ]
            )
            record(
                "adopt proxysql node",
                actor=actor,
                cluster=cluster,
                target=str(node),
                details={
                    "cluster_created": created,
                    "node_existed": plan.node_exists,
                    "version": plan.version,
                    "servers_created": plan.servers_new,
                    "rows": plan.counts(),
                    "changes": [asdict(r) for r in plan.rows if r.action in ("create", "update")],
                    "kept_differences": [asdict(r) for r in plan.rows if r.action == "keep"],
                    "warnings": plan.warnings,
                    "snapshot_fingerprint": plan.fingerprint,
                    "kind": plan.kind,
                    "native_manager": cluster.native_manager,
                    "roles": plan.roles,
                    "writer_is_also_reader": plan.writer_is_also_reader,
                    "reasons": plan.reasons,
                },
            )
            # The variables operations change for a while go into the version (a re-adoption keeps its values:
            # the node may be read mid-operation).
            configuration.record_adoption(
                cluster, plan.node_name, changes, runtime, actor=actor, variables=plan.variables
            )
    except IntegrityError as exc:
        raise AdoptionError(f"The inventory changed while adopting ({exc}); preview again.") from None
    return cluster, node


# The adoption service: the page, the command line and the API are doors over these three functions.

log = logging.getLogger(__name__)
# A failed preview answers this many connect timeouts after it began (the slowest failure, a silent port, ends at
# one), so how long it took tells nothing either.
ANSWER_AFTER_CONNECT_TIMEOUTS = 1.5
ADOPT_ACTION = "adopt proxysql node"


class AdoptionRefused(AdoptionError):
    """Too many previews by this person in the last minute: the node was not read."""


def read_node(admin_host, admin_port, admin_user, admin_password, allowed=None, tls=None):
    """Network, the one read of a node to adopt: (Snapshot, ProxySQL's monitor credentials). Raises AdoptionError.
    `allowed` (may_receive()): the backends its monitor credentials may be sent to."""
    admin = ProxySQLAdmin(
        admin_host, admin_port, admin_user, admin_password, name=f"ProxySQL {admin_host}:{admin_port}", **(tls or {})
    )  # an existing cluster's TLS
    try:
        with admin:
            return read_snapshot(admin, allowed), read_monitor_credentials(admin)
    except ClientError as exc:
        raise AdoptionError(f"Could not read the ProxySQL node: {exc}") from None


def recent_attempts(user):
    """This user's adoption previews (read or failed) in the last minute, from the audit log (page and API)."""
    since = timezone.now() - timedelta(minutes=1)
    return AuditEvent.objects.filter(
        action=ADOPT_ACTION, actor_user_id=user.pk, created_at__gte=since, outcome__in=("dry_run", "failure")
    ).count()


def preview(
    *,
    admin_host,
    admin_port,
    admin_user,
    admin_password,
    cluster_name,
    node_name,
    kind=None,
    roles=None,
    writer_is_also_reader=None,
    overwrite=False,
    hostgroups=None,
    actor=None,
    backend_hosts=(),
):
    """Read the node and plan its adoption; nothing is saved. Returns (plan, monitor credentials).
    With an actor (a person at the page or the API) the attempt is audited and bounded to
    ADOPT_ATTEMPTS_PER_MINUTE a minute, so the door is no port scanner or password oracle: AdoptionRefused.
    Raises AdoptionError when the node cannot be read. The node's backends are read with its monitor credentials
    only where may_receive() allows: an existing cluster's credential hosts, or for a new cluster loopback and
    `backend_hosts` ((host, port) the person confirmed); the others are listed, unread."""
    target = f"{admin_host}:{admin_port}"
    if actor is not None and recent_attempts(actor.user) >= settings.ADOPT_ATTEMPTS_PER_MINUTE:
        record(
            ADOPT_ACTION,
            actor=actor,
            outcome="refused",
            target=target,
            details={"reason": f"more than {settings.ADOPT_ATTEMPTS_PER_MINUTE} attempts in a minute"},
        )
        raise AdoptionRefused(
            f"Too many adoption attempts: at most {settings.ADOPT_ATTEMPTS_PER_MINUTE} a minute. "
            "Wait a minute before trying again."
        )
    started = time.monotonic()
    try:
        existing = Cluster.objects.filter(name=cluster_name).first()
        snapshot, monitor = read_node(
            admin_host,
            admin_port,
            admin_user,
            admin_password,
            may_receive(existing, backend_hosts),
            existing.client_tls() if existing else None,
        )
    except AdoptionError as exc:
        if actor is None:  # the command line: its operator reads the node's own words
            raise
        # A person is told one thing, after one delay, whether the port is closed, answers something else than
        # ProxySQL, or refuses the credentials: the door is no port scanner (the cause goes to the server's log).
        log.info("adoption preview of %s failed: %s", target, exc)
        time.sleep(
            max(0.0, started + ANSWER_AFTER_CONNECT_TIMEOUTS * settings.PROXYSQL_CONNECT_TIMEOUT - time.monotonic())
        )
        told = (
            f"Could not read a ProxySQL admin interface at {target} with these credentials: the port is closed, "
            "is not a ProxySQL admin port, or refused them."
        )
        record(ADOPT_ACTION, actor=actor, outcome="failure", target=target, details={"error": told})
        raise AdoptionError(told) from None
    plan = plan_adoption(
        snapshot,
        cluster_name=cluster_name,
        node_name=node_name,
        admin_host=admin_host,
        admin_port=admin_port,
        kind=kind,
        roles=roles,
        writer_is_also_reader=writer_is_also_reader,
        overwrite=overwrite,
        hostgroups=hostgroups,
    )
    if actor is not None:
        record(
            ADOPT_ACTION,
            actor=actor,
            outcome="dry_run",
            target=target,
            details={"preview": "read", "admin_user": admin_user},
        )
    return plan, monitor


def confirm(plan, monitor, *, admin_user, admin_password, actor=None, peers=(), backend_hosts=()):
    """Adopt what the plan says with every other node of its ProxySQL Cluster: read them, write all of it in one
    transaction (audited) with the cluster's configuration version (apply_cluster_adoption: version 1 of a new
    cluster, from the node's runtime read just before). Returns (cluster, nodes, versions): the version each node's
    adoption recorded, or None. Raises AdoptionError, audited as a failure. The typed admin credentials go only to
    the members may_receive() allows: an existing cluster's credential hosts, or for a new one loopback and `peers`
    ((host, port) the person confirmed: the doors pass the members their preview listed, bound by its fingerprint).
    A new cluster with backends outside `backend_hosts` (those its preview confirmed) and loopback gets credential
    hosts that leave them out (new_cluster_credential_hosts)."""
    try:
        existing = Cluster.objects.filter(name=plan.cluster_name).first()
        allowed = may_receive(existing, peers)
        snapshots, error = read_members(
            plan, admin_user, admin_password, allowed, existing.client_tls() if existing else None
        )
        if error:
            raise AdoptionError(error)
        cluster, nodes = apply_cluster_adoption(
            plan,
            snapshots,
            admin_user=admin_user,
            admin_password=admin_password,
            monitor=monitor,
            actor=actor,
            credential_hosts="" if existing else new_cluster_credential_hosts(plan, backend_hosts),
        )
    except AdoptionError as exc:
        record(
            ADOPT_ACTION,
            actor=actor,
            outcome="failure",
            target=f"{plan.admin_host}:{plan.admin_port}",
            details={"error": str(exc)},
        )
        raise

    versions = [
        ConfigVersion.objects.filter(cluster=cluster, reason=f"adopted from {node.name}").order_by("-number").first()
        for node in nodes
    ]
    return cluster, nodes, versions
