"""ProxySQL's global variables as a configuration holds them: which ones, and which values ProxySQL would
really apply.

A value ProxySQL does not accept is kept in memory by `SET`/`UPDATE global_variables` and silently not
applied at LOAD (its runtime keeps the old value); an unknown variable vanishes at LOAD. So every value
is validated here, by the type and range ProxySQL 2.7.1 itself applies (proxysql_variables.tsv), before
it can reach a node.
"""

import re
from collections.abc import Container
from dataclasses import dataclass
from pathlib import Path

from apps.clients import proxysql_versions as versions

# Never part of a cluster's configuration: one node's identity (its listeners, its version), and the
# admin credentials the console itself logs in with (a change set must not lock the console out).
PER_NODE = frozenset(
    {
        "admin-mysql_ifaces",
        "admin-version",
        "mysql-interfaces",
        "admin-admin_credentials",
        "admin-stats_credentials",
        "admin-restapi_port",
        "admin-web_port",
        "admin-pgsql_ifaces",
    }
)  # 3.0: the PostgreSQL admin listener
# Passwords: kept as named secrets (encrypted), never in a version's content or an export.
SECRETS = frozenset({"mysql-monitor_password", "admin-cluster_password"})
# Read by ProxySQL only when it starts: a LOAD leaves the runtime value as it is.
RESTART_ONLY = frozenset({"mysql-threads", "mysql-stacksize"})
# Text variables a real 2.7.1 and 2.5.5 refuse to set to '' at LOAD: memory goes back to the runtime value
# (lab/reference/conformance/variables-blank.sql).
EMPTY_REFUSED = frozenset(
    {
        "mysql-default_schema",
        "mysql-keep_multiplexing_variables",
        "admin-stats_credentials",
        "mysql-default_session_track_gtids",
    }
)


@dataclass(frozen=True)
class VariableSpec:
    name: str
    type: str  # int | bool | text
    min: int | None
    max: int | None
    default: str


def _load() -> dict[str, VariableSpec]:
    specs = {}
    path = Path(__file__).with_name("proxysql_variables.tsv")
    for line in path.read_text().splitlines():
        if not line or line.startswith("#") or line.startswith("variable_name\t"):
            continue
        name, kind, lo, hi, default = line.split("\t")
        specs[name] = VariableSpec(name, kind, int(lo) if lo else None, int(hi) if hi else None, default)
    return specs


SPECS = _load()
INTEGER = re.compile(r"-?\d+")


def managed(name: str) -> bool:
    """Is this variable part of a cluster's configuration?"""
    return name.startswith(("mysql-", "admin-")) and name not in PER_NODE


def spec(name: str, known: Container[str] | None = None) -> VariableSpec | None:
    """The variable's spec; a variable the node lists but our table does not is text (`known`: the names the
    node has, from its global_variables)."""
    if name in SPECS:
        return SPECS[name]
    if name in versions.VARIABLE_VERSIONS:  # a variable of another version than 2.7 (2.5, 3.0)
        return VariableSpec(name, "text", None, None, "")
    if known is not None and name in known:
        return VariableSpec(name, "text", None, None, "")
    return None


# A value as a file, a form or a node gives it: text, a number, a boolean or None (YAML); compared as its text.
Value = object


def check(name: str, value: Value, known: Container[str] | None = None) -> tuple[str | None, str | None]:
    """(normalised value, None) when ProxySQL would apply `value` at LOAD, else (None, why not)."""
    if not managed(name):
        return None, "is not managed by the console (a node's identity or the console's own credentials)"
    s = spec(name, known)
    if s is None:
        return None, "is not a ProxySQL 2.7 variable (nor a 2.5, 2.6 or 3.0 one): it would vanish at LOAD"
    if name in RESTART_ONLY:
        return None, "is read by ProxySQL only when it starts: LOAD does not apply it (restart the node instead)"
    text = "" if value is None else str(value).strip()
    if s.type == "bool":
        if text.lower() in ("true", "1"):
            return "true", None
        if text.lower() in ("false", "0"):
            return "false", None
        return None, "must be true or false"
    if s.type == "int":
        if not INTEGER.fullmatch(text):
            return None, "must be an integer"
        number = int(text)
        if (s.min is not None and number < s.min) or (s.max is not None and number > s.max):
            return None, (
                f"must be between {s.min} and {s.max}: ProxySQL keeps any other value in memory "
                "and silently does not apply it"
            )
        return str(number), None
    if "\x00" in text:
        return None, "contains a NUL character"
    if text == "" and name in EMPTY_REFUSED:
        return None, "cannot be empty: ProxySQL keeps '' in memory and silently does not apply it"
    return str(value), None


def same(name: str, a: Value, b: Value) -> bool:
    """Equal as ProxySQL applies them (true/1, 007/7)."""
    if a == b:
        return True
    s = SPECS.get(name)
    if s is None:
        return False
    return check(name, a)[0] == check(name, b)[0] is not None
