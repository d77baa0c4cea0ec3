"""ProxySQL's Galera manager (Monitor with a mysql_galera_hostgroups row) as the double models it (lab double, not
ProxySQL), from what real 2.7.1 was seen to do over the Galera lab: lab/reference/native-galera/ (capture.jsonl,
README.md; lab/capture_native_galera.py).

place() is pure: the servers loaded (runtime as LOADed) and the active galera rows, with each backend's state, give
runtime_mysql_servers as Monitor leaves it. What the capture showed, per galera row (its four hostgroups):
- every backend configured in any of the four is a candidate; its row (weight, max_connections...) is its first
  configured row, in the order writer, backup writer, reader, offline hostgroup (Monitor copies it);
- a backend is a writer candidate when it is Synced (4), Primary, not desynced, rejects no queries and is writable
  (read_only OFF); the `max_writers` of highest weight (equal weights: the highest host:port) are ONLINE in the writer
  hostgroup, the other candidates ONLINE in the backup writer hostgroup and SHUNNED in the writer hostgroup;
- a healthy read_only backend is a reader only: in the reader hostgroup, in no writer hostgroup;
- readers: read_only backends, plus every writer candidate (writer_is_also_reader 1) or the backup writers only (2);
- any other backend (desynced, not Synced, rejecting queries, not Primary, not answering) is ONLINE in the offline
  hostgroup and nowhere else.
The real Monitor acts at its healthcheck (mysql-monitor_galera_healthcheck_interval, 5 s by default: the capture's
placements came 3.9-4.8 s after a LOAD or a change of a backend); the double places as soon as it has read the
backends after the LOAD (engine.AdminEngine._galera_monitor, through backends.GALERA_PROBER), well within that; until
then runtime holds the loaded rows, as on the real one.
"""

from dataclasses import dataclass

SYNCED = 4


@dataclass(frozen=True)
class BackendState:
    """A backend as Monitor's galera check reads it. reachable False: the check failed (all else ignored)."""

    reachable: bool = True
    read_only: bool = False
    local_state: int = SYNCED
    desync: bool = False
    reject_queries: bool = False
    primary: bool = True

    @property
    def healthy(self):
        return (
            self.reachable
            and self.primary
            and self.local_state == SYNCED
            and not self.desync
            and not self.reject_queries
        )


@dataclass(frozen=True)
class GaleraRow:
    writer: int
    backup_writer: int
    reader: int
    offline: int
    max_writers: int = 1
    writer_is_also_reader: int = 0

    @property
    def hostgroups(self):
        return (self.writer, self.backup_writer, self.reader, self.offline)

    @classmethod
    def of(cls, row):
        """From a runtime_mysql_galera_hostgroups row as a dict (the admin answers text)."""
        return cls(
            *(
                int(row[k])
                for k in (
                    "writer_hostgroup",
                    "backup_writer_hostgroup",
                    "reader_hostgroup",
                    "offline_hostgroup",
                    "max_writers",
                    "writer_is_also_reader",
                )
            )
        )


def place(servers, galera_rows, states):
    """runtime_mysql_servers as Monitor leaves it. servers: the loaded rows (dicts with at least hostgroup_id,
    hostname, port, weight, status); galera_rows: the active GaleraRow list; states: {(host, port): BackendState}
    (a backend missing here is not placed yet: its loaded rows stay as they are). Rows of other hostgroups
    unchanged. Returns row dicts in (hostgroup_id, hostname, port) order."""
    out = list(servers)
    for g in galera_rows:
        mine = [r for r in out if int(r["hostgroup_id"]) in g.hostgroups]
        if not mine:
            continue
        first = {}
        for hg in g.hostgroups:
            for r in mine:
                if int(r["hostgroup_id"]) == hg:
                    first.setdefault((r["hostname"], int(r["port"])), r)
        if any(key not in states for key in first):
            continue  # not every backend read yet: ProxySQL's first check has not run either
        out = [r for r in out if int(r["hostgroup_id"]) not in g.hostgroups]
        candidates = sorted(
            (k for k in first if states[k].healthy and not states[k].read_only),
            key=lambda k: (int(first[k]["weight"]), k),
            reverse=True,
        )
        writers, backups = candidates[: g.max_writers], candidates[g.max_writers :]
        read_only = [k for k in first if states[k].healthy and states[k].read_only]
        readers = read_only + {0: [], 1: candidates, 2: backups}.get(g.writer_is_also_reader, [])
        offline = [k for k in first if not states[k].healthy]

        def row(key, hg, status="ONLINE"):
            return {**first[key], "hostgroup_id": hg, "status": status}

        out += [row(k, g.writer) for k in writers] + [row(k, g.writer, "SHUNNED") for k in backups]
        out += [row(k, g.backup_writer) for k in backups] + [row(k, g.reader) for k in readers]
        out += [row(k, g.offline) for k in offline]
    return sorted(out, key=lambda r: (int(r["hostgroup_id"]), r["hostname"], int(r["port"])))
