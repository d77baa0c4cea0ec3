"""The admin statements that bring one node's memory layer to a target configuration, and their undo.

ProxySQL's admin interface has no transactions (BEGIN ... ROLLBACK undoes nothing), so the undo of a
change is writing the old rows back: every statement here has its inverse, built from the rows the node
held when the plan was made. Per module: deletes, then REPLACE of new or changed rows, then LOAD; the
SAVE to disk comes in its own step, after the runtime was verified.
"""
from dataclasses import dataclass, field

from .content import in_scope, index, is_secret, password_hash, runtime_users
from .tables import (MYSQL_GALERA_HOSTGROUPS, MYSQL_QUERY_RULES, MYSQL_REPLICATION_HOSTGROUPS, MYSQL_SERVERS,
                     MYSQL_USERS, SCHEDULER, VARIABLES, variable_module)
from .secrets import safe as secret_safe
from .variables import SECRETS as SECRET_VARIABLES
from .variables import same as same_variable

MODULE_ORDER = (("MYSQL SERVERS", (MYSQL_SERVERS, MYSQL_GALERA_HOSTGROUPS, MYSQL_REPLICATION_HOSTGROUPS)),
                ("MYSQL USERS", (MYSQL_USERS,)), ("MYSQL QUERY RULES", (MYSQL_QUERY_RULES,)),
                ("SCHEDULER", (SCHEDULER,)), ("MYSQL VARIABLES", ()), ("ADMIN VARIABLES", ()))


@dataclass
class NodePlan:
    sql: list = field(default_factory=list)
    rollback: list = field(default_factory=list)
    modules: list = field(default_factory=list)     # modules this node loads (and saves)
    changes: int = 0


def _user_equal(a, b):
    return {**a, "password": password_hash(a["password"])} == {**b, "password": password_hash(b["password"])}


def node_plan(sql, target, memory, *, hostgroups, secrets, node_key="node"):
    """Statements for one node. `memory` is the node's memory layer (nodes.read_layers), `hostgroups` every
    hostgroup the cluster held before or holds after (so released hostgroups are emptied), `secrets` a
    secrets.Collector: every password in a statement, new or old, is a marker filled in at execution."""
    plan = NodePlan()
    forward, undo = {}, {}

    def resolved(row):  # for comparing: the values
        return {k: (secrets.value(v["secret"]) if is_secret(v) else v) for k, v in row.items()}

    def written(table, row):  # for statements: markers where passwords go
        if table is not MYSQL_USERS or row.get("password") in (None, ""):
            return row
        if is_secret(row["password"]):
            return {**row, "password": secrets.marker_for_ref(row["password"]["secret"])}
        return {**row, "password": secrets.marker_for_value(f"{node_key}/mysql_users/{secret_safe(row['username'])}", row["password"])}

    for module, tables in MODULE_ORDER:
        fwd, back = [], []
        for table in tables:
            want = index(target, table)
            raw = [r for r in memory[table.name] if in_scope(table, r, hostgroups)]
            have = {table.key_of(r): r for r in (runtime_users(raw) if table is MYSQL_USERS else raw)}
            equal = _user_equal if table is MYSQL_USERS else (lambda a, b: a == b)
            def restore(key, table=table, raw=raw):
                """Exactly the memory rows this key had (a user may have two: frontend and backend)."""
                head = [sql.delete_row(table.name, dict(zip(table.key, key)))] if table is MYSQL_USERS else []
                return head + [sql.replace_row(table.name, written(table, r)) for r in raw if table.key_of(r) == key]

            for key in sorted(have.keys() - want.keys(), key=str):
                fwd.insert(0, sql.delete_row(table.name, dict(zip(table.key, key))))
                back.extend(restore(key))
                plan.changes += 1
            for key in sorted(want.keys(), key=str):
                if key in have and equal(have[key], resolved(want[key])):
                    continue
                if key in have and table is MYSQL_USERS:  # its frontend and backend rows go, the one row comes
                    fwd.append(sql.delete_row(table.name, dict(zip(table.key, key))))
                fwd.append(sql.replace_row(table.name, written(table, want[key])))
                back.extend(restore(key) if key in have else [sql.delete_row(table.name, dict(zip(table.key, key)))])
                plan.changes += 1
        if not tables:  # a variables module
            current = memory[VARIABLES]
            for name, value in sorted((target.get(VARIABLES) or {}).items()):
                if variable_module(name) != module:
                    continue
                plain = secrets.value(value["secret"]) if is_secret(value) else value
                if name in current and same_variable(name, current[name], plain):
                    continue
                fwd.append(sql.set_variable(name, secrets.marker_for_ref(value["secret"]) if is_secret(value) else value))
                if name in current:
                    old = current[name]
                    if name in SECRET_VARIABLES:
                        old = secrets.marker_for_value(f"{node_key}/global_variables/{name}", old)
                    back.append(sql.set_variable(name, old))
                plan.changes += 1
        if fwd:
            forward[module] = fwd + [sql.load(module)]
            undo[module] = back + [sql.load(module)]
            plan.modules.append(module)
    for module, _ in MODULE_ORDER:
        plan.sql += forward.get(module, [])
    for module, _ in reversed(MODULE_ORDER):
        plan.rollback += undo.get(module, [])
    return plan
