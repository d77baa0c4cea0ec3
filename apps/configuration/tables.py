"""The ProxySQL tables a cluster's configuration holds, as data: columns with their types, keys, the module
that LOADs and SAVEs them, and which rows belong to a cluster.

Column lists and CHECK constraints are those of ProxySQL 2.7.1 (../shared/proxysql-reference/schema;
a test holds this module to the lab double's copy of those definitions). Values are kept typed here
(int or str, None for NULL) although the admin interface sends every value as a string.
"""

import functools
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
import json
from typing import Any, TypeVar

from apps.fleet.validators import has_invisible

INT, TEXT = "int", "text"

# A column's value: int for INT, str for TEXT, None for NULL.
Value = int | str | None
# A row, column -> value. Typed as Any: which of Value's types a column holds is the table's data (Column.type),
# read at run time, which the checker cannot narrow; a row read from the admin interface holds strings (or bytes).
Row = Mapping[str, Any]
R = TypeVar("R", bound=Row)


@dataclass(frozen=True)
class Column:
    name: str
    type: str = INT
    null: bool = False
    default: Value = None
    choices: tuple[int | str, ...] = ()  # allowed values (a CHECK ... IN (...))
    min: int | None = None  # CHECK ranges
    max: int | None = None
    label: str = ""  # shown in forms
    # ProxySQL's LOAD shows NULL and '' as one value at runtime (NULL as '', or '' as NULL for digest): both mean
    # the same to it, so a comparison must not tell them apart (measured on real 2.5.5 and 2.7.1 with
    # lab/reference/conformance/null-defaults.sql; every other column of the tables read in three layers keeps
    # NULL and '' as written)
    blank_is_null: bool = False
    upper_at_runtime: bool = False  # ProxySQL's LOAD upper-cases it (re_modifiers): its case means nothing


@dataclass(frozen=True)
class Table:
    name: str
    module: str  # LOAD <module> TO RUNTIME / SAVE <module> TO DISK
    key: tuple[str, ...]
    columns: tuple[Column, ...]
    title: str
    scoped_by: str = ""  # a hostgroup column: only rows in the cluster's hostgroups belong to it

    @functools.cached_property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)

    def key_of(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[k] for k in self.key)

    @functools.cached_property
    def blank_null_columns(self) -> frozenset[str]:
        return frozenset(c.name for c in self.columns if c.blank_is_null)

    @functools.cached_property
    def upper_columns(self) -> frozenset[str]:
        return frozenset(c.name for c in self.columns if c.upper_at_runtime)

    def canonical_value(self, column: str, value: Any) -> Any:
        """The value as ProxySQL holds it once loaded: '' as NULL where it mixes them, upper case where its LOAD
        upper-cases it."""
        if value == "" and column in self.blank_null_columns:
            return None
        if isinstance(value, str) and column in self.upper_columns:
            return value.upper()
        return value

    def same_value(self, column: str, x: Any, y: Any) -> bool:
        """Whether ProxySQL holds x and y as the same value of this column."""
        return x == y or self.canonical_value(column, x) == self.canonical_value(column, y)

    def canonical(self, row: Row) -> dict[str, Any]:
        """The row as ProxySQL holds it once loaded (canonical_value): rows compare by value."""
        return {k: self.canonical_value(k, v) for k, v in row.items()}


def _b(name: str, default: int | None = 0, null: bool = False) -> Column:
    return Column(name, INT, null=null, default=default, choices=(0, 1))


MYSQL_SERVERS = Table(
    "mysql_servers",
    "MYSQL SERVERS",
    ("hostgroup_id", "hostname", "port"),
    (
        Column("hostgroup_id", min=0, default=0),
        Column("hostname", TEXT),
        Column("port", min=0, max=65535, default=3306),
        Column("gtid_port", min=0, max=65535, default=0),
        Column("status", TEXT, default="ONLINE", choices=("ONLINE", "OFFLINE_SOFT", "OFFLINE_HARD")),
        Column("weight", min=0, max=10_000_000, default=1),
        _b("compression"),
        Column("max_connections", min=0, default=1000),
        Column("max_replication_lag", min=0, max=126_144_000, default=0),
        _b("use_ssl"),
        Column("max_latency_ms", min=0, default=0),
        Column("comment", TEXT, default=""),
    ),
    "Backend servers",
    scoped_by="hostgroup_id",
)

MYSQL_QUERY_RULES = Table(
    "mysql_query_rules",
    "MYSQL QUERY RULES",
    ("rule_id",),
    (
        Column("rule_id", min=1),
        _b("active", 0),
        Column("username", TEXT, null=True),
        Column("schemaname", TEXT, null=True),
        Column("flagIN", min=0, default=0),
        Column("client_addr", TEXT, null=True),
        Column("proxy_addr", TEXT, null=True),
        Column("proxy_port", null=True, min=0, max=65535),
        Column("digest", TEXT, null=True, blank_is_null=True),
        Column("match_digest", TEXT, null=True),
        Column("match_pattern", TEXT, null=True),
        _b("negate_match_pattern", 0),
        Column("re_modifiers", TEXT, null=True, default="CASELESS", blank_is_null=True, upper_at_runtime=True),
        Column("flagOUT", null=True, min=0),
        Column("replace_pattern", TEXT, null=True),
        Column("destination_hostgroup", null=True, min=0),
        Column("cache_ttl", null=True, min=1),
        _b("cache_empty_result", None, null=True),
        Column("cache_timeout", null=True, min=0),
        _b("reconnect", None, null=True),
        Column("timeout", null=True, min=0),
        Column("retries", null=True, min=0, max=1000),
        Column("delay", null=True, min=0),
        Column("next_query_flagIN", null=True, min=0),
        Column("mirror_flagOUT", null=True, min=0),
        Column("mirror_hostgroup", null=True, min=0),
        Column("error_msg", TEXT, null=True),
        Column("OK_msg", TEXT, null=True),
        _b("sticky_conn", None, null=True),
        Column("multiplex", null=True, choices=(0, 1, 2)),
        Column("gtid_from_hostgroup", null=True, min=0),
        _b("log", None, null=True),
        _b("apply", 0),
        Column("attributes", TEXT, default=""),
        Column("comment", TEXT, null=True),
    ),
    "Query rules",
)

MYSQL_USERS = Table(
    "mysql_users",
    "MYSQL USERS",
    ("username",),
    (
        Column("username", TEXT),
        Column("password", TEXT, null=True, blank_is_null=True),
        _b("active", 1),
        _b("use_ssl", 0),
        Column("default_hostgroup", min=0, default=0),
        Column("default_schema", TEXT, null=True, blank_is_null=True),
        _b("schema_locked", 0),
        _b("transaction_persistent", 1),
        _b("fast_forward", 0),
        _b("backend", 1),
        _b("frontend", 1),
        Column("max_connections", min=0, default=10000),
        Column("attributes", TEXT, default=""),
        Column("comment", TEXT, default=""),
    ),
    "Users",
)

MYSQL_GALERA_HOSTGROUPS = Table(
    "mysql_galera_hostgroups",
    "MYSQL SERVERS",
    ("writer_hostgroup",),
    (
        Column("writer_hostgroup", min=0),
        Column("backup_writer_hostgroup", min=0),
        Column("reader_hostgroup", min=1),
        Column("offline_hostgroup", min=0),
        _b("active", 1),
        Column("max_writers", min=0, default=1),
        Column("writer_is_also_reader", choices=(0, 1, 2), default=0),
        Column("max_transactions_behind", min=0, default=0),
        Column("comment", TEXT, null=True),
    ),
    "Galera hostgroups (ProxySQL's native manager)",
    scoped_by="writer_hostgroup",
)

MYSQL_REPLICATION_HOSTGROUPS = Table(
    "mysql_replication_hostgroups",
    "MYSQL SERVERS",
    ("writer_hostgroup",),
    (
        Column("writer_hostgroup", min=0),
        Column("reader_hostgroup", min=0),
        Column(
            "check_type",
            TEXT,
            default="read_only",
            choices=(
                "read_only",
                "innodb_read_only",
                "super_read_only",
                "read_only|innodb_read_only",
                "read_only&innodb_read_only",
            ),
        ),
        Column("comment", TEXT, default=""),
    ),
    "Replication hostgroups (ProxySQL's native manager)",
    scoped_by="writer_hostgroup",
)

SCHEDULER = Table(
    "scheduler",
    "SCHEDULER",
    ("id",),
    (
        Column("id", min=1),
        _b("active", 1),
        Column("interval_ms", min=100, max=100_000_000, default=10000),
        Column("filename", TEXT),
        Column("arg1", TEXT, null=True),
        Column("arg2", TEXT, null=True),
        Column("arg3", TEXT, null=True),
        Column("arg4", TEXT, null=True),
        Column("arg5", TEXT, null=True),
        Column("comment", TEXT, default=""),
    ),
    "Scheduler",
)

# In the order a configuration is shown, exported and applied (servers before the rules that route to them).
TABLES = (
    MYSQL_SERVERS,
    MYSQL_GALERA_HOSTGROUPS,
    MYSQL_REPLICATION_HOSTGROUPS,
    MYSQL_USERS,
    MYSQL_QUERY_RULES,
    SCHEDULER,
)
BY_NAME = {t.name: t for t in TABLES}
VARIABLES = "global_variables"  # kept apart: {name: value}, one module per prefix
VARIABLE_MODULES = {"mysql-": "MYSQL VARIABLES", "admin-": "ADMIN VARIABLES"}


def variable_module(name: str) -> str:
    return next(m for prefix, m in VARIABLE_MODULES.items() if name.startswith(prefix))


class RowError(ValueError):
    """A row that ProxySQL's table would refuse (or that we refuse for it): which column and why."""

    def __init__(self, column: str, message: str) -> None:
        self.column = column
        self.message = message
        super().__init__(f"{column}: {message}")


def typed_row(table: Table, raw: Row, *, strict: bool = True) -> dict[str, Value]:
    """A row (dict of column -> str/None as the admin interface sends it, or already typed) as typed
    values in column order. strict: every column must be present (a read); else missing ones default."""
    row: dict[str, Value] = {}
    for col in table.columns:
        if col.name not in raw:
            if strict:
                raise RowError(col.name, "missing from the row")
            row[col.name] = col.default
            continue
        value = raw[col.name]
        if value is None:
            row[col.name] = None
        elif col.type == INT:
            try:
                row[col.name] = int(str(value).strip())
            except ValueError:
                raise RowError(col.name, f"{value!r} is not an integer") from None
        else:
            row[col.name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    return row


def host_error(value: str) -> str | None:
    """Why `value` cannot be a server's host name, or None. The pollers log in there with the cluster's monitor
    credentials: a line break, a space or an invisible character would hide where they go."""
    if not value.strip():
        return "is empty"
    bad = next((c for c in value if c.isspace() or has_invisible(c)), None)
    if bad is not None:
        name = unicodedata.name(bad, "a control character")
        return f"contains {name} (U+{ord(bad):04X}): a host name has no spaces, line breaks or invisible characters"
    return None


def check_row(table: Table, row: R) -> R:
    """Raise RowError for what ProxySQL's CHECK constraints (and NOT NULL) would refuse."""
    for col in table.columns:
        value = row.get(col.name)
        if value is None:
            if not col.null:
                raise RowError(col.name, "is required")
            continue
        if col.type == TEXT and "\x00" in value:
            raise RowError(col.name, "contains a NUL character")
        if col.name == "hostname" and (error := host_error(value)):  # mysql_servers and proxysql_servers
            raise RowError(col.name, error)
        if col.choices and value not in col.choices and not (col.type == TEXT and str(value).upper() in col.choices):
            raise RowError(col.name, f"must be one of {', '.join(map(str, col.choices))}")
        if col.type == INT:
            if col.min is not None and value < col.min:
                raise RowError(col.name, f"must be at least {col.min}")
            if col.max is not None and value > col.max:
                raise RowError(col.name, f"must be at most {col.max}")
            if value > 2_147_483_647:
                raise RowError(col.name, "is larger than ProxySQL's integers")
    if table is MYSQL_SERVERS and row["gtid_port"] and row["gtid_port"] == row["port"]:
        raise RowError("gtid_port", "must differ from port (or be 0)")
    if table is MYSQL_QUERY_RULES and row.get("replace_pattern") is not None and row.get("match_pattern") is None:
        raise RowError("replace_pattern", "needs a match_pattern")
    if table is MYSQL_GALERA_HOSTGROUPS:
        hgs = [
            row["writer_hostgroup"],
            row["backup_writer_hostgroup"],
            row["reader_hostgroup"],
            row["offline_hostgroup"],
        ]
        if len(set(hgs)) != 4:
            raise RowError("reader_hostgroup", "writer, backup writer, reader and offline hostgroups must all differ")
    if table is MYSQL_REPLICATION_HOSTGROUPS and row["reader_hostgroup"] == row["writer_hostgroup"]:
        raise RowError("reader_hostgroup", "must differ from the writer hostgroup")
    if table.column_names.count("attributes") and row.get("attributes"):
        try:
            json.loads(row["attributes"])
        except ValueError:
            raise RowError("attributes", "must be JSON (or empty)") from None
    return row
