"""Reading what ProxySQL nodes hold, layer by layer, in the shape of a configuration (network only).

A node is read whole (every managed table, every variable) in one connection; the nodes of a cluster in
parallel, each bounded by the client's timeouts, so one node that does not answer costs one timeout.
"""

import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from concurrent.futures import TimeoutError as FuturesTimeout
from dataclasses import dataclass, field
from typing import Any

from apps.clients.proxysql import Layer, ProxySQLAdmin, configured_status, in_this_context, node_admin, with_clusters
from apps.clients.wire import ClientError
from apps.fleet import native
from apps.fleet.models import Cluster, ProxySQLNode

from .content import (
    ROLE_KEYS,
    Content,
    claimed_hostgroups,
    in_scope,
    managed_variables,
    password_hash,
    runtime_users,
    sort,
)
from .tables import MYSQL_QUERY_RULES, MYSQL_SERVERS, MYSQL_USERS, TABLES, VARIABLES, RowError, Value, typed_row
from .secrets import safe
from .statements import NodePlan
from .variables import SECRETS

# A node's layers as read: {"memory": content, "runtime": content}, each content with every managed table's rows
# and the variables (content.py's shape, not yet scoped to a cluster).
Layers = dict[Layer, Content]
ServerRows = list[dict[str, Value]]
# build(admin, layers, node, shunned): a caller's plan made with the node's connection still open.
Build = Callable[[ProxySQLAdmin, Layers, ProxySQLNode, ServerRows], NodePlan]


@dataclass
class NodeConfig:
    """One node's layers: {"memory": {...}, "runtime": {...}} with every row of every managed table (not
    only the cluster's) and every variable; or the error that kept us from reading it."""

    node_id: int
    name: str
    layers: Layers = field(default_factory=dict)
    error: str = ""
    error_kind: str = ""
    plan: NodePlan | None = None  # what a caller's build() made with the open connection (a plan's statements)
    shunned: ServerRows = field(default_factory=list)  # runtime mysql_servers rows ProxySQL itself set SHUNNED


def read_layers(
    admin: ProxySQLAdmin,
    layers: Sequence[Layer] = ("memory", "runtime"),
    tables: Collection[str] | None = None,
    shunned: ServerRows | None = None,
) -> Layers:
    """Every managed table and the variables of each layer; only `tables` (names) when given (a table not read
    is an empty list, the variables an empty dict unless "global_variables" is named). `shunned`, a list, gets
    the runtime mysql_servers rows whose status ProxySQL set itself (read as their configured status)."""
    out: Layers = {}
    for layer in layers:
        data: Content = {}
        for table in TABLES:
            if tables is not None and table.name not in tables:
                data[table.name] = []
                continue
            raw = admin.config_rows(
                table.name,
                table.column_names,
                table.key if table is not MYSQL_USERS else ("username", "backend"),
                layer,
            )
            try:
                rows = [typed_row(table, r) for r in raw]
            except RowError as exc:
                raise ClientError(admin.name, f"read {table.name}", str(exc)) from None
            if table is MYSQL_USERS and layer == "runtime":
                rows = runtime_users(rows)
            if table is MYSQL_SERVERS:  # status: a NOT NULL text column
                if layer == "runtime" and shunned is not None:
                    shunned += [dict(r) for r in rows if configured_status(_status(r)) != _status(r)]
                for r in rows:
                    r["status"] = configured_status(_status(r))
            data[table.name] = rows
        read_variables = tables is None or VARIABLES in tables
        data[VARIABLES] = admin.all_variables(layer) if read_variables else {}
        out[layer] = data
    return out


def _status(row: Mapping[str, Value]) -> str:
    return str(row["status"]).upper()


def read_node(
    node: ProxySQLNode, layers: Sequence[Layer] = ("memory", "runtime"), build: Build | None = None
) -> NodeConfig:
    """One node's layers; `build(admin, layers, node, shunned)`, if given, runs with the connection still open (plans
    render their statements with the node's own escaping; shunned: the runtime rows ProxySQL set SHUNNED)."""
    try:
        with node_admin(node) as admin:  # at an operation's start, the executor's open connection
            shunned: ServerRows = []
            data = read_layers(admin, layers, shunned=shunned)
            return NodeConfig(
                node.pk, node.name, data, plan=build(admin, data, node, shunned) if build else None, shunned=shunned
            )
    except ClientError as exc:
        return NodeConfig(node.pk, node.name, error=str(exc), error_kind=exc.kind)


def read_nodes(
    nodes: Iterable[ProxySQLNode], layers: Sequence[Layer], *, deadline: float, workers: int = 32
) -> dict[int, NodeConfig]:
    """{node_pk: NodeConfig} of the nodes (any clusters') read concurrently, those read by `deadline` (a
    time.monotonic() instant) only: a node still being read then is left out (its read ends by the client's own
    timeouts, unawaited). The drift watcher's: a fleet of silent nodes must not make it run past its beat."""
    listed = with_clusters(nodes)  # their TLS setting read here, not on the threads
    if not listed:
        return {}
    pool = ThreadPoolExecutor(max_workers=min(workers, len(listed)), thread_name_prefix="drift-read")
    futures: dict[Future[NodeConfig], int] = {pool.submit(read_node, n, layers): n.pk for n in listed}
    done: dict[int, NodeConfig] = {}
    try:
        for future in as_completed(futures, timeout=max(0.0, deadline - time.monotonic())):
            done[futures[future]] = future.result()
    except FuturesTimeout:
        pass
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return {n.pk: done[n.pk] for n in listed if n.pk in done}


def read_cluster(
    cluster: Cluster,
    layers: Sequence[Layer] = ("memory", "runtime"),
    nodes: Iterable[ProxySQLNode] | None = None,
    build: Build | None = None,
) -> dict[int, NodeConfig]:
    """{node_pk: NodeConfig} for the cluster's ProxySQL nodes (or the given ones), read concurrently."""
    listed = with_clusters(nodes if nodes is not None else cluster.proxysql_nodes.order_by("pk"))
    if not listed:
        return {}

    def one(node: ProxySQLNode) -> NodeConfig:
        return read_node(node, layers, build)

    with ThreadPoolExecutor(max_workers=min(16, len(listed)), thread_name_prefix="config-read") as pool:
        return {nc.node_id: nc for nc in pool.map(in_this_context(one), listed)}


def scoped(layer: Mapping[str, Any], hostgroups: Collection[int]) -> Content:
    """A node layer cut down to what a cluster's configuration holds: its hostgroups' rows, managed variables."""
    out: Content = {t.name: [r for r in layer[t.name] if in_scope(t, r, hostgroups)] for t in TABLES}
    out[VARIABLES] = managed_variables(layer[VARIABLES])
    return out


def as_content(
    layer: Mapping[str, Any],
    roles: Mapping[str, int | None],
    hostgroups: Collection[int],
    memory: Mapping[str, Any] | None = None,
) -> tuple[Content, dict[str, str]]:
    """A node layer as a configuration (version 1 at adoption, or 'take this node's runtime'), plus the
    secret values it names: (content, {secret name: value}). Passwords become named secrets: a user's as
    the hash ProxySQL accepts, a password variable as written. `memory`: the node's memory layer, whose inactive
    users and query rules are taken too (ProxySQL loads only the active ones: runtime never shows the others)."""
    content = scoped(layer, hostgroups)
    managed = native.managed_hostgroups([r for t in native.MANAGER_TABLES.values() for r in content.get(t) or ()])
    if memory is not None and managed:  # Monitor's placement at runtime: the rows configured are the intent
        content[MYSQL_SERVERS.name] = sorted(
            [r for r in content[MYSQL_SERVERS.name] if r["hostgroup_id"] not in managed]
            + [dict(r) for r in memory[MYSQL_SERVERS.name] if r["hostgroup_id"] in managed],
            key=lambda r: (r["hostgroup_id"], r["hostname"], r["port"]),
        )
    if memory is not None:
        for table in (MYSQL_USERS, MYSQL_QUERY_RULES):
            present = {table.key_of(r) for r in content[table.name]}
            for row in memory[table.name]:
                if not row["active"] and table.key_of(row) not in present:
                    present.add(table.key_of(row))
                    content[table.name].append(dict(row))
    secrets: dict[str, str] = {}
    for row in content[MYSQL_USERS.name]:
        if row["password"] not in (None, ""):
            name = f"mysql_users/{safe(row['username'])}"
            secrets[name] = password_hash(row["password"])
            row["password"] = {"secret": name}
    for var in SECRETS:
        if var in content[VARIABLES]:
            name = f"global_variables/{var}"
            secrets[name] = content[VARIABLES][var]
            content[VARIABLES][var] = {"secret": name}
    content["roles"] = {k: roles.get(k) for k in (*ROLE_KEYS, "writer_is_also_reader") if k in roles}
    content["hostgroups"] = sorted(set(hostgroups))
    content["hostgroups"] = sorted(claimed_hostgroups(content))
    return sort(content), secrets
