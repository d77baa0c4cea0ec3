"""Configuration rows as a DBA reads them in a table: the columns read first, the rest of each row folded (only
what is set; NULLs counted, never listed), secrets shown as such."""

from collections.abc import Iterable
from typing import Any, TypedDict, TypeVar

from . import content as C
from .tables import Row, Table

T = TypeVar("T")

# The columns a DBA reads first in each table (what routes, where, whether it applies); the others fold per row.
FIRST_COLUMNS = {
    "mysql_servers": (
        "hostgroup_id",
        "hostname",
        "port",
        "status",
        "weight",
        "max_connections",
        "max_replication_lag",
        "comment",
    ),
    "mysql_query_rules": (
        "rule_id",
        "active",
        "username",
        "schemaname",
        "match_digest",
        "match_pattern",
        "destination_hostgroup",
        "apply",
        "mirror_hostgroup",
        "cache_ttl",
        "comment",
    ),
    "mysql_users": (
        "username",
        "active",
        "default_hostgroup",
        "default_schema",
        "transaction_persistent",
        "fast_forward",
        "max_connections",
        "comment",
    ),
}


class CompactRow(TypedDict):
    """One row as the configuration pages' tables show it."""

    key: list[Any]  # the row's key values (Table.key_of)
    cells: list[Any]  # the first columns' values, a secret as "(secret)"
    more: list[tuple[str, Any]]  # (column, value) of the other columns that are set
    nulls: int  # how many of the other columns are NULL


def _shown(value: T) -> T | str:
    return "(secret)" if C.is_secret(value) else value


def first_columns(table: Table) -> tuple[str, ...]:
    return FIRST_COLUMNS.get(table.name, table.column_names)


def compact_rows(table: Table, rows: Iterable[Row]) -> list[CompactRow]:
    """Each row as its key, its first cells, the other columns that are set ((name, value) pairs) and its NULL count."""
    first = first_columns(table)
    out: list[CompactRow] = []
    for r in rows:
        rest = [c for c in table.column_names if c not in first]
        out.append(
            {
                "key": list(table.key_of(r)),
                "cells": [_shown(r[c]) for c in first],
                "more": [(c, _shown(r[c])) for c in rest if r[c] is not None],
                "nulls": sum(1 for c in rest if r[c] is None),
            }
        )
    return out
