"""Which hostgroup plays which role on a ProxySQL node being adopted, and why (pure: reads a snapshot).

Every fact is a piece of evidence with a weight, for (or, negative, against) one value of one decision:

  operator  a value entered in the form or on the command line                                      decides
  native    ProxySQL's own mysql_galera/replication/group_replication_hostgroups              decides unless entered
  users     mysql_users.default_hostgroup: where an application's writes go by default       writer +3, reader -2
  rules     mysql_query_rules destinations: locking reads and writes                                   writer +2
            plain reads (^SELECT)                                                          reader +3, writer -2
  backends  what they say with ProxySQL's monitor user: read_only, replica of (async), wsrep (Galera)
            all writable, replicating from no one                                                      writer +3
            (else) holding the one writable backend                                                    writer +2
            holding a read-only backend or a replica                                      writer -3, reader +1
            replicas / Galera nodes                                                                      kind +3
  layout    mysql_servers alone: fewest servers writer, most servers reader, the rest backup/offline        +1
            the writer ONLINE in the reader hostgroup or not, backup writers reading    writer_is_also_reader +3

The value with the most weight wins (ties: the lower hostgroup id). Hostgroups belong to one cluster when
something links them (a shared server, one Galera cluster, one replication topology, a query rule routing
a user's queries away from its default hostgroup). The reasoning keeps, per decision, the evidence for
the value and the strong evidence against it; the preview shows both, and a conflict is also a warning.
"""

import re
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from apps.clients.wire import tcp_host

from .choices import ClusterKind, ServerStatus, WriterIsAlsoReader

DECIDES = {"operator": 1000, "native": 100}
STRONG = 2  # evidence at least this heavy counts as conflicting when it points elsewhere

ROLES = ("writer", "reader", "backup_writer", "offline")
LABELS = {
    "kind": "Cluster kind",
    "writer": "Writer hostgroup",
    "reader": "Reader hostgroup",
    "backup_writer": "Backup writer hostgroup",
    "offline": "Offline hostgroup",
    "writer_is_also_reader": "Writer is also reader",
}
_LOCKING_OR_WRITE = re.compile(
    r"FOR\s+UPDATE|LOCK\s+IN\s+SHARE|FOR\s+SHARE|^\^?\s*\(?\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE
)
_SELECT = re.compile(r"^\^?\s*\(?\s*SELECT\b", re.IGNORECASE)


def _locking_or_write(pattern):
    return bool(_LOCKING_OR_WRITE.search(pattern))


def _plain_read(pattern):
    return bool(_SELECT.search(pattern)) and not _locking_or_write(pattern)


@dataclass
class Evidence:
    value: object
    weight: int
    text: str


@dataclass
class Reason:
    """One decision: its value, what decided it, what points elsewhere."""

    decision: str
    label: str
    value: object
    evidence: list = field(default_factory=list)
    conflicts: list = field(default_factory=list)
    operator: bool = False  # entered by the operator
    defaulted: bool = False  # nothing told: the default value

    @property
    def shown(self):
        """The value as the operator reads it."""
        if self.value is None:
            return "none"
        if self.decision == "kind":
            return ClusterKind(self.value).label
        if self.decision == "writer_is_also_reader":
            return WriterIsAlsoReader(self.value).label
        return str(self.value)


def endpoint(hostname, port):
    return f"{tcp_host(hostname)}:{port}"


def infer_roles(snapshot, given=None):
    """Roles, kind and writer-is-also-reader policy of the cluster on this node, with the reasoning.

    `given` holds what the operator entered (None: infer it). Returns None when the node has no servers,
    else a dict: kind, writer, reader, backup_writer, offline, writer_is_also_reader, reasons (Reason).
    """
    given = {k: v for k, v in (given or {}).items() if v not in (None, "")}
    layout = _Layout(snapshot)
    if not layout.members and not given:
        return None
    decided, reasons = {}, []

    entered_roles = {given[r] for r in ROLES if r in given}

    def decide(decision, votes, exclude=(), default=None, default_text="", positive_only=False):
        exclude = set(exclude) | (entered_roles - {given.get(decision)})  # a hostgroup the operator gave another role
        votes = [v for v in votes if v.value not in exclude]
        if decision in given:
            votes.append(Evidence(given[decision], DECIDES["operator"], "entered by the operator"))
        totals = defaultdict(int)
        for v in votes:
            totals[v.value] += v.weight
        # A role goes to the best candidate even against some evidence (shown as conflicting); an optional
        # role (backup writer, offline) only to a hostgroup with evidence for it.
        candidates = [value for value, total in totals.items() if total > 0 or not positive_only]
        value = max(candidates, key=lambda c: (totals[c], -c if isinstance(c, int) else 0)) if candidates else default
        reason = Reason(decision, LABELS[decision], value, operator=decision in given, defaulted=not candidates)
        votes.sort(key=lambda v: -abs(v.weight))  # what weighs most first
        reason.evidence = [v.text for v in votes if v.value == value and v.weight > 0] or [default_text]
        reason.conflicts = [
            v.text for v in votes if (v.value == value and v.weight < 0) or (v.value != value and v.weight >= STRONG)
        ]
        reasons.append(reason)
        decided[decision] = value
        return value

    native = layout.native()
    layout.choose_cluster(given.get("writer", native.get("writer", given.get("reader"))))
    decide(
        "kind",
        layout.kind_votes(native),
        default=ClusterKind.GALERA,
        default_text="nothing on the node or its backends tells: Galera / PXC assumed",
    )
    writer = decide("writer", layout.writer_votes(native), default_text="no hostgroup found")
    reader = decide("reader", layout.reader_votes(native, writer), exclude={writer}, default_text="no other hostgroup")
    backup = decide(
        "backup_writer",
        layout.rest_votes(native, "backup_writer", {writer, reader}),
        exclude={writer, reader},
        positive_only=True,
        default_text="no other hostgroup of this cluster on the node",
    )
    decide(
        "offline",
        layout.rest_votes(native, "offline", {writer, reader, backup}),
        exclude={writer, reader, backup},
        positive_only=True,
        default_text="no other hostgroup of this cluster on the node",
    )
    decide(
        "writer_is_also_reader",
        layout.policy_votes(native, writer, reader, backup),
        default=WriterIsAlsoReader.YES,
        default_text="no reader hostgroup to tell: the default",
    )
    return {**decided, "reasons": reasons}


def conflicts_as_warnings(reasons):
    """Strong evidence against a value: worth a warning, whether the operator entered the value or not.
    So is a kind nothing told."""
    out = []
    for r in reasons:
        if r.decision == "kind" and r.defaulted:
            out.append(
                f"Nothing on this node or its backends tells the cluster kind: {r.shown} is assumed. "
                "Choose the kind if it is not."
            )
        if r.conflicts:
            who = "You entered" if r.operator else "Inferred"
            out.append(
                f"The evidence conflicts on the {r.label.lower()}: {who} {r.shown}, but "
                + "; ".join(r.conflicts)
                + ". Check it, and correct it if needed."
            )
    return out


def reasons_as_dicts(reasons):
    return [{**asdict(r), "shown": r.shown} for r in reasons]


class _Layout:
    """The snapshot seen as hostgroups of endpoints, with the backends' own facts."""

    def __init__(self, snapshot):
        self.members, self.reading = defaultdict(set), defaultdict(set)
        statuses = defaultdict(set)
        for row in snapshot.runtime_servers:
            hg, ep = row["hostgroup_id"], endpoint(row["hostname"], row["port"])
            self.members[hg].add(ep)
            status = row.get("status", ServerStatus.ONLINE)
            statuses[hg].add(status)
            if status in (ServerStatus.ONLINE, ServerStatus.SHUNNED):  # SHUNNED is configured ONLINE
                self.reading[hg].add(ep)
        self.offline_only = {hg: not (s & {ServerStatus.ONLINE, ServerStatus.SHUNNED}) for hg, s in statuses.items()}
        self.snapshot = snapshot
        self.facts = {endpoint(b["hostname"], b["port"]): b for b in snapshot.backends}
        self.users = [u for u in snapshot.users if int(u.get("active", 1))]
        self.rules = [
            r
            for r in snapshot.query_rules
            if int(r.get("active", 0))
            and r.get("destination_hostgroup") is not None
            and not int(r.get("negate_match_pattern") or 0)
        ]
        self.cluster = set(self.members)

    # -- which hostgroups form this cluster ---------------------------------------------------------------
    def choose_cluster(self, anchor=None):
        """Hostgroups are linked when they share a server, when their servers are one Galera cluster or
        one replication topology, or when a query rule routes a user's queries from its default hostgroup
        to another. The cluster is the linked set holding `anchor`, else the one with the most servers."""
        hostgroups = sorted(self.members)
        parent = {hg: hg for hg in hostgroups}

        def find(hg):
            while parent[hg] != hg:
                parent[hg] = parent[parent[hg]]
                hg = parent[hg]
            return hg

        def link(a, b):
            if a in parent and b in parent:
                parent[find(a)] = find(b)

        where = defaultdict(set)
        for hg, eps in self.members.items():
            for ep in eps:
                where[ep].add(hg)
        for hgs in where.values():
            first, *rest = sorted(hgs)
            for hg in rest:
                link(first, hg)
        galera = defaultdict(set)
        for ep, f in self.facts.items():
            if f.get("wsrep_on") and f.get("cluster_uuid"):
                galera[f["cluster_uuid"]].update(where.get(ep, ()))
            if f.get("replica_of") in where:
                for a in where.get(ep, ()):
                    for b in where[f["replica_of"]]:
                        link(a, b)
        for hgs in galera.values():
            first, *rest = sorted(hgs)
            for hg in rest:
                link(first, hg)
        for rule in self.rules:
            defaults = {
                u["default_hostgroup"]
                for u in self.users
                if not rule.get("username") or u["username"] == rule["username"]
            }
            if len(defaults) == 1:
                link(defaults.pop(), rule["destination_hostgroup"])
        components = defaultdict(set)
        for hg in hostgroups:
            components[find(hg)].add(hg)
        if not components:
            return
        if anchor in parent:
            self.cluster = components[find(anchor)]
        else:
            self.cluster = max(
                components.values(), key=lambda c: (len(set().union(*(self.members[hg] for hg in c))), -min(c))
            )
        if len(self.cluster) == 1:
            # Nothing linked it to another hostgroup, and one hostgroup cannot be writer and reader: nothing
            # tells the hostgroups apart, so they are taken as one cluster.
            self.cluster = set(hostgroups)

    # -- evidence per decision ---------------------------------------------------------------------------
    def native(self):
        """ProxySQL's own hostgroup manager on this node (the first one found), as role -> hostgroup."""
        s = self.snapshot
        for kind, rows, table in (
            (ClusterKind.GALERA, s.galera_hostgroups, "mysql_galera_hostgroups"),
            (ClusterKind.GROUP_REPLICATION, s.group_replication_hostgroups, "mysql_group_replication_hostgroups"),
            (ClusterKind.ASYNC, s.replication_hostgroups, "mysql_replication_hostgroups"),
        ):
            if rows:
                g = rows[0]
                state = "active" if g.get("active", 1) else "inactive"
                return {
                    "kind": kind,
                    "table": f"{table} ({state})",
                    "writer": g["writer_hostgroup"],
                    "reader": g["reader_hostgroup"],
                    "backup_writer": g.get("backup_writer_hostgroup"),
                    "offline": g.get("offline_hostgroup"),
                    "writer_is_also_reader": g.get("writer_is_also_reader"),
                }
        return {}

    def _cluster_facts(self):
        eps = set().union(*(self.members[hg] for hg in self.cluster)) if self.cluster else set()
        # A backend whose state could not be read tells nothing (one whose replica status alone could not
        # be read still tells its read_only and wsrep).
        return {ep: self.facts[ep] for ep in sorted(eps) if self.facts.get(ep, {}).get("read_only") is not None}

    def kind_votes(self, native):
        votes = []
        if native:
            votes.append(Evidence(native["kind"], DECIDES["native"], f"{native['table']} on this node"))
        galera, replicas = defaultdict(list), []
        for ep, f in self._cluster_facts().items():
            if f.get("wsrep_on") and (f.get("cluster_size") or 0) > 1:
                galera[f["cluster_size"]].append(ep)
            if f.get("replica_of"):
                replicas.append(f"{ep} replicates from {f['replica_of']}")
        if galera:
            votes.append(
                Evidence(
                    ClusterKind.GALERA,
                    3,
                    "Galera nodes: "
                    + "; ".join(
                        f"{', '.join(eps)} (wsrep_on, cluster size {size})" for size, eps in sorted(galera.items())
                    ),
                )
            )
        if replicas:
            votes.append(Evidence(ClusterKind.ASYNC, 3, "async replicas: " + "; ".join(replicas)))
        return votes

    def _read_only(self):
        """Backends that cannot take writes (read_only ON or replicas) and the writable ones, in this
        cluster; only when both kinds exist do they tell hostgroups apart (a Galera cluster is all writable)."""
        facts = self._cluster_facts()
        read_only = {ep: f for ep, f in facts.items() if f.get("read_only") or f.get("replica_of")}
        writable = {ep for ep in facts if ep not in read_only}
        if not read_only or not writable:
            return {}, set()
        return read_only, writable

    @staticmethod
    def _why_read_only(ep, f):
        parts = (["read_only ON"] if f.get("read_only") else []) + (
            [f"a replica of {f['replica_of']}"] if f.get("replica_of") else []
        )
        return f"{ep} is {' and '.join(parts)}"

    def _default_hostgroups(self):
        users = defaultdict(list)
        for u in self.users:
            users[u["default_hostgroup"]].append(u["username"])
        return users

    def _rules(self, pattern):
        for r in self.rules:
            text = r.get("match_digest") or r.get("match_pattern") or ""
            if pattern(text):
                yield r, text

    def writer_votes(self, native):
        votes = []
        if native:
            votes.append(Evidence(native["writer"], DECIDES["native"], f"{native['table']} names it"))
        for hg, names in sorted(self._default_hostgroups().items()):
            if hg in self.cluster:
                votes.append(
                    Evidence(
                        hg,
                        3,
                        f"mysql_users: the default hostgroup of {', '.join(sorted(names))} (where their writes go)",
                    )
                )
        for r, text in self._rules(_locking_or_write):
            if r["destination_hostgroup"] in self.cluster:
                votes.append(Evidence(r["destination_hostgroup"], 2, f"query rule {r['rule_id']} sends {text!r} there"))
        for r, text in self._rules(_plain_read):
            if r["destination_hostgroup"] in self.cluster:
                votes.append(
                    Evidence(
                        r["destination_hostgroup"],
                        -2,
                        f"query rule {r['rule_id']} sends plain reads ({text!r}) to hostgroup "
                        f"{r['destination_hostgroup']}",
                    )
                )
        read_only, writable = self._read_only()
        all_writable = [hg for hg in self.cluster if self.members[hg] and self.members[hg] <= writable]
        for hg in sorted(self.cluster):
            members = self.members[hg]
            blocked = sorted(members & set(read_only))
            if blocked:
                votes.append(
                    Evidence(
                        hg,
                        -3,
                        "; ".join(self._why_read_only(ep, read_only[ep]) for ep in blocked)
                        + f" (in hostgroup {hg}): cannot take writes",
                    )
                )
            if hg in all_writable:
                votes.append(Evidence(hg, 3, f"{', '.join(sorted(members))}: writable and replicating from no one"))
            elif not all_writable and len(writable) == 1 and writable <= members:
                # No hostgroup holds only writable backends: say where the one writable backend is.
                votes.append(
                    Evidence(hg, 2, f"holds {min(writable)}, the only writable backend replicating from no one")
                )
        votes += self._layout_votes(min, "holds the fewest servers")
        return votes

    def reader_votes(self, native, writer):
        votes = []
        if native:
            votes.append(Evidence(native["reader"], DECIDES["native"], f"{native['table']} names it"))
        for r, text in self._rules(_plain_read):
            if r["destination_hostgroup"] in self.cluster:
                votes.append(
                    Evidence(
                        r["destination_hostgroup"], 3, f"query rule {r['rule_id']} sends plain reads ({text!r}) there"
                    )
                )
        for hg, names in sorted(self._default_hostgroups().items()):
            if hg in self.cluster and hg != writer:
                votes.append(
                    Evidence(
                        hg,
                        -2,
                        f"mysql_users: {', '.join(sorted(names))} send their writes to hostgroup {hg} by default",
                    )
                )
        read_only, _ = self._read_only()
        for hg in sorted(self.cluster - {writer}):
            blocked = sorted(self.members[hg] & set(read_only))
            if blocked:
                votes.append(Evidence(hg, 1, f"holds read-only backends ({', '.join(blocked)})"))
        votes += self._layout_votes(max, "holds the most servers", exclude={writer})
        return votes

    def rest_votes(self, native, role, taken):
        votes = []
        if native and native.get(role) is not None:
            votes.append(Evidence(native[role], DECIDES["native"], f"{native['table']} names it"))
        rest = sorted(self.cluster - taken, key=lambda hg: (len(self.members[hg]), hg))
        for hg in rest:
            if self.offline_only.get(hg):
                votes.append(Evidence(hg, 2 if role == "offline" else -2, f"every row in hostgroup {hg} is OFFLINE"))
        if rest:
            votes.append(
                Evidence(
                    rest[0],
                    1,
                    f"the {'first' if role == 'backup_writer' else 'next'} other hostgroup "
                    f"of this cluster ({len(self.members[rest[0]])} server(s))",
                )
            )
        return votes

    def _layout_votes(self, pick, text, exclude=()):
        hostgroups = [hg for hg in self.cluster if hg not in exclude and self.members[hg]]
        if len(hostgroups) < 2:
            return [
                Evidence(hg, 1, f"the only {'other ' if exclude else ''}hostgroup of this cluster") for hg in hostgroups
            ]
        best = pick(len(self.members[hg]) for hg in hostgroups)
        return [Evidence(hg, 1, f"{text} ({best})") for hg in sorted(hostgroups) if len(self.members[hg]) == best]

    def policy_votes(self, native, writer, reader, backup):
        votes = []
        if native and native.get("writer_is_also_reader") is not None:
            votes.append(
                Evidence(int(native["writer_is_also_reader"]), DECIDES["native"], f"{native['table']} says so")
            )
        if reader is None or writer is None:
            return votes
        writers = sorted(self.members.get(writer, ()))
        reading = self.reading.get(reader, set())
        if not writers:
            return votes
        also = sorted(set(writers) & reading)
        if also:
            votes.append(
                Evidence(
                    WriterIsAlsoReader.YES, 3, f"the writer ({', '.join(also)}) is ONLINE in reader hostgroup {reader}"
                )
            )
            return votes
        backups = sorted(self.members.get(backup, set()) & reading) if backup is not None else []
        if backups:
            votes.append(
                Evidence(
                    WriterIsAlsoReader.ONLY_BACKUP,
                    3,
                    f"backup writers ({', '.join(backups)}) read in hostgroup {reader}; the writer "
                    f"({', '.join(writers)}) does not",
                )
            )
        else:
            votes.append(
                Evidence(
                    WriterIsAlsoReader.NO,
                    3,
                    f"the writer ({', '.join(writers)}) is not ONLINE in reader hostgroup {reader}",
                )
            )
        return votes
