"""A change set's LOAD of mysql_servers on a cluster whose servers ProxySQL's replication or Galera manager places
(Cluster.native_manager "replication" or "galera"; fleet/native.py). Loading the configured rows as they are (every
backend in the writer hostgroup, as the operator configured them) starts Monitor again from them: until its next check
every backend there is an ONLINE writer and clients' writes reach them. On real 2.7.1 (issue 33): with the replication
manager, writes to the read_only backends failed with 1290; with the Galera manager, all three Galera nodes took
writes for up to a healthcheck (5 s): certification failures, 1213 (lab/reference/native-galera/
change-set-under-sysbench.md). So, as the native switchovers' drain does (operations/native_switchover.py,
native_galera_switchover.py): memory takes Monitor's placement as the node runs it with the change set's edits, LOAD,
then memory back to the configured rows with the edits (no LOAD). The Galera manager's SHUNNED marks of its backup
writers in its writer hostgroup are loaded as marks, SHUNNED, with the edited columns (marks_kept): read as ONLINE
they would be loaded as writers; left out (as before), a check of Monitor's that raced the LOAD once wrote a mark with
the old weight, and Monitor never rewrites an existing mark (its UPDATE OR IGNORE keeps the row already in the writer
hostgroup: lab/reference/native-galera/change-set-under-sysbench.md), so it stayed until the next LOAD. A loaded
SHUNNED row is no automatic shun: ProxySQL never unshuns it by time (MyHGC: shunned_automatic only) and sends it no
traffic, as Monitor's own marks. The runtime never shows the configured rows' placement; the SAVE
step writes the configured rows to disk.

Pure: the rows are the layers nodes.read_layers gave (runtime statuses read as configured: SHUNNED is ONLINE)."""

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from apps.plans.vocabulary import Sql

from .tables import MYSQL_SERVERS

# A mysql_servers row as the layers read it: its columns' values are strings, numbers or NULL as each column holds
# (the numbers of a key may come as strings: key() reads them as numbers).
Row = Mapping[str, Any]
Key = tuple[int, str, int]  # (hostgroup_id, hostname, port)


def key(row: Row) -> Key:
    """A mysql_servers row's key with its numbers as numbers."""
    return int(row["hostgroup_id"]), row["hostname"], int(row["port"])


def marks_kept(runtime_rows: Iterable[Row], shunned: Iterable[Row], writer_hostgroups: Collection[int]) -> list[Row]:
    """The runtime rows with the SHUNNED rows in these writer hostgroups SHUNNED again (shunned: the runtime rows
    ProxySQL set SHUNNED, nodes.read_layers; runtime_rows read them as ONLINE): the Galera manager's marks of its
    backup writers, loaded as marks."""
    marks = {key(r) for r in shunned if int(r["hostgroup_id"]) in writer_hostgroups}
    return [{**r, "status": "SHUNNED"} if key(r) in marks else r for r in runtime_rows]


def _backend(key: Key) -> tuple[str, int]:
    return key[1], int(key[2])


def placed_with_edits(
    placed: Mapping[Key, Row],
    before: Mapping[Key, Row],
    after: Mapping[Key, Row],
    entry: Mapping[int, int] | None = None,
) -> dict[Key, Row]:
    """Monitor's placement (runtime rows {key: row} in the managed hostgroups) with the change set's edits: a backend
    whose configured rows the change set did not touch stays where Monitor put it, as it is; a touched backend keeps
    each hostgroup Monitor placed it in, with its configured row's columns after the edits (the same key's row, else
    its first), the status Monitor left unless the edit changed the configured one; a backend placed nowhere yet
    (new) goes in as configured, Monitor moving it from there, except that a row of it in a manager's writer hostgroup
    goes to that manager's `entry` hostgroup ({writer: where a new backend enters}: loaded ONLINE in the writer
    hostgroup it would take writes beside Monitor's writer until Monitor's next check); one the edits removed from
    every managed hostgroup goes. before / after: the configured rows {key: row} in the managed hostgroups before and
    after the edits."""
    touched = {
        _backend(k)
        for k in before.keys() | after.keys()
        if MYSQL_SERVERS.canonical(before.get(k) or {}) != MYSQL_SERVERS.canonical(after.get(k) or {})
    }
    want: dict[Key, Row] = {k: r for k, r in placed.items() if _backend(k) not in touched}
    for backend in sorted(touched):
        configured = {k: r for k, r in sorted(after.items()) if _backend(k) == backend}
        where = {k: r for k, r in placed.items() if _backend(k) == backend}
        if not configured:
            continue
        if not where:
            for (hostgroup, hostname, port), row in configured.items():
                enters = (entry or {}).get(hostgroup, hostgroup)
                if (enters, hostname, port) not in configured or enters == hostgroup:
                    want[(enters, hostname, port)] = {**row, "hostgroup_id": enters}
            continue
        first = next(iter(configured.values()))
        for key, row in where.items():
            mine = configured.get(key, first)
            was = before.get(key) or next((r for k, r in sorted(before.items()) if _backend(k) == backend), None)
            status = mine["status"] if was is None or was["status"] != mine["status"] else row["status"]
            want[key] = {**mine, "hostgroup_id": key[0], "status": status}
    return want


def rows_to(sql: Sql, have: Mapping[Key, Row], want: Mapping[Key, Row], every: Collection[Key] = ()) -> list[str]:
    """Statements that turn rows `have` ({key: row}) into `want`: the rows that differ (and every key of `every`,
    written as `want` has it: right from any state), deleted or REPLACEd whole, in key order."""
    out: list[str] = []
    for key in sorted(have.keys() | want.keys() | set(every)):
        if key in want and (
            key in every or MYSQL_SERVERS.canonical(have.get(key) or {}) != MYSQL_SERVERS.canonical(want[key])
        ):
            out.append(sql.replace_row(MYSQL_SERVERS.name, want[key]))
        elif key not in want and (key in have or key in every):
            out.append(sql.delete_row(MYSQL_SERVERS.name, dict(zip(MYSQL_SERVERS.key, key))))
    return out


def placement_load(
    sql: Sql,
    managed: Collection[int],
    memory_rows: Iterable[Row],
    runtime_rows: Iterable[Row],
    written: Mapping[tuple[int | str, str, int | str], Row | None],
    entry: Mapping[int, int] | None = None,
) -> tuple[list[str], list[str]]:
    """(forward, undo) to put in place of a change set's LOAD MYSQL SERVERS on a natively managed node: forward runs
    after the change set's own statements (memory then holds the configured rows with the edits), undo after theirs
    (memory back to the configured rows before). written: {key: row or None} the change set's mysql_servers rows
    (None: deleted; its keys' numbers maybe strings); entry: where a new backend of a writer hostgroup enters
    (placed_with_edits)."""

    def mine(rows: Iterable[Row]) -> dict[Key, Row]:
        return {key(r): dict(r) for r in rows if int(r["hostgroup_id"]) in managed}

    placed, before = mine(runtime_rows), mine(memory_rows)
    after = dict(before)
    for (hostgroup, hostname, port), row in written.items():
        if int(hostgroup) not in managed:
            continue
        if row is None:
            after.pop((int(hostgroup), hostname, int(port)), None)
        else:
            after[key(row)] = dict(row)
    want = placed_with_edits(placed, before, after, entry)
    every = sorted(placed.keys() | before.keys() | after.keys() | want.keys())
    forward = rows_to(sql, after, want) + [sql.load("MYSQL SERVERS")] + rows_to(sql, want, after)
    undo = rows_to(sql, {}, placed, every) + [sql.load("MYSQL SERVERS")] + rows_to(sql, {}, before, every)
    return forward, undo
