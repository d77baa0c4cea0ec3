"""The admin statements that bring one node's memory layer to a target configuration, and their undo.

ProxySQL's admin interface has no transactions (BEGIN ... ROLLBACK undoes nothing), so the undo of a
change is writing the old rows back: every statement here has its inverse, built from the rows the node
held when the plan was made. Per module: deletes, then REPLACE of new or changed rows, then LOAD; the
SAVE to disk comes in its own step, after the runtime was verified.

A change set writes the rows of its own diff and no others: a row outside it stays as the node has it, even
when it differs from the version (that is drift, for repair or a write-back). A user it writes keeps its
password as the node holds it (clear text or hash) unless the change set sets a new one.
"""

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from apps.clients import proxysql_versions as versions
from apps.plans.vocabulary import Sql

from .content import Content, Diff, Key, in_scope, index, is_hashed, is_secret, password_hash, runtime_users
from .tables import (
    MYSQL_GALERA_HOSTGROUPS,
    MYSQL_QUERY_RULES,
    MYSQL_REPLICATION_HOSTGROUPS,
    MYSQL_SERVERS,
    MYSQL_USERS,
    SCHEDULER,
    VARIABLES,
    Row,
    Table,
    variable_module,
)
from .secrets import Collector
from .secrets import safe as secret_safe
from .variables import SECRETS as SECRET_VARIABLES
from .variables import same as same_variable

MODULE_ORDER = (
    ("MYSQL SERVERS", (MYSQL_SERVERS, MYSQL_GALERA_HOSTGROUPS, MYSQL_REPLICATION_HOSTGROUPS)),
    ("MYSQL USERS", (MYSQL_USERS,)),
    ("MYSQL QUERY RULES", (MYSQL_QUERY_RULES,)),
    ("SCHEDULER", (SCHEDULER,)),
    ("MYSQL VARIABLES", ()),
    ("ADMIN VARIABLES", ()),
)


@dataclass
class NodePlan:
    sql: list[str] = field(default_factory=list)
    rollback: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)  # modules this node loads (and saves)
    changes: int = 0
    passwords: dict[str, str] = field(default_factory=dict)  # user written -> how its password goes (never the value)


def _user_equal(a: Row, b: Row) -> bool:
    return MYSQL_USERS.canonical({**a, "password": password_hash(a["password"])}) == MYSQL_USERS.canonical(
        {**b, "password": password_hash(b["password"])}
    )


def diff_scope(intended: Diff) -> tuple[set[tuple[str, Key]], set[str], set[Key]]:
    """What a change set writes: its rows {(table, key)}, its variable names, and the users whose password it
    sets (new users included)."""
    return (
        {(c.table, c.key) for c in intended.rows},
        {name for name, _, _ in intended.variables},
        {
            c.key
            for c in intended.rows
            if c.table == MYSQL_USERS.name and (c.change == "added" or "password" in c.fields)
        },
    )


def _form(password: str) -> str:
    return "hashed" if is_hashed(password) else "clear text"


# (written mysql_servers rows {key: row or None}) -> (forward, undo) statements in place of LOAD MYSQL SERVERS
ServersLoad = Callable[[dict[Key, Row | None]], tuple[list[str], list[str]]]


def node_plan(
    sql: Sql,
    target: Content,
    memory: Mapping[str, Any],
    *,
    hostgroups: Collection[int],
    secrets: Collector,
    node_key: str = "node",
    intended: Diff | None = None,
    servers_load: ServersLoad | None = None,
) -> NodePlan:
    """Statements for one node. `memory` is the node's memory layer (nodes.read_layers), `hostgroups` every
    hostgroup the cluster held before or holds after (so released hostgroups are emptied), `secrets` a
    secrets.Collector: every password in a statement, new or old, is a Secret (a marker placed by position,
    filled in at execution).
    `intended` is the change set's diff (base -> target): only its rows and variables are written; None (a
    write-back) writes every difference.
    `servers_load`: (written) -> (forward, undo) put in place of LOAD MYSQL SERVERS after the module's statements
    and their undo (native_load.placement_load on a natively managed cluster); written: {key: row or None (deleted)}
    of the mysql_servers rows written."""
    plan = NodePlan()
    written_servers: dict[Key, Row | None] = {}
    forward: dict[str, list[str]] = {}
    undo: dict[str, list[str]] = {}
    if intended is not None:
        rows, variables, new_passwords = diff_scope(intended)

    def resolved(row: Row) -> dict[str, Any]:  # for comparing: the values
        return {k: (secrets.value(v["secret"]) if is_secret(v) else v) for k, v in row.items()}

    def keeps_password(key: Key, node_row: Row, row: Row) -> bool:
        """Whether a user written keeps the password the node holds: a change set that does not set it, or a
        write-back where the node's password is the version's in another form."""
        if node_row["password"] in (None, ""):
            return False
        if intended is not None:
            return key not in new_passwords
        return row["password"] not in (None, "") and password_hash(node_row["password"]) == password_hash(
            row["password"]
        )

    def written(table: Table, row: Row) -> Row:  # for statements: markers where passwords go
        if table is not MYSQL_USERS or row.get("password") in (None, ""):
            return row
        if is_secret(row["password"]):
            return {**row, "password": secrets.marker_for_ref(row["password"]["secret"])}
        return {
            **row,
            "password": secrets.marker_for_value(
                f"{node_key}/mysql_users/{secret_safe(row['username'])}", row["password"]
            ),
        }

    for module, tables in MODULE_ORDER:
        fwd: list[str] = []
        back: list[str] = []
        for table in tables:
            want = index(target, table)
            raw = [r for r in memory[table.name] if in_scope(table, r, hostgroups)]
            have = {table.key_of(r): r for r in (runtime_users(raw) if table is MYSQL_USERS else raw)}

            def as_held(a: Row, b: Row, table: Table = table) -> bool:  # as ProxySQL holds them (NULL and '', case)
                return table.canonical(a) == table.canonical(b)

            equal = _user_equal if table is MYSQL_USERS else as_held

            def restore(key: Key, table: Table = table, raw: list[Row] = raw) -> list[str]:
                """Exactly the memory rows this key had (a user may have two: frontend and backend)."""
                head = [sql.delete_row(table.name, dict(zip(table.key, key)))] if table is MYSQL_USERS else []
                return head + [sql.replace_row(table.name, written(table, r)) for r in raw if table.key_of(r) == key]

            if intended is not None:  # the change set's rows only
                want = {k: r for k, r in want.items() if (table.name, k) in rows}
                have = {k: r for k, r in have.items() if (table.name, k) in rows}
            for key in sorted(have.keys() - want.keys(), key=str):
                fwd.insert(0, sql.delete_row(table.name, dict(zip(table.key, key))))
                if table is MYSQL_SERVERS:
                    written_servers[key] = None
                back.extend(restore(key))
                plan.changes += 1
            for key in sorted(want.keys(), key=str):
                row = resolved(want[key])
                kept = table is MYSQL_USERS and key in have and keeps_password(key, have[key], row)
                if kept:
                    row = {**row, "password": have[key]["password"]}
                if key in have and equal(have[key], row):
                    continue
                if key in have and table is MYSQL_USERS:  # its frontend and backend rows go, the one row comes
                    fwd.append(sql.delete_row(table.name, dict(zip(table.key, key))))
                fwd.append(sql.replace_row(table.name, written(table, row if kept else want[key])))
                if table is MYSQL_SERVERS:
                    written_servers[key] = row
                if table is MYSQL_USERS and row["password"] not in (None, ""):
                    plan.passwords[key[0]] = (
                        f"password kept as the node has it ({_form(row['password'])})"
                        if kept
                        else f"password set ({_form(row['password'])})"
                    )
                back.extend(restore(key) if key in have else [sql.delete_row(table.name, dict(zip(table.key, key)))])
                plan.changes += 1
        if not tables:  # a variables module
            current = memory[VARIABLES]
            for name, value in sorted((target.get(VARIABLES) or {}).items()):
                if variable_module(name) != module or (intended is not None and name not in variables):
                    continue
                plain = secrets.value(value["secret"]) if is_secret(value) else value
                if name in current and same_variable(name, current[name], plain):
                    continue
                if versions.versions_differ(name, target, current.get(name), current.get("admin-version")):
                    continue  # this node's version lacks it (SET would apply nothing; a change set's is refused),
                    # or holds its own version's default where intent has another version's
                fwd.append(
                    sql.set_variable(name, secrets.marker_for_ref(value["secret"]) if is_secret(value) else value)
                )
                if name in current:
                    old = current[name]
                    if name in SECRET_VARIABLES:
                        old = secrets.marker_for_value(f"{node_key}/global_variables/{name}", old)
                    back.append(sql.set_variable(name, old))
                plan.changes += 1
        if fwd:
            load, load_back = [sql.load(module)], [sql.load(module)]
            if servers_load is not None and module == "MYSQL SERVERS":
                load, load_back = servers_load(written_servers)
            forward[module] = fwd + load
            undo[module] = back + load_back
            plan.modules.append(module)
    for module, _ in MODULE_ORDER:
        plan.sql += forward.get(module, [])
    for module, _ in reversed(MODULE_ORDER):
        plan.rollback += undo.get(module, [])
    return plan
