"""ProxySQL Cluster (ProxySQL's own configuration sync) as the polls see it: pure functions over the latest-state
documents' "proxysql_cluster" part (settings_part + checks_part, written by pollers._cluster), for the cluster
page's panel and the alert rules.

What ProxySQL does (../shared/proxysql-reference/README.md, measured on 2.7.1): each node checks its peers every
admin-cluster_check_interval_ms; it pulls a module from a peer once it has seen the same different checksum
admin-cluster_<module>_diffs_before_sync checks in a row (0: never), if that peer's version is above 1 and its epoch
newer than its own (or its own version is 1). Versions are each node's own counter (not comparable across nodes);
checksums and epochs are. The traps (sysown/proxysql #1173, #3269, #2146, #4169) are named here with what clears them.

The mysql_servers module on 2.6+ (#4169; lab/reference/README.md, "sysown/proxysql #2146 on two real 2.7.1 nodes"):
the pull is decided on the mysql_servers_v2 checksum (the loaded mysql_servers plus the replication, group-replication,
galera and aurora hostgroup tables, hostgroup attributes and servers ssl params) and fetches every one of those tables
under every admin-cluster_mysql_servers_sync_algorithm; the mysql_servers checksum is runtime_mysql_servers alone.
Before 2.6 (no mysql_servers_v2 row in runtime_checksums_values) the older pull of #2146 is assumed.
"""

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeGuard

from apps.clients.proxysql import ModuleChecksum, PeerChecksum
from apps.clients.proxysql_versions import series
from apps.fleet.models import ProxySQLNode

from . import status

# The checksums the sync carries, in the order the page lists them, and their modules' LOAD/SAVE names.
# mysql_servers_v2 (2.6+) is part of the mysql_servers module: LOAD MYSQL SERVERS TO RUNTIME moves it.
MODULES = {
    "mysql_servers": "MYSQL SERVERS",
    "mysql_servers_v2": "MYSQL SERVERS",
    "mysql_users": "MYSQL USERS",
    "mysql_query_rules": "MYSQL QUERY RULES",
    "mysql_variables": "MYSQL VARIABLES",
    "admin_variables": "ADMIN VARIABLES",
    "proxysql_servers": "PROXYSQL SERVERS",
    "ldap_variables": "LDAP VARIABLES",
}
# A checksum with no admin-cluster_<name>_* settings of its own -> the module whose settings govern its pull.
SETTINGS_OF = {"mysql_servers_v2": "mysql_servers"}
# A peer's diff_check this far past diffs_before_sync means no pull happened when one was due: it only grows.
GROWTH_MARGIN = 3

Part = dict[str, Any]  # a document's "proxysql_cluster" part: settings_part() and checks_part() together
Row = dict[str, Any]  # one node's line of a module in cluster_view()


def settings_part(settings: Mapping[str, str | None], peers: Iterable[tuple[str, int | str]]) -> Part:
    """The document's "proxysql_cluster" settings from one read with the variables: `settings` {variable: value}
    (admin-cluster_*, never the password) and `peers` [(host, port)] (runtime_proxysql_servers)."""
    modules: dict[str, list[Any]] = {}
    for name in MODULES.keys() - SETTINGS_OF.keys():
        diffs = settings.get(f"admin-cluster_{name}_diffs_before_sync")
        if diffs is not None:
            modules[name] = [_int(diffs), settings.get(f"admin-cluster_{name}_save_to_disk") == "true"]
    return {
        "user": bool(settings.get("admin-cluster_username")),
        "modules": modules,
        "interval_ms": _int(settings.get("admin-cluster_check_interval_ms")),
        "algorithm": _int(settings.get("admin-cluster_mysql_servers_sync_algorithm")),
        "peers": [[h, int(p)] for h, p in peers],
    }


def checks_part(checksums: Iterable[ModuleChecksum] | None, seen: Iterable[PeerChecksum] | None) -> Part:
    """The document's "proxysql_cluster" checksums from one poll: `checksums` [ModuleChecksum] (the node's own) and
    `seen` [PeerChecksum] (its peers' as it last read them); None when not read (the node is in no cluster)."""
    return {
        "checksums": None if checksums is None else {c.name: [c.version, c.epoch, c.checksum] for c in checksums},
        "seen": None
        if seen is None
        else [
            [s.hostname, s.port, s.name, s.version, s.epoch, s.checksum, s.changed_at, s.updated_at, s.diff_check]
            for s in seen
        ],
    }


def configured(part: Part | None) -> TypeGuard[Part]:
    """Whether the node takes part in a ProxySQL Cluster at all: cluster credentials and peers."""
    return bool(part and part.get("user") and part.get("peers"))


def diffs_before_sync(part: Part, module: str) -> int:
    """The node's admin-cluster_<module>_diffs_before_sync for this checksum (mysql_servers_v2: mysql_servers'), else 0."""
    return (part["modules"].get(SETTINGS_OF.get(module, module)) or [0])[0] or 0


def sync_on(part: Part, module: str) -> bool:
    """Native sync of this module is on for this node: in a cluster, and diffs_before_sync > 0."""
    return configured(part) and diffs_before_sync(part, module) > 0


def pulls_on_v2(part: Part, version: str | None = None) -> bool:
    """Does this node (ProxySQL 2.6+) decide the mysql_servers pull on mysql_servers_v2, fetching every hostgroup
    table? By its polled version (admin-version) when read, else by a mysql_servers_v2 row among its checksums."""
    s = series(version)
    if s:
        return tuple(int(x) for x in s.split(".")) >= (2, 6)
    return "mysql_servers_v2" in (part.get("checksums") or {})


def _int(value: object) -> int | None:
    try:
        return int(value)  # type: ignore[call-overload]  # anything: what int() refuses is None
    except (TypeError, ValueError):
        return None


def _same_host(a: str, b: str) -> bool:
    local = ("127.0.0.1", "localhost", "::1")
    return a == b or (a in local and b in local)


def self_row(part: Part, host: str, port: int) -> tuple[str, int] | None:
    """(host, port) of the node's own row in its proxysql_servers: its admin endpoint, else the row whose checksums
    are all its own (a node listed by another name)."""
    rows: dict[tuple[str, int], dict[str, list[Any]]] = {}
    for h, p, name, ver, epoch, csum, *_ in part.get("seen") or []:
        rows.setdefault((h, p), {})[name] = [ver, epoch, csum]
    for h, p in rows:
        if p == port and _same_host(h, host):
            return (h, p)
    own = part.get("checksums") or {}
    for key, values in rows.items():
        if own and all(values.get(name) == value for name, value in own.items() if name in values):
            return key
    return None


def synced_from(part: Part, host: str, port: int, module: str) -> tuple[str, float] | None:
    """(peer "host:port", when) this node last took `module` from, else None: the peer that already held the node's
    checksum and epoch when the node first saw it change (the node itself changed later), as its own
    stats_proxysql_servers_checksums says. Needs the node to list itself in proxysql_servers (the usual layout)."""
    own = (part.get("checksums") or {}).get(module)
    me = self_row(part, host, port)
    if not own or own[0] <= 1 or me is None:
        return None
    rows = [r for r in part.get("seen") or [] if r[2] == module]
    mine = next((r for r in rows if (r[0], r[1]) == me), None)
    if mine is None:
        return None
    sources = [r for r in rows if (r[0], r[1]) != me and r[5] == own[2] and r[4] == own[1] and r[6] < mine[6]]
    if not sources:
        return None
    src = min(sources, key=lambda r: r[6])
    return f"{src[0]}:{src[1]}", mine[6]


def growing(part: Part, host: str, port: int) -> list[tuple[str, str, int, int, int]]:
    """The peers whose diff_check on this node is past diffs_before_sync + GROWTH_MARGIN for a module whose sync is on:
    [(peer "host:port", module, diff_check, peer version, peer epoch)]."""
    me = self_row(part, host, port)
    out: list[tuple[str, str, int, int, int]] = []
    for h, p, name, ver, epoch, _csum, _ch, _up, diff in part.get("seen") or []:
        if (h, p) != me and sync_on(part, name) and diff > diffs_before_sync(part, name) + GROWTH_MARGIN:
            out.append((f"{h}:{p}", name, diff, ver, epoch))
    return out


def why_growing(
    part: Part, module: str, peer_version: int, peer_epoch: int, version: str | None = None
) -> tuple[str, str]:
    """(what it is, the action that clears it) for a diff_check that only grows on a node (`part`, its ProxySQL
    `version` as polled: admin-version) for a peer."""
    load = f"LOAD {MODULES[module]} TO RUNTIME"
    own = (part.get("checksums") or {}).get(module) or [0, 0, ""]
    servers = MODULES[module] == "MYSQL SERVERS"
    v2 = servers and pulls_on_v2(part, version)
    if peer_version == 1 and own[0] == 1:
        return (
            "both nodes hold it at version 1 (started from disk, no LOAD since): a module at version 1 is never a "
            "sync source (sysown/proxysql #1173, #3269)",
            f"{load} on the node whose {module} is right: no node can be a sync source until a LOAD ... TO RUNTIME "
            f"on one node",
        )
    if v2 and peer_epoch == own[1]:
        return (
            "both nodes loaded different mysql_servers or hostgroup tables (galera, replication, group "
            "replication, aurora, attributes, ssl params) within the same second: the same epoch with different "
            "mysql_servers_v2 checksums, so neither pulls and they never converge (2.6+ decides the pull on "
            "mysql_servers_v2 and fetches every one of those tables, whatever the sync algorithm)",
            f"{load} on one node only, the one whose servers and hostgroup tables are intended, in a later second: "
            "its newer epoch makes it the source and the other nodes pull all of it within about 3 s (a LOAD on "
            "every node starts the same-second conflict again)",
        )
    if peer_epoch == own[1]:
        return (
            "both nodes loaded different configurations within the same second: the same epoch, so neither pulls "
            "and they never converge",
            f"{load} again on the node whose {module} is right: its newer epoch makes it the source",
        )
    if module == "mysql_servers" and not v2:
        return (
            "the mysql_servers checksum covers the galera, replication, group-replication and aurora hostgroup "
            "tables, which the sync before 2.6 does not all pull: the difference stays and diff_check climbs "
            "(sysown/proxysql #2146; 2.6+ pulls every hostgroup table on mysql_servers_v2, #4169)",
            "make mysql_galera/replication/group_replication_hostgroups the same on every node (write them and "
            f"{load} on each, a second or more apart), or upgrade to 2.6+",
        )
    if module == "mysql_servers" and part.get("algorithm") in (2, 3):
        return (
            f"runtime_mysql_servers differs (Monitor's moves of a node's own runtime) while mysql_servers_v2 does "
            f"not: admin-cluster_mysql_servers_sync_algorithm={part['algorithm']} never pulls a runtime-only "
            "difference (3: unless ProxySQL runs with -M; ProxySQL 2.7.1's source, not measured)",
            "nothing to LOAD: each node's Monitor keeps its own runtime; admin-cluster_mysql_servers_sync_algorithm=1 "
            "on every node syncs runtime_mysql_servers too",
        )
    return (
        "the peer with the older state does not pull it (its sync of this module is off, or its cluster "
        "credentials do not open this node's admin)",
        f"check admin-cluster_{module}_diffs_before_sync and admin-cluster_username/password on every node, "
        f"or {load} on the node whose {module} is right",
    )


def not_synced_yet(module: str, read: Sequence[Row], parts: Mapping[int, Part | None], now: float) -> bool:
    """The nodes differ on `module` only because the newest LOAD is younger than the peers' pull takes: every node
    without the newest checksum syncs the module, and less than (diffs_before_sync + 1) checks have passed since that
    epoch (the first check comes up to one interval after the LOAD). "Peer has not synced yet", not a difference."""
    newest = max(read, key=lambda r: r["epoch"] or 0)
    for r in read:
        if r["checksum"] == newest["checksum"]:
            continue
        part = parts[r["node"].pk]
        if not part or not r["sync"] or not newest["epoch"]:  # (a node not read is not pulling)
            return False
        window = (diffs_before_sync(part, module) + 1) * (part.get("interval_ms") or 1000) / 1000
        if now - newest["epoch"] >= window:
            return False
    return True


def cluster_view(nodes: Sequence[ProxySQLNode], docs: Mapping[int, Any]) -> dict[str, Any] | None:
    """The cluster page's "ProxySQL Cluster" panel from the nodes' latest documents: None when no node takes part in
    a ProxySQL Cluster. `nodes`: ProxySQLNode rows (name, admin_host, admin_port, pk); `docs`: {pk: document or None},
    a reader's struct with ts and proxysql_cluster (selectors.NodeDoc)."""
    parts = {n.pk: d.proxysql_cluster if (d := docs.get(n.pk)) else None for n in nodes}
    if not any(configured(p) for p in parts.values()):
        return None
    polled_at = max((d.ts if (d := docs.get(n.pk)) else 0) for n in nodes)
    modules: list[dict[str, Any]] = []
    for module, load in MODULES.items():
        rows: list[Row] = []
        for n in nodes:
            part = parts[n.pk]
            if not part:
                continue
            own = (part.get("checksums") or {}).get(module)
            source = synced_from(part, n.admin_host, n.admin_port, module) if own else None
            rows.append(
                {
                    "node": n,
                    "sync": sync_on(part, module),
                    "version": own and own[0],
                    "epoch": own and own[1],
                    "checksum": own and own[2],
                    "synced_from": source and source[0],
                    "synced_at": source and source[1],
                }
            )
        read = [r for r in rows if r["checksum"] is not None]
        if not read:
            continue  # a module no node has (ldap_variables without LDAP)
        groups: dict[str, list[str]] = {}
        for r in read:
            groups.setdefault(r["checksum"], []).append(r["node"].name)
        traps: list[tuple[str, str]] = []
        if any(r["sync"] for r in rows) and len(read) > 1 and all(r["version"] == 1 for r in read):
            traps.append(
                (
                    f"every node holds {module} at version 1 (started from disk, no LOAD since): a module at "
                    "version 1 is never a sync source (sysown/proxysql #1173, #3269)",
                    f"no node can be a sync source until a LOAD ... TO RUNTIME on one node: LOAD {load} TO RUNTIME "
                    "on the node whose configuration is right",
                )
            )
        epochs: dict[int, set[str]] = {}
        for r in read:
            epochs.setdefault(r["epoch"], set()).add(r["checksum"])
        if any(len(sums) > 1 for sums in epochs.values()):
            traps.append(
                (
                    "nodes loaded different configurations within the same second (the same epoch, different "
                    "checksums): they never converge",
                    f"LOAD {load} TO RUNTIME again on the node whose configuration is right, on that node only "
                    "(a LOAD on every node starts the conflict again)",
                )
            )
        pulling = len(groups) > 1 and not traps and not_synced_yet(module, read, parts, polled_at)
        modules.append(
            {
                "name": module,
                "part_of": SETTINGS_OF.get(module),
                "rows": rows,
                "sync_on": [r["node"].name for r in rows if r["sync"]],
                "sync_off": [r["node"].name for r in rows if not r["sync"]],
                "converged": len(groups) <= 1,
                "not_synced_yet": pulling,
                "groups": groups,
                "traps": traps,
            }
        )
    grows: list[dict[str, Any]] = []
    for n in nodes:
        part = parts[n.pk]
        if not configured(part):
            continue
        for peer, module, diff, ver, epoch in growing(part, n.admin_host, n.admin_port):
            what, action = why_growing(part, module, ver, epoch, status.polled_version(n, docs.get(n.pk)))
            grows.append(
                {"node": n, "peer": peer, "module": module, "diff_check": diff, "what": what, "action": action}
            )
    return {
        "modules": modules,
        "disagree": [m for m in modules if not m["converged"] and not m["not_synced_yet"]],
        "not_synced_yet": [m for m in modules if m["not_synced_yet"]],
        "growing": grows,
    }
