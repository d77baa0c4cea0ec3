"""ProxySQL's own hostgroup managers (mysql_galera_hostgroups, mysql_replication_hostgroups with Monitor active): what
they may do to runtime_mysql_servers, so that the drift engine never reads their placement as drift.

What real 2.7.1 does (lab/reference/native-galera/README.md): Monitor moves every backend configured in any of the
row's hostgroups between the writer, backup writer, reader and offline hostgroups by the backend's state (extra rows
in the backup writer and reader hostgroups, SHUNNED rows in the writer hostgroup, a desynced node alone in the
offline one), in runtime only: memory and disk keep the rows as configured. It copies a backend's configured row
(weight, max_connections...) into each hostgroup it places it in. With mysql_replication_hostgroups
(lab/reference/native-replication/README.md) Monitor moves the servers between the writer and reader hostgroups by
each backend's read_only, from where it left them (after a promotion and back the old writer stays a reader too):
the same fold holds.

So in a managed hostgroup the runtime is compared per backend, not per row: a backend configured there must be
placed somewhere in the manager's hostgroups, with the columns of one of its configured rows; which hostgroups and
which status (ONLINE, SHUNNED) are the manager's. A backend the manager never had, a configured one it does not
run, or a column no configured row holds (a weight loaded by hand) are still drift.
"""

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

# A row of a ProxySQL table (mysql_servers, a manager's table) as the layers read it: each column's value is a string,
# a number or NULL as the column holds.
Row = Mapping[str, Any]

MANAGER_TABLES = {
    "galera": "mysql_galera_hostgroups",
    "replication": "mysql_replication_hostgroups",
    "group_replication": "mysql_group_replication_hostgroups",
}
HOSTGROUP_COLUMNS = ("writer_hostgroup", "backup_writer_hostgroup", "reader_hostgroup", "offline_hostgroup")
PLACEMENT = ("hostgroup_id", "status")  # the manager's; every other column is the configured row's


def managed_hostgroups(rows: Iterable[Row]) -> set[int]:
    """The hostgroups of the active manager rows (dicts of any of MANAGER_TABLES)."""
    return {int(r[c]) for r in rows if int(r.get("active", 1) or 0) for c in HOSTGROUP_COLUMNS if r.get(c) is not None}


def placed_hostgroups(
    galera_rows: Iterable[Row], servers: Collection[Row], replication_rows: Iterable[Row] = ()
) -> set[int]:
    """The hostgroups an active mysql_galera_hostgroups row fills with the configured servers while every backend is
    healthy and writable (lab/reference/native-galera/): the writer; the backup writer when there are more backends
    than max_writers; the reader with writer_is_also_reader 1, or 2 and more backends than max_writers (0: only
    read_only backends are readers, none while all are writable). With mysql_replication_hostgroups rows: both their
    hostgroups once they hold more than one backend (a primary and its replicas)."""
    out: set[int] = set()
    for g in galera_rows:
        if not int(g.get("active", 1) or 0):
            continue
        mine = {
            (r["hostname"], int(r["port"]))
            for r in servers
            if int(r["hostgroup_id"]) in {g.get(c) for c in HOSTGROUP_COLUMNS}
        }
        if not mine:
            continue
        more = len(mine) > int(g.get("max_writers") or 1)
        wiar = int(g.get("writer_is_also_reader") or 0)
        out.add(g["writer_hostgroup"])
        if more:
            out.add(g["backup_writer_hostgroup"])
        if wiar == 1 or (wiar == 2 and more):
            out.add(g["reader_hostgroup"])
    for g in replication_rows:
        # mysql_replication_hostgroups (lab/reference/native-replication/): Monitor moves the writable backends into
        # the writer hostgroup and the read_only ones into the reader hostgroup; a primary and replicas fill both
        mine = {
            (r["hostname"], int(r["port"]))
            for r in servers
            if int(r["hostgroup_id"]) in (g["writer_hostgroup"], g["reader_hostgroup"])
        }
        if len(mine) > 1:
            out |= {g["writer_hostgroup"], g["reader_hostgroup"]}
    return out


def fold(
    runtime_rows: Sequence[Row],
    intended_rows: Iterable[Row],
    managed: Collection[int],
    columns: Collection[str] | None = None,
) -> list[Row]:
    """runtime_mysql_servers as the drift engine compares it: rows outside `managed` as they are; in `managed`, each
    backend the runtime places there stands for intent's rows of that backend (as intended, placement and status
    aside) when every runtime row of it carries the columns of one of them; otherwise the first row with other
    columns is kept in place of intent's first, so that the difference shows. A backend intent does not hold there
    stays as the runtime has it; one intent holds and the runtime does not place is absent (both: drift).
    `columns`: the columns compared (default: every column of the rows but hostgroup_id and status)."""
    if not managed:
        return list(runtime_rows)

    def backend(r: Row) -> tuple[str, int]:
        return r["hostname"], int(r["port"])

    def attrs(r: Row) -> dict[str, Any]:
        return {k: v for k, v in r.items() if k not in PLACEMENT and (columns is None or k in columns)}

    out = [r for r in runtime_rows if int(r["hostgroup_id"]) not in managed]
    placed: dict[tuple[str, int], list[Row]] = {}
    wanted: dict[tuple[str, int], list[Row]] = {}
    for r in runtime_rows:
        if int(r["hostgroup_id"]) in managed:
            placed.setdefault(backend(r), []).append(r)
    for r in intended_rows:
        if int(r["hostgroup_id"]) in managed:
            wanted.setdefault(backend(r), []).append(r)
    for key, rows in placed.items():
        mine = wanted.get(key)
        if not mine:
            out += rows
            continue
        allowed = [attrs(r) for r in mine]
        odd = next((r for r in rows if attrs(r) not in allowed), None)
        out.append({**mine[0], **attrs(odd)} if odd else dict(mine[0]))
        out += [dict(r) for r in mine[1:]]
    return out
