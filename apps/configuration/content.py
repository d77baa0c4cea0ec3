"""A configuration as plain data, and what can be done to it without a network: edit, compare, project.

    {"roles": {"writer": 100, "reader": 101, "backup_writer": 102, "offline": 9101, "writer_is_also_reader": 1},
     "hostgroups": [100, 101, 102, 9101],          # mysql_servers rows in these hostgroups are the cluster's
     "mysql_servers": [row, ...], "mysql_galera_hostgroups": [...], "mysql_replication_hostgroups": [...],
     "mysql_users": [...], "mysql_query_rules": [...], "scheduler": [...],
     "global_variables": {"mysql-max_connections": "2048", "mysql-monitor_password": {"secret": "..."}, ...}}

Rows are dicts of every column of the table, typed (int / str / None), sorted by key. A password (a
user's, or a password variable) is {"secret": ref}: the value lives in ConfigSecret, encrypted.
"""

import hashlib
import hmac
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard, TypeVar, overload

from .tables import (
    BY_NAME,
    MYSQL_QUERY_RULES,
    MYSQL_SERVERS,
    MYSQL_USERS,
    SCHEDULER,
    TABLES,
    VARIABLES,
    Row,
    RowError,
    Table,
    check_row,
    typed_row,
)
from .variables import check as check_variable
from .variables import managed
from .variables import same as same_variable

ROLE_KEYS = ("writer", "reader", "backup_writer", "offline")

# A configuration (a version's content): "roles", "hostgroups", each table's rows by TABLES' names, VARIABLES. A dict
# read by a table's name held in a variable (no TypedDict key), its rows' values each column's type (tables.Row).
Content = dict[str, Any]
# An edit as a change set stores it (JSON): "op" and, by op, "roles", or "table" with "row"/"key", or "name"/"value".
Edit = Mapping[str, Any]
Key = tuple[Any, ...]  # a row's key (Table.key_of)
T = TypeVar("T")


class EditError(ValueError):
    """An edit that cannot be applied to this content: which one and why, in the operator's terms."""


def is_secret(value: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(value, dict) and "secret" in value


def mysql_native_hash(cleartext: str) -> str:
    """The password hash mysql_native_password stores, which ProxySQL accepts in mysql_users."""
    return "*" + hashlib.sha1(hashlib.sha1(cleartext.encode("utf-8")).digest()).hexdigest().upper()


@overload
def password_hash(value: str) -> str: ...
@overload
def password_hash(value: None) -> None: ...
def password_hash(value: str | None) -> str | None:
    """A mysql_users password as its hash (ProxySQL keeps what was written: cleartext or hash)."""
    if value is None or value == "":
        return value
    if is_hashed(value):
        return value.upper()
    return mysql_native_hash(value)


def same_secret(resolve: Callable[[str], str | None]) -> Callable[[Any, Any], bool]:
    """The one "same secret" check, as diff(same_secret=) takes it: two values, each a secret reference or a value
    read from a node, hold the same password. `resolve`: a reference -> its stored value (None when unknown), e.g.
    a plan's collector.value or the cluster's known secrets' .get."""

    def value(v: Any) -> Any:
        return resolve(v["secret"]) if is_secret(v) else v

    def same(a: Any, b: Any) -> bool:
        return secrets_match(value(a), value(b))

    return same


def secrets_match(a: str | None, b: str | None) -> bool:
    """Two passwords are the same when equal, or when their mysql_native_password hashes are (a node keeps what
    was written: clear text or hash). In constant time (hmac.compare_digest): how long the check takes says
    nothing of how much of a password matched. Nothing (None, "") matches only nothing of the same kind."""
    if not a or not b:
        return a == b  # no password on one side: nothing of a password to time
    as_written = _constant_time_equal(a, b)
    as_hashed = _constant_time_equal(password_hash(a), password_hash(b))  # both, whichever matched
    return as_written or as_hashed


def _constant_time_equal(a: object, b: object) -> bool:
    return hmac.compare_digest(str(a).encode("utf-8"), str(b).encode("utf-8"))


def shown(value: T, secret: bool = False) -> T | str:
    """A value as the pages show it: a secret reference as (secret), and so a password read from a node (clear
    text or hash alike, `secret`)."""
    return "(secret)" if is_secret(value) or (secret and value not in (None, "")) else value


def is_hashed(value: str) -> bool:
    """A mysql_users password written as its mysql_native_password hash (else it is clear text)."""
    return len(value) == 41 and value.startswith("*")


def empty() -> Content:
    return {"roles": {}, "hostgroups": [], **{t.name: [] for t in TABLES}, VARIABLES: {}}


def sort(content: Mapping[str, Any]) -> Content:
    """Rows in key order, hostgroups sorted: a canonical form, so equal configurations compare equal."""
    out: Content = {
        "roles": dict(content.get("roles") or {}),
        "hostgroups": sorted(set(content.get("hostgroups") or [])),
    }
    for table in TABLES:
        out[table.name] = sorted(content.get(table.name) or [], key=lambda r, t=table: sort_key(t.key_of(r)))
    out[VARIABLES] = dict(sorted((content.get(VARIABLES) or {}).items()))
    return out


def sort_key(key: Iterable[object]) -> tuple[tuple[int, object], ...]:
    return tuple((0, v) if isinstance(v, int) else (1, str(v)) for v in key)


def index(content: Mapping[str, Any], table: Table) -> dict[Key, Row]:
    return {table.key_of(r): r for r in content.get(table.name) or []}


def in_scope(table: Table, row: Row, hostgroups: Collection[int]) -> bool:
    return not table.scoped_by or row[table.scoped_by] in hostgroups


def claimed_hostgroups(content: Mapping[str, Any]) -> set[int]:
    """The cluster's hostgroups: its roles, what it claims, and every hostgroup its servers are in."""
    roles = content.get("roles") or {}
    native = {
        r[c]
        for t in ("mysql_galera_hostgroups", "mysql_replication_hostgroups")
        for r in content.get(t) or []
        for c in ("writer_hostgroup", "backup_writer_hostgroup", "reader_hostgroup", "offline_hostgroup")
        if c in r
    }
    return (
        {hg for k, hg in roles.items() if k in ROLE_KEYS and hg is not None}
        | set(content.get("hostgroups") or [])
        | {r["hostgroup_id"] for r in content.get(MYSQL_SERVERS.name) or []}
        | native
    )


# -- edits -----------------------------------------------------------------------------------------
def apply_edits(content: Mapping[str, Any], edits: Iterable[Edit]) -> Content:
    """The content after these edits (a new dict). Raises EditError naming the edit that cannot apply."""
    # A copy (the caller's content is a stored version's): rows are flat (a secret's {"secret": ref} is never
    # changed in place), so one level each; every table's rows by key, kept as the edits apply.
    out = {**content, "roles": dict(content.get("roles") or {}), VARIABLES: dict(content.get(VARIABLES) or {})}
    rows = {table.name: {table.key_of(r): dict(r) for r in content.get(table.name) or []} for table in TABLES}
    for n, edit in enumerate(edits, start=1):
        try:
            _apply(out, rows, edit)
        except RowError as exc:
            raise EditError(f"edit {n} ({describe(edit)}): {exc.column} {exc.message}") from None
        except (KeyError, TypeError, ValueError) as exc:
            raise EditError(f"edit {n} ({describe(edit)}): {exc}") from None
    for table in TABLES:
        out[table.name] = list(rows[table.name].values())
    out["hostgroups"] = sorted(claimed_hostgroups(out))
    return sort(out)


def _apply(content: Content, tables: dict[str, dict[Key, dict[str, Any]]], edit: Edit) -> None:
    """One edit on `content`; rows of the managed tables change in `tables` (table name -> {key: row})."""
    op = edit["op"]
    if op == "roles":
        roles = dict(content.get("roles") or {})
        roles.update(edit["roles"])
        ids = [roles.get(k) for k in ROLE_KEYS if roles.get(k) is not None]
        if roles.get("writer") is None or roles.get("reader") is None:
            raise EditError("the writer and reader hostgroups are required")
        if len(ids) != len(set(ids)):
            raise EditError("each role needs its own hostgroup")
        content["roles"] = roles
        return
    if edit["table"] == VARIABLES:
        if op == "set":
            value = edit["value"]
            if not is_secret(value):
                normalised, error = check_variable(edit["name"], value, known=None)
                if error:
                    raise EditError(f"{edit['name']} {error}")
                value = normalised
            content[VARIABLES][edit["name"]] = value
        elif op == "delete":
            content[VARIABLES].pop(edit["name"], None)
        else:
            raise EditError(f"unknown operation {op!r} on variables")
        return
    table = BY_NAME[edit["table"]]
    rows = tables[table.name]
    if op == "upsert":
        row: dict[str, Any] = check_row(
            table,
            typed_row(table, edit["row"], strict=False)
            if not _has_secret(edit["row"])
            else _typed_with_secret(table, edit["row"]),
        )
        if table is MYSQL_SERVERS:
            row["status"] = row["status"].upper()
        old_key = tuple(edit["key"]) if edit.get("key") else None
        if old_key is not None and old_key != table.key_of(row):
            rows.pop(old_key, None)  # a key column changed: the row moves
        rows[table.key_of(row)] = row
    elif op == "delete":
        key = tuple(edit["key"])
        if key not in rows:
            raise EditError(f"no {table.name} row {key}")
        del rows[key]
    else:
        raise EditError(f"unknown operation {op!r}")


def _has_secret(row: Row) -> bool:
    return any(is_secret(v) for v in row.values())


def _typed_with_secret(table: Table, row: Row) -> dict[str, Any]:
    plain = {k: (None if is_secret(v) else v) for k, v in row.items()}
    typed: dict[str, Any] = typed_row(table, plain, strict=False)
    check_row(table, {**typed, **{k: "x" for k, v in row.items() if is_secret(v)}})
    typed.update({k: v for k, v in row.items() if is_secret(v)})
    return typed


def on_the_host(edit: Edit) -> bool:
    """Whether an edit runs commands on the ProxySQL host or exposes it: a scheduler row (ProxySQL runs its
    `filename`, any executable, with its arguments) or an admin-* variable (the admin interface: its
    credentials, its REST API and web server). Only admins make these."""
    return edit.get("table") == SCHEDULER.name or (
        edit.get("table") == VARIABLES and str(edit.get("name", "")).startswith("admin-")
    )


def describe(edit: Edit) -> str:
    if edit.get("op") == "roles":
        return "hostgroup roles " + ", ".join(f"{k}={v}" for k, v in edit["roles"].items())
    if edit.get("table") == VARIABLES:
        value = "(a secret)" if is_secret(edit.get("value")) else edit.get("value")
        return f"{edit['op']} {edit['name']}" + (f" = {value}" if edit["op"] == "set" else "")
    name = edit.get("table")  # a malformed edit's may be a list: describing it must not raise (apply_edits)
    table = BY_NAME.get(name) if isinstance(name, str) else None
    key = edit.get("key") or (
        table.key_of(edit["row"]) if table and all(k in edit.get("row", {}) for k in table.key) else ""
    )
    return f"{edit.get('op')} {edit.get('table')} {list(key) if key else ''}".strip()


# -- comparing -------------------------------------------------------------------------------------
@dataclass
class RowChange:
    table: str
    key: Key
    change: str  # added / removed / changed
    before: Row | None
    after: Row | None
    fields: list[str] = field(default_factory=list)


@dataclass
class Diff:
    rows: list[RowChange]
    variables: list[tuple[str, Any, Any]]  # (name, before, after)
    roles: dict[str, tuple[int | None, int | None]]  # role -> (before, after) hostgroups

    @property
    def empty(self) -> bool:
        return not (self.rows or self.variables or self.roles)

    def by_table(self) -> dict[str, list[RowChange] | list[tuple[str, Any, Any]]]:
        rows: dict[str, list[RowChange]] = {}
        for change in self.rows:
            rows.setdefault(change.table, []).append(change)
        out: dict[str, list[RowChange] | list[tuple[str, Any, Any]]] = {**rows}
        if self.variables:
            out[VARIABLES] = self.variables
        return out

    def count(self) -> int:
        return len(self.rows) + len(self.variables) + len(self.roles)

    def tables(self) -> set[str]:
        return {c.table for c in self.rows} | ({VARIABLES} if self.variables else set())


def diff(a: Mapping[str, Any], b: Mapping[str, Any], *, same_secret: Callable[[Any, Any], bool] | None = None) -> Diff:
    """Row by row, field by field, from configuration a to b. `same_secret(x, y)` decides whether two
    secret values are equal (default: same reference)."""
    same_secret = same_secret or (lambda x, y: x == y)
    rows: list[RowChange] = []
    for table in TABLES:
        before, after = index(a, table), index(b, table)
        for key in sorted(before.keys() | after.keys(), key=sort_key):
            x, y = before.get(key), after.get(key)
            if x is None:
                rows.append(RowChange(table.name, key, "added", None, y))
            elif y is None:
                rows.append(RowChange(table.name, key, "removed", x, None))
            else:
                fields = [
                    c
                    for c in table.column_names
                    if not _equal(x.get(c), y.get(c), same_secret) and not table.same_value(c, x.get(c), y.get(c))
                ]
                if fields:
                    rows.append(RowChange(table.name, key, "changed", x, y, fields))
    va, vb = a.get(VARIABLES) or {}, b.get(VARIABLES) or {}
    variables = [
        (n, va.get(n), vb.get(n))
        for n in sorted(va.keys() | vb.keys())
        if not (_equal(va.get(n), vb.get(n), same_secret) or same_variable(n, va.get(n), vb.get(n)))
    ]
    ra, rb = a.get("roles") or {}, b.get("roles") or {}
    roles = {k: (ra.get(k), rb.get(k)) for k in sorted(ra.keys() | rb.keys()) if ra.get(k) != rb.get(k)}
    return Diff(rows, variables, roles)


def _equal(x: object, y: object, same_secret: Callable[[Any, Any], bool]) -> bool:
    if is_secret(x) or is_secret(y):
        return same_secret(x, y)
    return x == y


def edits_between(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The edits that turn configuration a into b (a revert, a file, a node's runtime taken in)."""
    edits: list[dict[str, Any]] = []
    d = diff(a, b)
    if d.roles:
        edits.append({"op": "roles", "roles": {k: after for k, (_, after) in d.roles.items()}})
    for change in d.rows:
        if change.change == "removed":
            edits.append({"op": "delete", "table": change.table, "key": list(change.key)})
        else:
            edits.append(
                {
                    "op": "upsert",
                    "table": change.table,
                    "row": change.after,
                    **({"key": list(change.key)} if change.change == "changed" else {}),
                }
            )
    for name, _, after in d.variables:
        edits.append(
            {"op": "delete", "table": VARIABLES, "name": name}
            if after is None
            else {"op": "set", "table": VARIABLES, "name": name, "value": after}
        )
    return edits


# -- what a node should show at runtime ------------------------------------------------------------
def runtime_users(rows: Iterable[Row]) -> list[dict[str, Any]]:
    """runtime_mysql_users lists an active user twice (frontend row, backend row) and an inactive one not at
    all: one row per user again, as memory holds it."""
    merged: dict[str, dict[str, Any]] = {}
    for r in rows:
        m = merged.setdefault(r["username"], dict(r, backend=0, frontend=0))
        m["backend"] |= r["backend"]
        m["frontend"] |= r["frontend"]
    return list(merged.values())


def expected_runtime(content: Mapping[str, Any], table: Table) -> list[Row]:
    """The rows this table's runtime_ layer shows when `content` is loaded: inactive users and inactive query rules
    are absent, and a NULL password reads '' (real 2.5.5 and 2.7.1: lab/reference/versions/proxysql-*-captured.json,
    "sequences"; lab/reference/conformance/null-defaults.sql)."""
    rows: list[Row] = content.get(table.name) or []
    if table is MYSQL_USERS:
        return [loaded_user(r) for r in rows if r["active"]]
    if table is MYSQL_QUERY_RULES:
        return [r for r in rows if r["active"]]
    return rows


def loaded_user(row: Row) -> Row:
    """A mysql_users row as runtime shows it once loaded: a NULL password reads ''."""
    return {**row, "password": ""} if row["password"] is None else row


def runtime_view(content: Mapping[str, Any]) -> Content:
    """The configuration as a node's runtime layer shows it once loaded (inactive users and query rules absent)."""
    return {
        **content,
        MYSQL_USERS.name: expected_runtime(content, MYSQL_USERS),
        MYSQL_QUERY_RULES.name: expected_runtime(content, MYSQL_QUERY_RULES),
    }


def managed_variables(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if managed(k)}


# -- operational state: owned by operations, never moved by a configuration ------------------------------
OFFLINE = ("OFFLINE_SOFT", "OFFLINE_HARD")


def endpoint(row: Row) -> str:
    return f"{row['hostname']}:{row['port']}"


def endpoints(pairs: Iterable[tuple[str, int]]) -> str:
    """[(host, port)] as "host:port, host:port" ("none" for none)."""
    return ", ".join(f"{h}:{p}" for h, p in pairs) or "none"


def writers(content: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The servers ONLINE in the writer hostgroup: [(host, port)], sorted."""
    writer = (content.get("roles") or {}).get("writer")
    return sorted(
        (r["hostname"], r["port"])
        for r in content.get(MYSQL_SERVERS.name) or []
        if r["hostgroup_id"] == writer and r["status"] == "ONLINE"
    )


def chosen_writers(content: Mapping[str, Any]) -> list[tuple[str, int]]:
    """The writers a configuration makes: writers(), except where ProxySQL's Galera manager is active on the writer
    hostgroup: there every configured row is a candidate and Monitor makes writers of the `max_writers` ONLINE ones of
    highest weight (a switchover through it swaps weights: operations/native_galera_switchover.py). Candidates tied at
    the cut all count: the configuration alone does not say which of them Monitor takes."""
    writer = (content.get("roles") or {}).get("writer")
    manager = next(iter(_manager_rows(content, "mysql_galera_hostgroups")), None)
    if manager is None:
        return writers(content)
    candidates = [
        r for r in content.get(MYSQL_SERVERS.name) or [] if r["hostgroup_id"] == writer and r["status"] == "ONLINE"
    ]
    weights = sorted((int(r["weight"]) for r in candidates), reverse=True)
    cut = weights[min(max(1, int(manager.get("max_writers") or 1)), len(weights)) - 1] if weights else 0
    return sorted((r["hostname"], r["port"]) for r in candidates if int(r["weight"]) >= cut)


def _manager_rows(content: Mapping[str, Any], table: str) -> list[Row]:
    """The active rows of a native manager's table (mysql_galera_hostgroups, mysql_replication_hostgroups) on the
    configuration's writer hostgroup."""
    writer = (content.get("roles") or {}).get("writer")
    return [
        g for g in content.get(table) or [] if int(g["writer_hostgroup"]) == writer and int(g.get("active", 1) or 0)
    ]


@dataclass
class OperationalChange:
    kind: str  # writer / drain / restore
    text: str  # "moves the writer from A to B", "drains A in hostgroup 101 (ONLINE → OFFLINE_SOFT)"
    way: str  # the operation that does it, guarded


def operational_changes(current: Mapping[str, Any], target: Mapping[str, Any]) -> list[OperationalChange]:
    """What `target` changes in the state operations own, against `current` (the latest version, which records
    every switchover and drain, or what a node runs): the writers it makes changing (chosen_writers: servers entering
    or leaving the writer hostgroup as ONLINE; under ProxySQL's Galera manager, the candidates of highest weight;
    under its replication manager, which places the writer by read_only, a server added to the writer hostgroup is
    none), and rows whose status changes to or from OFFLINE_SOFT / OFFLINE_HARD (a drain, a maintenance)."""
    out: list[OperationalChange] = []
    before, after = chosen_writers(current), chosen_writers(target)
    if before != after and not (_manager_rows(target, "mysql_replication_hostgroups") and set(before) <= set(after)):
        if before and after:
            text = f"moves the writer from {endpoints(before)} to {endpoints(after)}"
        elif before:
            text = f"takes the writer {endpoints(before)} out of the writer hostgroup"
        else:
            text = f"makes {endpoints(after)} the writer"
        to = f" to {endpoints(after)}" if len(after) == 1 else ""  # the switchover's new writer, when one
        out.append(
            OperationalChange("writer", text, f"use a switchover{to} (the cluster's page → Planned switchover) instead")
        )
    rows = index(current, MYSQL_SERVERS)
    for key, row in index(target, MYSQL_SERVERS).items():
        old = rows.get(key)
        if (
            old is None
            or old["status"] == row["status"]
            or (old["status"] not in OFFLINE and row["status"] not in OFFLINE)
        ):
            continue
        server = f"{endpoint(row)} in hostgroup {row['hostgroup_id']}"
        if row["status"] == "ONLINE":
            out.append(
                OperationalChange(
                    "restore",
                    f"puts {server} back ONLINE ({old['status']} → ONLINE)",
                    "use restore (the server's page → restore from maintenance) instead",
                )
            )
        else:
            out.append(
                OperationalChange(
                    "drain",
                    f"drains {server} ({old['status']} → {row['status']})",
                    "use a maintenance drain (the server's page → Maintenance drain) instead",
                )
            )
    return out
