"""ProxySQL's replication manager (Monitor with a mysql_replication_hostgroups row) as the double models it (lab double,
not ProxySQL), from what real 2.7.1 was seen to do over the replication lab: lab/reference/native-replication/
(capture.jsonl, README.md; lab/capture_native_replication.py).

place() is pure and, unlike the Galera manager, works from the placement Monitor left last time (the real one moves
servers on a change of read_only and never puts them back where they were configured): a LOAD starts it again from
the loaded rows. Per replication row (writer and reader hostgroup, check_type), for every backend of either hostgroup
whose read_only check answered:
- read only (by the row's check_type): out of the writer hostgroup; into the reader hostgroup when not there yet (its
  row copied);
- writable: into the writer hostgroup when not there yet (its reader row copied); it then leaves the reader hostgroup
  unless mysql-monitor_writer_is_also_reader is true (the default). A writable backend configured in the writer
  hostgroup only is not added to the reader hostgroup: writer_is_also_reader acts on a move only;
- a backend that does not answer (connection refused or timed out, mysql-monitor_read_only_max_timeout_count checks
  in a row: 3 s at the defaults) is moved as a read only one: out of the writer hostgroup, into the reader one;
- a check the server answers with an error (a variable it lacks: MariaDB's super_read_only): nothing moves.
Several writable backends are all writers. The real Monitor checks every mysql-monitor_read_only_interval (2.7.1's
default: 1000 ms); the capture's moves came within 0.1-0.9 s of a LOAD or a flip of read_only, 3.2 s after a writer
was killed. The double checks each backend at most every mysql-monitor_read_only_interval too and places a LOAD's rows
on checks made after it only (engine.AdminEngine._replication_monitor, through backends.READ_ONLY_PROBER).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class ReadOnlyState:
    """A backend as Monitor's read_only check reads it: its three variables (None: the server has no such variable).
    reachable False: the check failed (all else ignored)."""

    reachable: bool = True
    read_only: bool = False
    innodb_read_only: bool | None = False
    super_read_only: bool | None = None

    def read_only_by(self, check_type):
        """True / False as `check_type` judges it, None when the check cannot be made (the variable is missing)."""
        if not self.reachable:  # after read_only_max_timeout_count failed checks the real one moves a writer out
            return True  # of the writer hostgroup as if read only (capture: writer_killed)
        values = {
            "read_only": self.read_only,
            "innodb_read_only": self.innodb_read_only,
            "super_read_only": self.super_read_only,
        }
        if "|" in check_type or "&" in check_type:
            both = [values[name] for name in check_type.replace("&", "|").split("|")]
            if None in both:
                return None
            return any(both) if "|" in check_type else all(both)
        return values[check_type]


@dataclass(frozen=True)
class ReplicationRow:
    writer: int
    reader: int
    check_type: str = "read_only"

    @classmethod
    def of(cls, row):
        """From a runtime_mysql_replication_hostgroups row as a dict (the admin answers text)."""
        return cls(int(row["writer_hostgroup"]), int(row["reader_hostgroup"]), row.get("check_type") or "read_only")


def place(current, rows, states, writer_is_also_reader=True):
    """runtime_mysql_servers as Monitor leaves it after one check of every backend. current: the runtime rows now
    (after a LOAD: the loaded rows); rows: the ReplicationRow list; states: {(host, port): ReadOnlyState} (a backend
    missing here has not been checked: it stays). Returns row dicts in (hostgroup_id, hostname, port) order."""
    out = [dict(r) for r in current]
    for g in rows:

        def of(key, hg):
            return [r for r in out if int(r["hostgroup_id"]) == hg and (r["hostname"], int(r["port"])) == key]

        keys = dict.fromkeys(
            (r["hostname"], int(r["port"])) for r in out if int(r["hostgroup_id"]) in (g.writer, g.reader)
        )
        for key in keys:
            state = states.get(key)
            read_only = state.read_only_by(g.check_type) if state else None
            if read_only is None:
                continue
            in_writer, in_reader = of(key, g.writer), of(key, g.reader)
            if read_only:
                if in_writer and not in_reader:
                    out.append({**in_writer[0], "hostgroup_id": g.reader})
                out = [r for r in out if r not in in_writer]
            elif not in_writer:
                out.append({**in_reader[0], "hostgroup_id": g.writer})
                if not writer_is_also_reader:
                    out = [r for r in out if r not in in_reader]
    return sorted(out, key=lambda r: (int(r["hostgroup_id"]), r["hostname"], int(r["port"])))
