"""What differs between the ProxySQL versions a fleet runs side by side (2.5, 2.6, 2.7, 3.0), as far as the
configuration the console writes is concerned: a few variables. Read from ProxySQL's source at v2.5.5, v2.6.6,
v2.7.1 and the v3.0 branch (lab/reference/versions/README.md; a test holds this module to those facts).

The tables the console writes (mysql_servers, mysql_users, mysql_query_rules, the galera/replication hostgroup
tables, scheduler) have the same columns in all four, and every LOAD/SAVE statement it sends exists in all
four. What a version lacks is a variable: ProxySQL answers `SET <unknown>=...` with an OK carrying
"ERROR: Unknown global variable" and applies nothing, so a change of such a variable means something on one
node and nothing on another.
"""

import re
from collections.abc import Mapping
from typing import Any

KNOWN = ("2.5", "2.6", "2.7", "3.0")
# The variables that some of these versions have and others not -> the versions that have them.
SINCE_2_6 = ("2.6", "2.7", "3.0")
VARIABLE_VERSIONS = {
    "mysql-default_tx_isolation": ("2.5",),
    "admin-hash_passwords": ("2.5",),
    "mysql-default_authentication_plugin": SINCE_2_6,
    "mysql-evaluate_replication_lag_on_servers_load": SINCE_2_6,
    "mysql-handle_warnings": SINCE_2_6,
    "mysql-monitor_aws_rds_topology_discovery_interval": SINCE_2_6,
    "mysql-proxy_protocol_networks": SINCE_2_6,
    "mysql-query_cache_handle_warnings": SINCE_2_6,
    "admin-cluster_mysql_servers_sync_algorithm": SINCE_2_6,
    "admin-pgsql_ifaces": ("3.0",),
}
# The variables whose default differs between versions -> each version's default, measured on fresh real nodes
# started with the same configuration (lab/reference/versions/proxysql-2.5.5-captured.json and
# proxysql-2.7.1-captured.json; 2.6.6 is 2.7.1's commit; proxysql-3.0-captured.json, a 3.0 built from the v3.0 branch
# head: its mysql- and admin- defaults are 2.7.1's). A cluster adopted from a 2.5 node records 2.5's defaults: on its
# 2.7 or 3.0 node those are the versions' difference, not drift, and writing them would change that node
# (mysql-server_version 5.5.30 to its clients).
_V25_V27 = {  # name: (2.5, 2.6 to 3.0)
    "mysql-have_ssl": ("false", "true"),
    "mysql-monitor_history": ("600000", "7200000"),
    "mysql-query_digests_groups_grouping_limit": ("0", "10"),
    "mysql-server_capabilities": ("569899", "569867"),
    "mysql-server_version": ("5.5.30", "8.0.11"),
    "mysql-set_parser_algorithm": ("1", "2"),
    "mysql-tcp_keepalive_time": ("0", "120"),
    "mysql-use_tcp_keepalive": ("false", "true"),
}
DEFAULTS = {name: {"2.5": old, "2.6": new, "2.7": new, "3.0": new} for name, (old, new) in _V25_V27.items()}
VERSION_RE = re.compile(r"^\s*(\d+)\.(\d+)")


def series(version_text: str | None) -> str | None:
    """'2.5.5-10-g195bd70' -> '2.5'; None when it does not read as a version."""
    m = VERSION_RE.match(version_text or "")
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def lacks(version_text: str | None, name: str) -> bool:
    """Does a node of this version lack this variable? False when the version is unknown or the variable is in
    every version."""
    have = VARIABLE_VERSIONS.get(name)
    s = series(version_text)
    return have is not None and s in KNOWN and s not in have


def one_side_lacks(name: str, intended: Mapping[str, Any], node_value: str | None) -> bool:
    """A variable of some versions only that the configuration (recorded from a node of another version) or the
    node (a ProxySQL lists every variable it has) does not hold: the versions differ, which is not drift and
    nothing to write."""
    return name in VARIABLE_VERSIONS and (node_value is None or name not in (intended.get("global_variables") or {}))


def versions_differ(name: str, intended: Mapping[str, Any], node_value: str | None, node_version: str | None) -> bool:
    """Is the difference between intent and this node's value the versions' own, not drift and nothing to write?
    Either one side lacks a variable some versions lack (one_side_lacks), or the node holds its own version's default
    of a variable whose default differs between versions while intent holds another version's default (intent
    recorded from a node of that version). A node that holds anything else than its own default is judged as usual."""
    if one_side_lacks(name, intended, node_value):
        return True
    defaults = DEFAULTS.get(name) or {}
    node_series = series(node_version)
    mine = defaults.get(node_series) if node_series else None
    want = (intended.get("global_variables") or {}).get(name)
    return mine is not None and node_value == mine and want != mine and want in defaults.values()


def versions_with(name: str) -> str:
    return ", ".join(VARIABLE_VERSIONS.get(name, KNOWN))


# A defect some 3.0 builds have (captured on a real 3.0.1-39-g596d5ba, lab/reference/versions/README.md "Checked
# against a real 3.0"): LOAD MYSQL QUERY RULES TO RUNTIME exchanges a rule's mirror_hostgroup and mirror_flagOUT, and
# the rule routes by the exchanged values (sysown/proxysql#4867, fixed by #4872 in 2025-03). Told by its shape, not by
# version: which released builds have it is not known here.
MIRROR_COLUMNS = ("mirror_hostgroup", "mirror_flagOUT")
MIRROR_SWAP_WORDS = (
    "ProxySQL 3.0 builds before the fix of sysown/proxysql#4867 exchange these two at LOAD MYSQL QUERY "
    "RULES TO RUNTIME and route by the exchanged values; no LOAD repairs it: upgrade the node"
)


def mirror_swapped(want: Mapping[str, Any] | None, got: Mapping[str, Any] | None) -> bool:
    """Does the query rule `got` (a node's runtime row) hold `want`'s mirror_hostgroup and mirror_flagOUT exchanged,
    and the two differ? (Other columns are judged as usual.)"""
    a, b = MIRROR_COLUMNS
    if not want or not got:
        return False
    return want.get(a) != want.get(b) and got.get(a) == want.get(b) and got.get(b) == want.get(a)
