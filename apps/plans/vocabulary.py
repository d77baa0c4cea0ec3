"""Plans are data. A plan is built once (guards with their current values, and per step the exact
admin statements for each ProxySQL node with the statements that undo them), shown to the operator,
stored with the Operation and executed as stored: preview equals execution by construction.

Rollback statements are idempotent (REPLACE INTO the original row, UPDATE back to the original
status, LOAD again), so a step interrupted half-way on a node is undone by running them all.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from apps.clients.secret_refs import SECRET_REF, Secret

PROXYSQL, WAIT_DRAIN, WAIT_CATCHUP, BACKEND, VERIFY, INVENTORY = (
    "proxysql",
    "wait_drain",
    "wait_catchup",
    "backend",
    "verify",
    "inventory",
)
# ProxySQL Cluster, the "propagate" way (sync_hold.propagate): until every peer has pulled what one node loaded.
WAIT_SYNC = "wait_sync"
# ProxySQL's own manager moves the writer (operations/native_switchover.py): until Monitor has placed it on every node,
# then the writer it placed recorded.
WAIT_MONITOR, MONITOR_WRITER = "wait_monitor", "monitor_writer"
# The drain probe's period: ConnUsed on every node at once, on open connections. Sessions leave a drained
# writer about 24 ms after the LOAD (reference drain.jsonl): a 5 ms period sees it within 5 ms.
DRAIN_POLL_MS = 5

Render = Callable[[str, tuple], str]  # a node driver's escaping: (template with %s, params) -> the statement
Spans = list[list[Any]]  # [[offset, ref], ...]: where secrets sit in one statement


@dataclass
class Guard:
    key: str
    label: str
    passed: bool
    value: str = ""
    overridable: bool = True


def no_other_operation(holder: str | None) -> Guard:
    """The guard every operation plans: the cluster's lock is free (holder: what holds it, read with the plan's
    snapshot, or None). Not an admin's override: a second operation waits."""
    return Guard(
        "no_other_operation", "No other operation runs on this cluster", holder is None, holder or "none", False
    )


@dataclass
class Step:
    key: str
    title: str
    kind: str
    # PROXYSQL: {node_id (str): {"name": ..., "sql": [...], "rollback": [...]}}
    nodes: dict = field(default_factory=dict)
    params: dict = field(default_factory=dict)
    # Past this step the operation no longer rolls back by itself and cannot be cancelled.
    point_of_no_return: bool = False
    # This step is already past the point of no return (a repair's writes: undoing them would put back the drift
    # it was asked to remove); a node that stops answering keeps the rest of its statements for later.
    forward_only: bool = False


@dataclass
class Plan:
    kind: str
    cluster_id: int
    title: str
    guards: list
    steps: list
    facts: dict = field(default_factory=dict)  # figures the operator should see (pinned sessions...)
    options: dict = field(default_factory=dict)
    # where the planner placed secrets: {statement: [[offset, ref], ...]}; None for a plan stored before (OLD_SHAPE)
    secrets: dict | None = field(default_factory=dict)

    @property
    def guards_passed(self) -> bool:
        return all(g.passed for g in self.guards)

    @property
    def failed_guards(self) -> list[Guard]:
        return [g for g in self.guards if not g.passed]

    def to_json(self) -> dict[str, Any]:
        """The plan as the Operation stores it: guards and steps as dicts, the rest as it is (shared, not copied:
        asdict's deep copy of a plan of 10,000 rows took seconds)."""
        return {**vars(self), "guards": [asdict(g) for g in self.guards], "steps": [dict(vars(s)) for s in self.steps]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Plan":
        data = dict(data)
        data["guards"] = [Guard(**g) for g in data["guards"]]
        data["steps"] = [Step(**s) for s in data["steps"]]
        data.setdefault("secrets", None)
        return cls(**data)

    def placed(self, statement: str) -> Spans:
        """[[offset, ref], ...]: where the planner put secrets in this statement (none: sent as it is)."""
        return (self.secrets or {}).get(statement, [])

    def to_send(self, statement: str, values: Mapping[str, str], render: Render) -> str:
        """The statement as sent: the secrets placed in it filled in from `values` ({ref: value}); a marker
        elsewhere is text, except in a plan stored before places were recorded, which is not run on a guess."""
        if self.placed(statement):
            return fill(statement, self.placed(statement), values, render)
        if self.secrets is None and SECRET_MARK in statement:
            raise ValueError(OLD_SHAPE)
        return statement

    def unplaced_markers(self) -> bool:
        """A plan stored before secrets were placed (OLD_SHAPE) whose statements hold a marker."""
        return self.secrets is None and SECRET_MARK in str([(s.nodes, s.params) for s in self.steps])


# A secret in a plan: the statement holds a marker where the value goes (what the preview and the audit
# log show), and the plan records where the planner put it: Plan.secrets = {statement: [[offset, ref], ...]}.
# The executor fills in those places only, with the escaped value from the encrypted store. A marker found
# anywhere else is an operator's text (refs are no secret: every YAML export shows them) and is sent as it is.
SECRET_MARK = "__SECRET__"
OLD_SHAPE = (
    "this plan was stored before secrets were placed by position (issue 22) and holds a secret marker: "
    "it is not run on a guess. Plan it again."
)


def secret_marker(ref: str) -> str:
    if not SECRET_REF.fullmatch(ref):
        raise ValueError(f"bad secret reference {ref!r}")
    return f"{SECRET_MARK}{ref}{SECRET_MARK}"


def place(render: Render, template: str, params: tuple, placed: dict[str, Spans]) -> str:
    """render(template, params), each Secret shown as its marker; where each one went is recorded in
    `placed` ({statement: [[offset, ref], ...]}), the only places the executor ever fills in."""
    shown = tuple(secret_marker(p.ref) if isinstance(p, Secret) else p for p in params)
    text = render(template, shown)
    if not any(isinstance(p, Secret) for p in params):
        return text
    pieces, built = template.split("%s"), ""
    spans: Spans = []
    for piece, param, value in zip(pieces, params, shown):
        built += piece
        if isinstance(param, Secret):
            spans.append([len(built), param.ref])
        built += render("%s", (value,))
    if built + pieces[-1] != text:  # a template with other % sequences: the offsets would be wrong
        raise ValueError(f"cannot place a secret in {template!r}")
    placed[text] = spans
    return text


def fill(statement: str, spans: Spans, values: Mapping[str, str], render: Render) -> str:
    """The statement to send: each placed marker replaced by its value, escaped by the node's driver."""
    for offset, ref in sorted(spans, reverse=True):  # from the end: earlier offsets stay right
        literal = render("%s", (secret_marker(ref),))
        if statement[offset : offset + len(literal)] != literal:
            raise ValueError(f"secret {ref} is not where the plan placed it")
        statement = statement[:offset] + render("%s", (values[ref],)) + statement[offset + len(literal) :]
    return statement


# Operation kinds and step kinds are registered, one spec and one handler each (registry.py).


SERVER_COLUMNS = (
    "hostgroup_id",
    "hostname",
    "port",
    "gtid_port",
    "status",
    "weight",
    "compression",
    "max_connections",
    "max_replication_lag",
    "use_ssl",
    "max_latency_ms",
    "comment",
)


class Renders(Protocol):
    """What Sql needs of a ProxySQL admin client (clients.proxysql.ProxySQLAdmin): its driver's escaping."""

    def render(self, template: str, params: tuple) -> str: ...


class Sql:
    """Admin statements for one ProxySQL node, rendered with that node's driver escaping (so the
    preview shows the exact text that will be sent)."""

    def __init__(self, admin: Renders, placed: dict[str, Spans] | None = None) -> None:
        self.admin = admin
        self.placed = {} if placed is None else placed  # where Secret values went (see place())

    def render(self, template: str, params: tuple) -> str:
        return place(self.admin.render, template, params, self.placed)

    def set_status(self, hostgroup: int, hostname: str, port: int, status: str) -> str:
        return self.render(
            "UPDATE mysql_servers SET status=%s WHERE hostgroup_id=%s AND hostname=%s AND port=%s",
            (status, int(hostgroup), hostname, int(port)),
        )

    def delete_server(self, hostgroup: int, hostname: str, port: int) -> str:
        return self.render(
            "DELETE FROM mysql_servers WHERE hostgroup_id=%s AND hostname=%s AND port=%s",
            (int(hostgroup), hostname, int(port)),
        )

    def replace_server(self, row: Mapping[str, Any]) -> str:
        """Put a whole mysql_servers row back (or in) exactly: `row` is a dict of SERVER_COLUMNS."""
        placeholders = ",".join(["%s"] * len(SERVER_COLUMNS))
        return self.render(
            f"REPLACE INTO mysql_servers ({','.join(SERVER_COLUMNS)}) VALUES ({placeholders})",
            tuple(row[c] for c in SERVER_COLUMNS),
        )

    def replace_servers(self, rows: Sequence[Mapping[str, Any]]) -> str:
        """Several whole mysql_servers rows in one statement (one admin round trip, as one REPLACE of each)."""
        one = "(" + ",".join(["%s"] * len(SERVER_COLUMNS)) + ")"
        return self.render(
            f"REPLACE INTO mysql_servers ({','.join(SERVER_COLUMNS)}) VALUES {','.join([one] * len(rows))}",
            tuple(row[c] for row in rows for c in SERVER_COLUMNS),
        )

    def delete_servers(self, keys: Sequence[tuple[int, str, int]]) -> str:
        """Several mysql_servers rows, by (hostgroup, hostname, port), deleted in one statement."""
        one = "(hostgroup_id=%s AND hostname=%s AND port=%s)"
        return self.render(
            f"DELETE FROM mysql_servers WHERE {' OR '.join([one] * len(keys))}",
            tuple(v for hg, host, port in keys for v in (int(hg), host, int(port))),
        )

    def set_variable(self, name: str, value: object) -> str:
        # Variable names come from our own constants, never from input; the value is escaped.
        return self.render(
            "UPDATE global_variables SET variable_value=%s WHERE variable_name=%s",
            (value if isinstance(value, Secret) else str(value), name),
        )

    def replace_row(self, table: str, row: Mapping[str, Any]) -> str:
        """REPLACE INTO one configuration table (name and columns from our own table specs), values escaped."""
        columns = list(row)
        return self.render(
            f"REPLACE INTO {table} ({','.join(columns)}) VALUES ({','.join(['%s'] * len(columns))})",
            tuple(row[c] for c in columns),
        )

    def delete_row(self, table: str, key: Mapping[str, Any]) -> str:
        """DELETE one row by its key ({column: value}; key columns are NOT NULL)."""
        where = " AND ".join(f"{c}=%s" for c in key)
        return self.render(f"DELETE FROM {table} WHERE {where}", tuple(key.values()))

    def set_galera_active(self, writer_hostgroup: int, active: bool) -> str:
        """Switch ProxySQL's Galera manager off (or on) for one mysql_galera_hostgroups row: an inactive row is
        not checked by Monitor, so the servers stay as loaded."""
        return self.render(
            "UPDATE mysql_galera_hostgroups SET active=%s WHERE writer_hostgroup=%s",
            (1 if active else 0, int(writer_hostgroup)),
        )

    @staticmethod
    def load(module: str) -> str:
        return f"LOAD {module} TO RUNTIME"

    @staticmethod
    def save(module: str) -> str:
        return f"SAVE {module} TO DISK"

    LOAD_SERVERS = "LOAD MYSQL SERVERS TO RUNTIME"
    SAVE_SERVERS = "SAVE MYSQL SERVERS TO DISK"
    LOAD_VARIABLES = "LOAD MYSQL VARIABLES TO RUNTIME"
    SAVE_VARIABLES = "SAVE MYSQL VARIABLES TO DISK"
