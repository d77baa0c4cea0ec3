"""An async-replication MariaDB topology on 127.0.0.1: one primary and two replicas, MariaDB GTID.

The seed's own case (DOMAIN.md, "Planned switchover"): a writer and replicas re-pointed by GTID.

CLI::

    python -m lab.replication up|down|status|heal
    python -m lab.replication kill N|start N|stop N|promote N
    python -m lab.replication --name NAME up|down|...   another such lab, on its own ports (3421-3423 in slot 1)

(`bin/lab replication ...` runs the same from the repo root.)

Python::

    lab = ReplicationLab()        # base dir <repo>/var/lab/replication, ports from the environment
    lab.up()                      # idempotent: reuses a healthy lab at once (replicas running, no lag)
    lab.node(2).port              # host / port / socket / ... of a node
    lab.status()                  # list[NodeStatus], read with the monitor user over TCP
    lab.primary()                 # the node that currently takes the writes (1 unless promoted)
    lab.wait_caught_up(2, 10)     # replica 2 has applied everything its primary had at call time
    lab.kill(3); lab.start(3)     # SIGKILL; restart (a replica resumes replicating by GTID)
    lab.promote(2)                # a graceful GTID switchover done by the lab (root, over sockets)
    lab.heal()                    # back to node 1 primary, 2 and 3 replicating from it
    lab.down()                    # clean stop by pid

A configuration of lab/mariadb_lab.py's MariaDBLab (node layout, processes, ports, CLI); this module adds
what is replication's: the template datadir, GTID topology, switchover, re-cloning.

Layout: node N listens on 3320+N and lives in `<base>/nodeN/` (my.cnf, data/, tmp/, socket, pid files,
error.log); `server_id` N, binlog with `log_slave_updates`, `gtid_strict_mode=ON`, `read_only=ON` in
every node's my.cnf (a restarted server never takes writes by itself, as in production; the lab sets
it OFF on the primary at runtime). Replicas: `CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos,
MASTER_CONNECT_RETRY=1`. The servers run as the `mysql` OS user, detached, tracked by the pid file we
write at spawn (command line checked), never by name.

How the data gets to the replicas: `mariadb-install-db` runs once, into `<base>/template/data`
(binlog off, so it holds no transaction); every node's datadir starts as a copy of it, so all three
start with an empty GTID state. The accounts and schema `app` are then created on the primary only,
binlogged, and the replicas replicate them from the empty position (the binlog is never purged in the
lab). Every node's GTID history is therefore exactly the primary's: no local transaction on a replica
that `gtid_strict_mode` or a later switchover would trip over. (Creating the users on each node
separately would give each its own GTIDs, i.e. errant transactions from the start.)

heal() and promote(): see _converge. A node whose history cannot follow the new primary's is re-cloned
(stop, copy of the template, replay of the primary's binlog from the start). "Cannot follow" is
decided from @@gtid_binlog_state, not from replication errors: the primary does not always refuse a
position it lacks (a replica at errant 0-3-21 was accepted by a primary at 0-1-21). And since a server
skips replicated events carrying its own server_id, a re-cloned node replays under server_id 1000+N,
then takes N back; otherwise the transactions it once wrote as a primary would silently be missing.
Environment overrides: LAB_REPLICATION_DIR (base dir), LAB_REPLICATION_PORTS ("3321,3322,3323") or
LAB_REPLICATION_PORT_BASE (client port = base + N, default 3320). They must not collide with the
Galera lab's ports (3311-3313) or the Django database's (3320).

Accounts (created on the primary, replicated): root@localhost by unix_socket on each node's socket;
`monitor`/`monitor` with MONITOR_PRIVILEGES, no SUPER (status, replica status, SET GLOBAL read_only,
STOP/START/RESET SLAVE, CHANGE MASTER, SET GLOBAL gtid_slave_pos: a whole GTID switchover);
`repl`/`repl` with REPLICATION SLAVE; `app`/`app` with all rights on schema `app`. Over TCP.
"""

from __future__ import annotations

import logging
import os
import shutil
import string
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from lab._mariadb_common import LabError, check_traversable, execute_all, install_datadir, mib
from lab.mariadb_lab import LabNode, LabNodeStatus, MariaDBLab, NodeDied, cluster_cli, render_cnf

log = logging.getLogger("lab.replication")

MONITOR_USER, MONITOR_PASSWORD = "monitor", "monitor"
REPL_USER, REPL_PASSWORD = "repl", "repl"
TEMP_SERVER_ID_BASE = 1000  # node N replays its own old transactions as server_id 1000+N (see _follow)
APP_USER, APP_PASSWORD, APP_SCHEMA = "app", "app", "app"

# The monitor user's privileges on MariaDB 10.11. Measured with a throwaway user: the switchover of
# test_replication_lab.py needs exactly the first four; SUPER alone does not do it (no read_only).
#   SLAVE MONITOR            SHOW SLAVE STATUS (REPLICATION CLIENT no longer covers it since 10.5.9)
#   REPLICATION SLAVE ADMIN  STOP/START SLAVE, CHANGE MASTER, SET GLOBAL gtid_slave_pos
#   RELOAD                   RESET SLAVE [ALL] (error 1227 without it, even with REPLICATION SLAVE ADMIN)
#   READ_ONLY ADMIN          SET GLOBAL read_only (SUPER does not grant it since 10.11)
# and for reading the rest of the topology:
#   BINLOG MONITOR           SHOW MASTER STATUS / SHOW BINARY LOGS (what REPLICATION CLIENT maps to)
#   REPLICATION MASTER ADMIN SHOW SLAVE HOSTS (which replicas a primary has)
#   PROCESS, CONNECTION ADMIN  every session in SHOW PROCESSLIST, KILL them (as the Galera lab's monitor)
# MASTER_GTID_WAIT() and @@gtid_* need none. No SUPER.
MONITOR_PRIVILEGES = (
    "PROCESS, RELOAD, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN, "
    "REPLICATION MASTER ADMIN, READ_ONLY ADMIN, CONNECTION ADMIN"
)

BINLOG_CNF = string.Template("""\
server_id                      = $n
report_host                    = 127.0.0.1
report_port                    = $port
log_bin                        = mariadb-bin
log_bin_index                  = mariadb-bin.index
relay_log                      = relay-bin
relay_log_index                = relay-bin.index
binlog_format                  = ROW
log_slave_updates              = ON
gtid_domain_id                 = 0
gtid_strict_mode               = ON
# The lab never purges binlogs: a diverged replica is re-cloned by replaying them from the start.
binlog_expire_logs_seconds     = 0
slave_net_timeout              = 10
read_only                      = ON
""")


def default_ports() -> list[int]:
    return ReplicationLab.default_ports()


def _reserved_ports() -> dict[int, str]:
    """Ports of the other labs on this machine (configured, whether running or not)."""
    from lab import galera

    reserved = {int(os.environ.get("LAB_DJANGO_DB_PORT") or 3320): "the Django database (lab.mariadb_standalone)"}
    try:
        for n, port in enumerate(galera.default_ports(), start=1):
            reserved[port] = f"the Galera lab's node{n}"
    except LabError:
        pass
    return reserved


# ------------------------------------------------------------------------------------------ GTIDs


def parse_gtid_pos(text: str | None) -> dict[int, tuple[int, int]]:
    """'0-1-12,1-2-3' -> {domain: (server_id, seq_no)}."""
    out: dict[int, tuple[int, int]] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        domain, server, seq = part.split("-")
        out[int(domain)] = (int(server), int(seq))
    return out


def parse_gtid_state(text: str | None) -> dict[tuple[int, int], int]:
    """gtid_binlog_state '0-1-19,0-2-20' -> {(domain, server_id): last seq_no}."""
    out: dict[tuple[int, int], int] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if part:
            domain, server, seq = (int(x) for x in part.split("-"))
            out[(domain, server)] = max(seq, out.get((domain, server), -1))
    return out


def gtid_reached(pos: str | None, target: str | None) -> bool:
    """True when position `pos` is at or past `target` in every domain of target (strict mode: one
    history per domain, so seq_no order is history order)."""
    have = parse_gtid_pos(pos)
    return all(d in have and have[d][1] >= seq for d, (_, seq) in parse_gtid_pos(target).items())


# --------------------------------------------------------------------------------------- the nodes


@dataclass(frozen=True)
class ReplicationNode(LabNode):
    """Where node `n` lives and listens; its server_id is n."""

    @property
    def server_id(self) -> int:
        return self.n


@dataclass
class NodeStatus(LabNodeStatus):
    """One node as the monitor user sees it. `healthy` is judged against the original topology
    (node 1 primary, read_only OFF; the others replicating from it by GTID, read_only ON, caught up)."""

    read_only: str | None = None
    server_id: int | None = None
    gtid_binlog_pos: str | None = None
    gtid_binlog_state: str | None = None
    gtid_slave_pos: str | None = None
    gtid_current_pos: str | None = None
    gtid_strict_mode: str | None = None
    replicating: bool = False  # a replication channel is configured (SHOW SLAVE STATUS has a row)
    master_host: str | None = None
    master_port: int | None = None
    io_running: str | None = None
    sql_running: str | None = None
    seconds_behind: int | None = None
    using_gtid: str | None = None
    last_io_errno: int = 0
    last_io_error: str = ""
    last_sql_errno: int = 0
    last_sql_error: str = ""
    caught_up: bool | None = None  # replicas: see ReplicationLab._judge
    healthy: bool = False

    @property
    def role(self) -> str:
        if not self.alive:
            return "down"
        return "replica" if self.replicating else "primary"

    @property
    def threads_ok(self) -> bool:
        return self.io_running == "Yes" and self.sql_running == "Yes"

    def line(self) -> str:
        short = self.short_line()
        if short:
            return short
        text = f"node{self.n} port={self.port} pid={self.pid} alive=yes role={self.role}"
        if self.replicating:
            text += (
                f" of={self.master_host}:{self.master_port} io={self.io_running} sql={self.sql_running} "
                f"lag={self.seconds_behind if self.seconds_behind is not None else 'NULL'} "
                f"using_gtid={self.using_gtid} caught_up={'yes' if self.caught_up else 'no'}"
            )
            if self.last_io_errno:
                text += f" io_error={self.last_io_errno}"
            if self.last_sql_errno:
                text += f" sql_error={self.last_sql_errno}"
        return (
            f"{text} read_only={self.read_only} gtid_binlog_pos={self.gtid_binlog_pos or '-'} "
            f"healthy={'yes' if self.healthy else 'no'} rss={mib(self.rss)}"
        )


def _slave_row(conn) -> dict[str, object] | None:
    with conn.cursor() as cur:
        cur.execute("SHOW SLAVE STATUS")
        row = cur.fetchone()
        if row is None:
            return None
        names = [d[0] for d in cur.description]
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in zip(names, row)}


def _read_node(conn, st: NodeStatus) -> NodeStatus:
    with conn.cursor() as cur:
        cur.execute(
            "SELECT @@read_only, @@server_id, @@gtid_binlog_pos, @@gtid_binlog_state, @@gtid_slave_pos, "
            "@@gtid_current_pos, @@gtid_strict_mode"
        )
        ro, sid, binlog, state, slave, current, strict = cur.fetchone()
    st.read_only = "ON" if int(ro) else "OFF"
    st.server_id = int(sid)
    st.gtid_binlog_pos, st.gtid_binlog_state = binlog or "", state or ""
    st.gtid_slave_pos, st.gtid_current_pos = slave or "", current or ""
    st.gtid_strict_mode = "ON" if int(strict) else "OFF"
    row = _slave_row(conn)
    st.replicating = row is not None
    if row is not None:
        st.master_host = str(row.get("Master_Host") or "")
        st.master_port = int(row.get("Master_Port") or 0)
        st.io_running = str(row.get("Slave_IO_Running"))
        st.sql_running = str(row.get("Slave_SQL_Running"))
        lag = row.get("Seconds_Behind_Master")
        st.seconds_behind = None if lag is None else int(lag)
        st.using_gtid = str(row.get("Using_Gtid"))
        st.last_io_errno = int(row.get("Last_IO_Errno") or 0)
        st.last_io_error = str(row.get("Last_IO_Error") or "")
        st.last_sql_errno = int(row.get("Last_SQL_Errno") or 0)
        st.last_sql_error = str(row.get("Last_SQL_Error") or "")
    return st


class ReplicationLab(MariaDBLab):
    """Manage the one-primary, two-replica lab. All mutating operations hold an inter-process lock."""

    kind = module = "replication"
    env_prefix = "LAB_REPLICATION"
    default_port_base = 3320

    def __init__(
        self,
        base_dir: Path | str | None = None,
        ports: list[int] | None = None,
        name: str | None = None,
        nodes: int | None = None,
    ):
        super().__init__(base_dir=base_dir, ports=ports, name=name, nodes=nodes)
        if len(self.ports) != 3 or len(set(self.ports)) != 3:
            raise LabError(f"the replication lab needs 3 distinct ports, got {self.ports}")
        reserved = _reserved_ports() if not self.name else {}
        clash = [f"{p} ({reserved[p]})" for p in self.ports if p in reserved]
        if clash:
            raise LabError(f"replication lab ports collide with {', '.join(clash)}; set LAB_REPLICATION_PORTS")

    def _make_node(self, n: int, port: int) -> ReplicationNode:
        node = super()._make_node(n, port)
        return ReplicationNode(n=n, port=port, dir=node.dir, socket=node.socket)

    def _cnf_extra(self, node: ReplicationNode) -> str:
        return BINLOG_CNF.substitute(n=node.n, port=node.port)

    @property
    def template_dir(self) -> Path:
        return self.base_dir / "template"

    @property
    def template_datadir(self) -> Path:
        return self.template_dir / "data"

    def _root_read(self, n: int) -> NodeStatus:
        """Like node_status() but as root over the socket (works before the monitor user exists)."""
        node = self.node(n)
        st = NodeStatus(n=n, port=node.port, pid=None, alive=True)
        with closing(self.root_connection(n, timeout=1, read_timeout=10)) as conn:
            return _read_node(conn, st)

    # ------------------------------------------------------------------ status

    def _new_status(self, n: int, pid: int | None, alive: bool) -> NodeStatus:
        return NodeStatus(n=n, port=self.node(n).port, pid=pid, alive=alive)

    def _read_status(self, conn, st: NodeStatus) -> NodeStatus:
        return _read_node(conn, st)

    def status(self) -> list[NodeStatus]:
        """One NodeStatus per node (node 1 read first), judged against the original topology."""
        statuses = super().status()
        self._judge(statuses, primary=1)
        return statuses

    def _judge(self, statuses: list[NodeStatus], primary: int) -> None:
        """Set caught_up (against the node each replica replicates from) and healthy (against the
        topology with `primary` as the primary).

        caught_up compares whole gtid_binlog_states, not only the last GTID (a node that skipped
        transactions, see _cannot_follow, has the same last GTID as its source): the replica has every
        (domain, server_id) of its source at a seq_no at least as high, and nothing under its own
        server_id beyond the source (an errant write). With the source read first, a replica that keeps
        up with a write load still counts as caught up."""
        by_n = {st.n: st for st in statuses}
        for st in statuses:
            src = by_n.get(self._by_port(st.master_port)) if st.replicating else None
            if src is not None and src.alive and not src.error and st.alive and not st.error:
                mine, theirs = parse_gtid_state(st.gtid_binlog_state), parse_gtid_state(src.gtid_binlog_state)
                st.caught_up = all(mine.get(k, -1) >= q for k, q in theirs.items()) and all(
                    q <= theirs.get((d, s), -1) for (d, s), q in mine.items() if s == st.server_id
                )
        p = by_n[primary]
        p_ok = p.alive and not p.error
        p.healthy = p_ok and not p.replicating and p.read_only == "OFF" and p.gtid_strict_mode == "ON"
        target = self.node(primary)
        for st in statuses:
            if st.n == primary or not st.alive or st.error:
                continue
            st.healthy = bool(
                p_ok
                and st.replicating
                and st.master_host == target.host
                and st.master_port == target.port
                and st.using_gtid == "Slave_Pos"
                and st.threads_ok
                and st.seconds_behind == 0
                and st.caught_up
                and st.read_only == "ON"
                and st.gtid_strict_mode == "ON"
            )

    def is_healthy(self) -> bool:
        """Node 1 primary (read_only OFF), nodes 2 and 3 replicating from it by GTID with both threads
        running, zero lag, the same gtid_binlog_state, read_only ON."""
        return all(s.healthy for s in self.status())

    def primary(self) -> int | None:
        """The node that takes the writes now: the running node without a replication channel that the
        other replicas point at (or, failing that, the only one with read_only OFF). None if unclear."""
        import MySQLdb

        info: dict[int, NodeStatus] = {}
        for node in self.nodes:
            if not self.is_running(node.n):
                continue
            try:
                info[node.n] = self._root_read(node.n)
            except MySQLdb.Error:
                continue
        standalone = [n for n, s in info.items() if not s.replicating]
        if len(standalone) == 1:
            return standalone[0]
        pointed = {self._by_port(s.master_port) for s in info.values() if s.replicating}
        candidates = [n for n in standalone if n in pointed]
        if len(candidates) == 1:
            return candidates[0]
        writable = [n for n in standalone if info[n].read_only == "OFF"]
        return writable[0] if len(writable) == 1 else None

    # ------------------------------------------------------------------ waiting

    def _wait_replica(self, n: int, target_pos: str, timeout: float) -> str | None:
        """Wait until replica n's gtid_slave_pos reaches target_pos with both threads running (not
        'Connecting': a replica that has not reconnected does not follow). Returns None when so, else why
        not: a stopped thread with its error (IO error 1236 when the source does not have n's position,
        an SQL error such as 1950 from gtid_strict_mode), or the timeout."""
        import MySQLdb

        t0 = time.monotonic()
        last = "not read yet"
        while True:
            if self._process(n) is None:
                raise self._died(n, "replicating")
            try:
                st = self._root_read(n)
            except MySQLdb.Error as exc:
                st = None
                last = f"no connection ({exc.args[-1] if exc.args else exc})"
            if st is not None:
                if not st.replicating:
                    return "no replication channel configured"
                if st.io_running == "No" or st.sql_running == "No":
                    return (
                        f"replication stopped: io={st.io_running} ({st.last_io_errno} {st.last_io_error}) "
                        f"sql={st.sql_running} ({st.last_sql_errno} {st.last_sql_error})"
                    )
                if gtid_reached(st.gtid_slave_pos, target_pos) and st.threads_ok:
                    return None
                else:
                    last = (
                        f"gtid_slave_pos {st.gtid_slave_pos or '(empty)'} of {target_pos or '(empty)'}, "
                        f"io={st.io_running} sql={st.sql_running} lag={st.seconds_behind}"
                    )
            if time.monotonic() - t0 > timeout:
                return f"not caught up after {timeout:.0f} s ({last})"
            time.sleep(0.05)

    def _binlog_state(self, n: int) -> str:
        with closing(self.root_connection(n)) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_state")
            return cur.fetchone()[0] or ""

    def _cannot_follow(self, n: int, source: int) -> tuple[str, list[str]]:
        """Why node n cannot become a faithful replica of source by GTID ('' if it can), and the
        transactions carrying n's own server_id that source has and n lacks.

        1. n has something source lacks (an errant write, a split brain): every (domain, server_id) of
           n's gtid_binlog_state must be in source's state at a seq_no at least as high. Under
           gtid_strict_mode a domain has one history, so that is enough. n is read before source, so a
           source still taking writes only looks further ahead. Checked here because the source does
           not always refuse a position it lacks: with n at 0-3-21 (errant) and source at 0-1-21,
           MariaDB 10.11 accepted the connection.
        2. n lacks transactions it wrote itself (as a primary): a server skips replicated events with
           its own server_id, so they would never come back. Fine for an empty node (_follow replays
           under a temporary server_id); otherwise n must be re-cloned."""
        mine = parse_gtid_state(self._binlog_state(n))
        theirs = parse_gtid_state(self._binlog_state(source))
        extra = [f"{d}-{s}-{q}" for (d, s), q in sorted(mine.items()) if theirs.get((d, s), -1) < q]
        if extra:
            return f"node{n} has transactions node{source} does not have ({','.join(extra)})", []
        own = [f"{d}-{s}-{q}" for (d, s), q in sorted(theirs.items()) if s == n and q > mine.get((d, s), -1)]
        if own and mine:
            return f"node{n} lacks transactions it wrote itself ({','.join(own)}) and cannot replicate them", own
        return "", own

    def wait_caught_up(self, n: int, timeout: float = 30.0, primary: int | None = None) -> float:
        """Wait until replica n has applied everything its primary (default: the node it replicates
        from) had in its binlog when this was called. Returns the seconds waited; LabError otherwise."""
        t0 = time.monotonic()
        if primary is None:
            st = self._root_read(n)
            primary = self._by_port(st.master_port) if st.replicating else None
            if primary is None:
                raise LabError(f"node{n} does not replicate from a node of this lab")
        with closing(self.root_connection(primary)) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            target_pos = cur.fetchone()[0] or ""
        why = self._wait_replica(n, target_pos, timeout)
        if why:
            raise LabError(f"node{n} did not catch up with node{primary} ({target_pos}): {why}")
        return time.monotonic() - t0

    # ------------------------------------------------------------------ files & processes

    def _ensure_template(self) -> float:
        """`mariadb-install-db` once into template/data, binlog off (so: no GTID in it)."""
        if self._initialised(self.template_datadir):
            return 0.0
        t0 = time.monotonic()
        shutil.rmtree(self.template_dir, ignore_errors=True)
        tmpl = self.template_dir
        (tmpl / "tmp").mkdir(parents=True, exist_ok=True)
        cnf = tmpl / "my.cnf"
        cnf.write_text(
            render_cnf(
                self.module,
                "the template",
                datadir=self.template_datadir,
                tmpdir=tmpl / "tmp",
                socket=tmpl / "install.sock",
                pid_file=tmpl / "install.pid",
                error_log=tmpl / "error.log",
                port=0,
                extra="skip-log-bin\n",
            )
        )
        check_traversable(tmpl)
        install_datadir(cnf, self.template_datadir, tmpl)
        dt = time.monotonic() - t0
        log.info("template: mariadb-install-db in %.1f s", dt)
        return dt

    def _clone_template(self, node: ReplicationNode) -> None:
        """A fresh datadir for node: a copy of the template (taken with no server running on it)."""
        self._ensure_template()
        self._wipe(node)
        node.dir.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.template_datadir, node.datadir, symlinks=True)
        self._prepare(node)

    # ------------------------------------------------------------------ accounts

    def _users_present(self, n: int) -> bool:
        """The three accounts exist on node n and the monitor user has every privilege it should."""
        import MySQLdb

        with closing(self.root_connection(n)) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*) FROM mysql.global_priv WHERE host = '%%' AND user IN (%s, %s, %s)",
                (MONITOR_USER, REPL_USER, APP_USER),
            )
            if cur.fetchone()[0] != 3:
                return False
            try:
                cur.execute(f"SHOW GRANTS FOR '{MONITOR_USER}'@'%'")
            except MySQLdb.Error:
                return False
            grants = " ".join(str(r[0]) for r in cur.fetchall())
        return all(p.strip() in grants for p in MONITOR_PRIVILEGES.split(","))

    def _ensure_users(self, n: int) -> None:
        """Accounts and schema on node n (the primary): binlogged, so the replicas get them too."""
        execute_all_sql = [
            "DROP USER IF EXISTS ''@'localhost'",
            f"CREATE DATABASE IF NOT EXISTS `{APP_SCHEMA}` CHARACTER SET utf8mb4",
            f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'%' IDENTIFIED BY '{REPL_PASSWORD}'",
            f"GRANT REPLICATION SLAVE ON *.* TO '{REPL_USER}'@'%'",
            f"CREATE USER IF NOT EXISTS '{MONITOR_USER}'@'%' IDENTIFIED BY '{MONITOR_PASSWORD}'",
            f"GRANT {MONITOR_PRIVILEGES} ON *.* TO '{MONITOR_USER}'@'%'",
            f"CREATE USER IF NOT EXISTS '{APP_USER}'@'%' IDENTIFIED BY '{APP_PASSWORD}'",
            f"GRANT ALL PRIVILEGES ON `{APP_SCHEMA}`.* TO '{APP_USER}'@'%'",
        ]
        with closing(self.root_connection(n)) as conn:
            with conn.cursor() as cur:
                cur.execute("SELECT CONCAT(QUOTE(user), '@', QUOTE(host)) FROM mysql.global_priv WHERE user = ''")
                anonymous = [r[0] for r in cur.fetchall()]
            execute_all(conn, execute_all_sql + [f"DROP USER IF EXISTS {a}" for a in anonymous])
        log.info("node%d: accounts monitor, repl, app and schema %s in place", n, APP_SCHEMA)

    # ------------------------------------------------------------------ topology

    def _change_master_sql(self, source: int) -> str:
        src = self.node(source)
        return (
            f"CHANGE MASTER TO MASTER_HOST='{src.host}', MASTER_PORT={src.port}, MASTER_USER='{REPL_USER}', "
            f"MASTER_PASSWORD='{REPL_PASSWORD}', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1"
        )

    def _point(self, n: int, source: int) -> None:
        """Make n replicate from source, starting at what n already has: gtid_slave_pos is set to n's
        gtid_binlog_pos (everything n applied or wrote; log_slave_updates keeps both in the binlog), so
        an ex-primary does not ask for its own transactions again. If that position is not in source's
        binlog (diverged history), source refuses it (error 1236) and _wait_replica reports it."""
        st = self._root_read(n)
        statements = []
        if st.replicating:
            statements += ["STOP SLAVE", "RESET SLAVE ALL"]
        statements += [
            "SET GLOBAL read_only = ON",
            "SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos",
            self._change_master_sql(source),
            "START SLAVE",
        ]
        self._sql(n, *statements)
        log.info("node%d: replicating from node%d by GTID from %s", n, source, st.gtid_binlog_pos or "the beginning")

    def _follow(self, n: int, source: int, timeout: float) -> str | None:
        """n replicates from source and has caught up with source's binlog position read now. Keeps a
        channel that already points at source with both threads running; re-points otherwise. Returns
        None on success, else why it failed (see _wait_replica)."""
        src = self.node(source)
        problem, own = self._cannot_follow(n, source)
        if problem:
            return problem
        if own:
            # Empty (fresh) node: replay everything under a temporary server_id, then take N back.
            self._sql(n, f"SET GLOBAL server_id = {TEMP_SERVER_ID_BASE + n}")
            self._point(n, source)
            why = self._wait_replica(n, self._binlog_pos(source), timeout)
            self._sql(n, "STOP SLAVE", f"SET GLOBAL server_id = {n}", "START SLAVE")
            if why:
                return why
            log.info(
                "node%d: replayed its own old transactions (%s) under server_id %d",
                n,
                ",".join(own),
                TEMP_SERVER_ID_BASE + n,
            )
        else:
            st = self._root_read(n)
            if not (
                st.replicating
                and st.master_port == src.port
                and st.master_host == src.host
                and st.using_gtid == "Slave_Pos"
                and st.threads_ok
            ):
                self._point(n, source)
        why = self._wait_replica(n, self._binlog_pos(source), timeout)
        if why is None:
            problem, _ = self._cannot_follow(n, source)  # e.g. a write of its own while we waited
            if problem:
                return problem
        return why

    def _history_complete(self, n: int) -> bool:
        """True when node n's binlogs start at the beginning of its GTID history (nothing purged or
        reset), so that a fresh copy of the template can be filled by replaying them."""
        with closing(self.root_connection(n)) as conn, conn.cursor() as cur:
            cur.execute("SHOW BINARY LOGS")
            rows = cur.fetchall()
            if not rows:
                return False
            first = rows[0][0]
            first = first.decode() if isinstance(first, bytes) else first
            cur.execute("SELECT BINLOG_GTID_POS(%s, 4)", (first,))
            pos = cur.fetchone()[0]
        return not pos

    def _reclone(self, n: int, source: int, timeout: float) -> float:
        """Wipe replica n, copy the template, replay source's whole binlog into it."""
        node = self.node(n)
        t0 = time.monotonic()
        if not self._history_complete(source):
            raise LabError(
                f"cannot re-clone {node.name}: node{source}'s binary logs no longer start at the "
                f"beginning of its history (purged or reset); `python -m lab.replication down`, "
                f"remove {self.base_dir} and `up` again"
            )
        self._stop_proc(n, 60)
        self._clone_template(node)
        self._start_nodes([n], 60)
        why = self._follow(n, source, timeout)
        if why:
            raise LabError(
                f"{node.name}: re-cloned from the template but still cannot follow node{source}: {why}; "
                f"tail of {node.error_log}:\n{self._log_tail(n)}"
            )
        dt = time.monotonic() - t0
        log.info("%s: re-cloned and caught up with node%d in %.1f s", node.name, source, dt)
        return dt

    def _binlog_pos(self, n: int) -> str:
        with closing(self.root_connection(n)) as conn, conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            return cur.fetchone()[0] or ""

    def _converge(self, target: int, timeout: float) -> list[str]:
        """Make `target` the primary and every other node its caught-up replica. All nodes must run.

        If the topology already is right (target has no channel, the others point at it), nothing is
        frozen: read_only is fixed and lagging or broken replicas are re-pointed. Otherwise this is a
        graceful GTID switchover: read_only ON everywhere (app writes stop), target catches up with the
        node it replicates from (or, when it has no channel, with the one other node that has none: a
        primary promoted while target was down), target drops its channel, the others are re-pointed at
        it by GTID, read_only OFF on target. A node whose history cannot follow target's is re-cloned.
        Returns the actions taken (empty: it already was so)."""
        actions: list[str] = []
        others = [node.n for node in self.nodes if node.n != target]
        info = {n: self._root_read(n) for n in [target, *others]}  # the source first (see _judge)
        tnode = self.node(target)
        statuses = list(info.values())
        self._judge(statuses, primary=target)
        if all(s.healthy for s in statuses):
            return actions

        def points_at_target(s: NodeStatus) -> bool:
            return s.replicating and s.master_port == tnode.port and s.master_host == tnode.host

        if info[target].replicating or not all(points_at_target(info[r]) for r in others):
            source = None
            if info[target].replicating:
                source = self._by_port(info[target].master_port)
            else:
                standalone = [r for r in others if not info[r].replicating]
                if len(standalone) == 1:
                    source = standalone[0]
            for n in info:
                self._sql(n, "SET GLOBAL read_only = ON")
            actions.append("read_only ON on every node")
            if source is not None and source != target:
                why = self._follow(target, source, timeout=min(timeout, 30))
                if why:
                    log.warning(
                        "node%d could not catch up with node%d (%s); node%d's data wins", target, source, why, target
                    )
                    actions.append(f"node{target} kept its own data (could not catch up with node{source})")
                else:
                    actions.append(f"node{target} caught up with node{source}")
            self._sql(target, "STOP SLAVE", "RESET SLAVE ALL")
            actions.append(f"node{target}: RESET SLAVE ALL")
        for r in others:
            s = self._root_read(r)
            if (
                points_at_target(s)
                and s.threads_ok
                and s.using_gtid == "Slave_Pos"
                and gtid_reached(s.gtid_slave_pos, self._binlog_pos(target))
                and self._cannot_follow(r, target) == ("", [])
            ):
                if s.read_only != "ON":
                    self._sql(r, "SET GLOBAL read_only = ON")
                continue
            following = points_at_target(s) and s.threads_ok and s.using_gtid == "Slave_Pos"
            why = self._follow(r, target, timeout=min(timeout, 30))
            if why:
                log.warning("node%d cannot follow node%d (%s): re-cloning it", r, target, why)
                self._reclone(r, target, timeout)
                actions.append(f"node{r} re-cloned ({why})")
            elif following:
                actions.append(f"node{r} caught up with node{target}")
            else:
                actions.append(f"node{r} re-pointed at node{target}")
        self._sql(target, "SET GLOBAL read_only = OFF")
        # A final check (bounded: a write load may keep a replica a moment behind).
        deadline = time.monotonic() + 10
        while True:
            statuses = [self._root_read(n) for n in [target, *others]]
            self._judge(statuses, primary=target)
            if all(s.healthy for s in statuses):
                return actions
            if time.monotonic() > deadline:
                bad = "; ".join(s.line() for s in statuses if not s.healthy)
                raise LabError(f"topology with node{target} as primary not reached: {bad}")
            time.sleep(0.05)

    # ------------------------------------------------------------------ public operations

    def up(self, timeout: float = 120.0) -> dict:
        """Bring the lab up in its original topology. Reuses a healthy lab at once; otherwise initialises
        what is missing, starts what is stopped and restores the topology (as heal does). Returns a dict
        with 'reused', 'was_running', 'started', 'actions', 'timings' and 'seconds'."""
        t0 = time.monotonic()
        with self._lock():
            if self.is_healthy():
                dt = time.monotonic() - t0
                log.info("all %d nodes up, replicas caught up; reusing (%.2f s)", len(self.nodes), dt)
                return {
                    "reused": True,
                    "was_running": [n.n for n in self.nodes],
                    "started": [],
                    "actions": [],
                    "timings": {},
                    "seconds": dt,
                }
            self.base_dir.mkdir(parents=True, exist_ok=True)
            timings: dict[str, float] = {}
            alive = [node.n for node in self.nodes if self.is_running(node.n)]
            fresh = not self._initialised(self.node(1).datadir)
            if fresh and alive:
                log.warning("node1 has no datadir but nodes %s run: stopping them to start afresh", alive)
                for n in alive:
                    self._stop_proc(n, 60)
                alive = []
            if not alive:
                self._kill_leftovers()
            t = time.monotonic()
            if fresh:
                timings["install template"] = self._ensure_template()
            cloned = []
            for node in self.nodes:
                if fresh or not self._initialised(node.datadir):
                    self._clone_template(node)
                    cloned.append(node.n)
            if cloned:
                timings["copy template"] = time.monotonic() - t - timings.get("install template", 0.0)
            to_start = [node.n for node in self.nodes if node.n not in alive]
            t = time.monotonic()
            try:
                self._start_nodes(to_start, timeout)
            except NodeDied as exc:
                failed = [n for n in to_start if not self.is_running(n)]
                if 1 in failed and fresh:
                    raise
                log.warning(
                    "%s; starting %s from fresh datadirs",
                    str(exc).splitlines()[0],
                    ", ".join(f"node{n}" for n in failed),
                )
                if 1 in failed:  # the primary's data is gone: everything starts afresh
                    for n in [m.n for m in self.nodes if self.is_running(m.n)]:
                        self._stop_proc(n, 60)
                    failed = [m.n for m in self.nodes]
                    fresh = True
                for n in failed:
                    self._clone_template(self.node(n))
                self._start_nodes(failed, timeout)
            if to_start:
                timings["start " + ",".join(f"node{n}" for n in to_start)] = time.monotonic() - t
            t = time.monotonic()
            if fresh or not self._users_present(1):
                self._ensure_users(1)
            actions = self._converge(1, timeout)
            timings["topology"] = time.monotonic() - t
            dt = time.monotonic() - t0
            log.info("up: node1 primary, node2 and node3 replicating, in %.1f s", dt)
            return {
                "reused": False,
                "was_running": alive,
                "started": to_start,
                "actions": actions,
                "timings": timings,
                "seconds": dt,
            }

    def start(self, n: int, timeout: float = 60.0) -> dict:
        """Restart a killed or stopped node. It comes up read_only=ON (its my.cnf); a replica resumes its
        channel by GTID (crash-safe: the position is in mysql.gtid_slave_pos) and is waited for until
        caught up when its primary runs. A node without a channel that every other running node
        replicates from is the primary coming back: read_only is set OFF and its replicas are waited
        for until they have reconnected and caught up. Any other node stays read_only ON, replicating
        from nobody ('standalone'). Returns 'seconds', 'role'."""
        node = self.node(n)
        t0 = time.monotonic()
        with self._lock():
            if not self._initialised(node.datadir):
                raise LabError(f"{node.name} has no datadir; use up()/heal()")
            if not self.is_running(n):
                self._start_nodes([n], timeout)
            st = self._root_read(n)
            if st.replicating:
                source = self._by_port(st.master_port)
                if source is not None and self.is_running(source):
                    why = self._wait_replica(n, self._binlog_pos(source), timeout)
                    if why:
                        raise LabError(f"{node.name} restarted but does not follow node{source}: {why}")
                role = "replica"
            else:
                others = [m.n for m in self.nodes if m.n != n and self.is_running(m.n)]
                if others and all(self._by_port(self._root_read(m).master_port) == n for m in others):
                    self._sql(n, "SET GLOBAL read_only = OFF")
                    role = "primary"
                    pos = self._binlog_pos(n)
                    for m in others:  # they reconnect within MASTER_CONNECT_RETRY (1 s)
                        why = self._wait_replica(m, pos, timeout)
                        if why:
                            raise LabError(f"{node.name} restarted but node{m} does not follow it: {why}")
                else:
                    role = "standalone (read_only ON)"
        dt = time.monotonic() - t0
        log.info("%s: up as %s in %.1f s", node.name, role, dt)
        return {"seconds": dt, "role": role}

    def promote(self, n: int, timeout: float = 60.0) -> dict:
        """A graceful GTID switchover to node n, done by the lab over the root sockets (see _converge).
        Starts stopped nodes first. Returns 'seconds' and 'actions'."""
        t0 = time.monotonic()
        self.node(n)
        with self._lock():
            stopped = [m.n for m in self.nodes if not self.is_running(m.n)]
            if stopped:
                self._start_nodes(stopped, timeout)
            actions = self._converge(n, timeout)
        dt = time.monotonic() - t0
        log.info("promote: node%d primary in %.2f s (%s)", n, dt, "; ".join(actions) or "already so")
        return {"seconds": dt, "actions": actions}

    def heal(self, timeout: float = 120.0) -> bool:
        """Back to the original topology: every node running, node 1 primary with read_only OFF, nodes 2
        and 3 replicating from it by GTID, caught up, read_only ON. After a switchover node 1 is switched
        back to gracefully (it first catches up, so nothing written on the other primary is lost); a
        node whose history diverged from node 1's is re-cloned. Returns False at once if it already was
        healthy, True after repairing."""
        with self._lock():
            if self.is_healthy():
                return False
            t0 = time.monotonic()
            result = self.up(timeout)
            log.info(
                "heal: healthy again in %.1f s (%s)",
                time.monotonic() - t0,
                "; ".join(result["actions"]) or "nodes restarted",
            )
            return True


# ---------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    def promote_command(sub):
        p = sub.add_parser("promote", help="graceful GTID switchover to node N")
        p.add_argument("n", type=int)

        def run(lab: ReplicationLab, args) -> int:
            if args.cmd == "start":
                r = lab.start(args.n)
                print(f"node{args.n} up as {r['role']} in {r['seconds']:.1f} s")
            else:
                r = lab.promote(args.n)
                print(f"node{args.n} primary in {r['seconds']:.2f} s ({'; '.join(r['actions']) or 'already so'})")
                for s in lab.status():
                    print(s.line())
            return 0

        return run

    return cluster_cli(ReplicationLab, __doc__, argv, "restart node N", promote_command)


if __name__ == "__main__":
    sys.exit(main())
