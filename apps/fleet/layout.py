"""A cluster's role rows and how a writer change moves them: the switchover's and failover's plans, the executor's
inventory step and a configuration revert (which keeps the writer operations moved) all swap them this one way."""

from typing import Protocol

from .choices import WriterIsAlsoReader

Endpoint = tuple[str, int]  # (host, port)
RowKey = tuple[int, str, int]  # (hostgroup, host, port)
ServerRow = dict[str, int | str | None]  # SERVER_FIELDS of one mysql_servers row


class RoleLayout(Protocol):
    """The hostgroups a swap reads: a Cluster, or a configuration version's roles (configuration's revert)."""

    @property
    def writer_hostgroup(self) -> int: ...
    @property
    def reader_hostgroup(self) -> int: ...
    @property
    def backup_writer_hostgroup(self) -> int | None: ...
    @property
    def writer_is_also_reader(self) -> int: ...


def swapped_roles(
    cluster: RoleLayout,
    rows: dict[RowKey, ServerRow],
    old: Endpoint,
    new: Endpoint,
    old_writer_to: str = "reader",
) -> dict[RowKey, ServerRow | None]:
    """The role rows a switchover from `old` to `new` writes, on one ProxySQL node or in the inventory.

    rows: {(hostgroup, host, port): {SERVER_FIELDS}} with configured statuses. old, new: (host, port).
    Returns {(hostgroup, host, port): {SERVER_FIELDS} or None (no row)} for every role row of the two.

    The two servers swap roles, so that the layout keeps saying who is who and A→B→A gives back the
    original, row for row (weights, order, comments):
    - writer hostgroup: the new writer takes the old writer's row; the old writer leaves it.
    - reader hostgroup: the new writer takes the writer's reader row (its low weight, its comment); if
      the writer had none, it leaves the reader hostgroup (or keeps its own row when the writer reads by
      policy). The old writer takes the new writer's former reader row (or keeps its own, or, to read and
      with no row at all, one built from its writer row).
    - backup writer hostgroup: the old writer takes the new writer's place (its weight, so its rank in
      the failover order, and its comment); the new writer leaves it.
    - statuses follow writer_is_also_reader: the new writer's reader row is ONLINE only with 1; the old
      writer reads (ONLINE) if it is to read, unless the policy is 0 and it is now a backup writer.
    """
    W, R, BW = cluster.writer_hostgroup, cluster.reader_hostgroup, cluster.backup_writer_hostgroup
    a_w = rows.get((W, *old))
    if a_w is None:
        return {}
    a_r, b_r = rows.get((R, *old)), rows.get((R, *new))
    a_bw, b_bw = (rows.get((BW, *old)), rows.get((BW, *new))) if BW is not None else (None, None)
    policy = cluster.writer_is_also_reader

    def status(row: ServerRow | None, value: str) -> ServerRow | None:
        return {**row, "status": value} if row else None

    out: dict[RowKey, ServerRow | None] = {(W, *new): status(a_w, "ONLINE"), (W, *old): None}
    if BW is not None:
        out[(BW, *new)], out[(BW, *old)] = a_bw, b_bw
    new_reader = a_r or (b_r if policy == WriterIsAlsoReader.YES else None)
    out[(R, *new)] = status(new_reader, "ONLINE" if policy == WriterIsAlsoReader.YES else "OFFLINE_SOFT")
    reads = old_writer_to == "reader" and not (policy == WriterIsAlsoReader.NO and b_bw)
    old_reader = b_r or a_r or (a_w if old_writer_to == "reader" else None)
    out[(R, *old)] = status(old_reader, "ONLINE" if reads else "OFFLINE_SOFT")
    return out
