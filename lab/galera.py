"""A three-node MariaDB Galera cluster on 127.0.0.1 for development and tests.

CLI::

    python -m lab.galera up|down|status|heal
    python -m lab.galera kill N|start N|stop N
    python -m lab.galera desync N on|off
    python -m lab.galera --name dc2 [--nodes 2] up|down|status|...   another cluster, on its own ports

(`bin/lab galera ...` runs the same from the repo root.)

Python::

    lab = GaleraLab()            # base dir <repo>/var/lab/galera, ports from the environment
    lab.up()                     # idempotent: reuses a running, Synced cluster at once
    lab.node(2).port             # host / port / socket / ... of a node
    lab.status()                 # list[NodeStatus], read with the monitor user over TCP
    lab.kill(3); lab.start(3)    # SIGKILL, then rejoin by IST (--wsrep-recover + start position)
    lab.heal()                   # back to all Synced, desync/read_only OFF, reject_queries NONE
    lab.down()                   # clean stop, one node at a time, by pid
    GaleraLab(name="dc2", nodes=2)   # a second cluster: var/lab/galera-dc2, ports shifted by 100 per slot

The lab is a configuration of lab/mariadb_lab.py's MariaDBLab (node layout, processes, ports, CLI);
this module adds what is Galera's: bootstrap, joining by IST/SST, Primary components, desync.

Layout (see ../shared/design/GALERA-LAB.md for the measured facts behind it): node N has client port
3310+N, gcomm 4567+10(N-1), IST gcomm+1, SST receive 4444+10(N-1); its own dir
`<base>/nodeN/` with my.cnf, data/, tmp/, socket, pid files and error.log. The servers run as the
`mysql` OS user (rsync SST fails as root), detached, tracked by the pid file we write at spawn.

Environment overrides: LAB_GALERA_DIR (base dir), LAB_GALERA_PORTS ("3311,3312,3313") or
LAB_GALERA_PORT_BASE (client port = base + N), LAB_GALERA_GCOMM_BASE (4567), LAB_GALERA_SST_BASE (4444).
A named cluster in slot k has all of them + 100k (wsrep_cluster_name lab_galera_<name>).

Accounts (created on node 1, replicated): root@localhost by unix_socket on each node's socket;
`monitor`/`monitor` (status, REPLICATION CLIENT, SUPER, READ_ONLY ADMIN, CONNECTION ADMIN: enough to
read wsrep status and to SET GLOBAL wsrep_desync / read_only / wsrep_reject_queries);
`app`/`app` with all rights on schema `app`. Both over TCP from 127.0.0.1.
"""

from __future__ import annotations

import logging
import re
import string
import sys
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from lab._mariadb_common import (
    LabError,
    execute_all,
    mib,
    run_as_server_user,
    server_binary,
    show,
    tail,
    wait_until,
)
from lab.mariadb_lab import SLOT_PORT_STEP, LabNode, LabNodeStatus, MariaDBLab, NodeDied, cluster_cli, env_int

log = logging.getLogger("lab.galera")

GALERA_PROVIDER_CANDIDATES = (
    "/usr/lib/galera/libgalera_smm.so",
    "/usr/lib/libgalera_smm.so",
    "/usr/lib64/galera-4/libgalera_smm.so",
    "/usr/lib/galera-4/libgalera_smm.so",
)

MONITOR_USER, MONITOR_PASSWORD = "monitor", "monitor"
APP_USER, APP_PASSWORD, APP_SCHEMA = "app", "app", "app"

SYNCED = 4

# Galera's own my.cnf lines (beside the ones every lab shares, lab/mariadb_lab.py).
GALERA_CNF = string.Template("""\
binlog_format                  = ROW
default_storage_engine         = InnoDB
innodb_autoinc_lock_mode       = 2
wsrep_on                       = ON
wsrep_provider                 = $provider
wsrep_cluster_name             = $cluster_name
wsrep_cluster_address          = gcomm://$members
wsrep_node_name                = node$n
wsrep_node_address             = 127.0.0.1:$gcomm_port
wsrep_node_incoming_address    = 127.0.0.1:$port
wsrep_sst_receive_address      = 127.0.0.1:$sst_port
wsrep_sst_method               = rsync
wsrep_slave_threads            = 2
wsrep_provider_options         = "gmcast.listen_addr=tcp://127.0.0.1:$gcomm_port;ist.recv_addr=127.0.0.1:$ist_port;gcache.size=64M$more_provider_options"
""")


def default_ports() -> list[int]:
    return GaleraLab.default_ports()


def provider_path() -> str:
    for candidate in GALERA_PROVIDER_CANDIDATES:
        if Path(candidate).exists():
            return candidate
    raise LabError("libgalera_smm.so not found; install galera-4 (bin/setup does it)")


@dataclass(frozen=True)
class GaleraNode(LabNode):
    """Where node `n` lives and listens, with its group communication, IST and SST ports."""

    gcomm_port: int = 0
    ist_port: int = 0
    sst_port: int = 0

    @property
    def recover_log(self) -> Path:
        return self.dir / "recover.log"

    @property
    def grastate(self) -> Path:
        return self.datadir / "grastate.dat"

    def ports(self) -> list[tuple[str, int]]:
        return [("client", self.port), ("gcomm", self.gcomm_port), ("IST", self.ist_port), ("SST", self.sst_port)]


@dataclass
class NodeStatus(LabNodeStatus):
    state: int | None = None
    state_comment: str | None = None
    cluster_status: str | None = None
    cluster_size: int | None = None
    ready: str | None = None
    recv_queue: int | None = None
    last_committed: int | None = None
    desync: str | None = None
    read_only: str | None = None
    reject_queries: str | None = None
    expected_size: int = 3  # how many nodes the lab has

    @property
    def synced(self) -> bool:
        return self.alive and self.state == SYNCED and self.cluster_status == "Primary"

    @property
    def healthy(self) -> bool:
        return (
            self.synced
            and self.cluster_size == self.expected_size
            and self.ready == "ON"
            and self.desync == "OFF"
            and self.read_only == "OFF"
            and self.reject_queries == "NONE"
        )

    def line(self) -> str:
        short = self.short_line()
        if short:
            return short
        return (
            f"node{self.n} port={self.port} pid={self.pid} alive=yes state={self.state} "
            f"{self.state_comment} cluster={self.cluster_status} size={self.cluster_size} "
            f"ready={self.ready} recv_queue={self.recv_queue} desync={self.desync} "
            f"read_only={self.read_only} reject_queries={self.reject_queries} rss={mib(self.rss)}"
        )


@dataclass
class GraState:
    uuid: str | None = None
    seqno: int = -1
    safe_to_bootstrap: bool = False


class GaleraLab(MariaDBLab):
    """Manage a Galera cluster of the lab (three nodes unless told otherwise). All mutating operations
    hold an inter-process lock."""

    kind = module = "galera"
    env_prefix = "LAB_GALERA"
    default_port_base = 3310
    not_the_server = ("--wsrep-recover", "--bootstrap")

    def __init__(
        self,
        base_dir: Path | str | None = None,
        ports: list[int] | None = None,
        gcomm_base: int | None = None,
        sst_base: int | None = None,
        cluster_name: str | None = None,
        name: str | None = None,
        nodes: int | None = None,
        extra_config: Callable[[GaleraNode], str] | None = None,
        provider_options: str = "",
    ):
        self._gcomm_base, self._sst_base = gcomm_base, sst_base
        # More wsrep_provider_options ("evs.suspect_timeout=PT2S;..."), appended to the lab's own (read at a start).
        self.provider_options = provider_options.strip().strip(";")
        # Extra my.cnf lines per node (called with the node): how lab/dr.py adds binary logs and GTID settings.
        self.extra_config = extra_config
        super().__init__(base_dir=base_dir, ports=ports, name=name, nodes=nodes)
        self.cluster_name = cluster_name or ("lab_galera" + (f"_{self.name}" if self.name else ""))
        self._recovered: dict[int, str | None] = {}  # --wsrep-recover results not yet used by a start

    def _make_node(self, n: int, port: int) -> GaleraNode:
        shift = SLOT_PORT_STEP * self.slot
        gcomm = (self._gcomm_base or env_int("LAB_GALERA_GCOMM_BASE") or 4567) + shift
        sst = (self._sst_base or env_int("LAB_GALERA_SST_BASE") or 4444) + shift
        node = super()._make_node(n, port)
        i = n - 1
        return GaleraNode(
            n=n,
            port=port,
            dir=node.dir,
            socket=node.socket,
            gcomm_port=gcomm + 10 * i,
            ist_port=gcomm + 10 * i + 1,
            sst_port=sst + 10 * i,
        )

    def _cnf_extra(self, node: GaleraNode) -> str:
        members = ",".join(f"127.0.0.1:{m.gcomm_port}" for m in self.nodes)
        return GALERA_CNF.substitute(
            n=node.n,
            port=node.port,
            provider=provider_path(),
            cluster_name=self.cluster_name,
            members=members,
            gcomm_port=node.gcomm_port,
            ist_port=node.ist_port,
            sst_port=node.sst_port,
            more_provider_options=f";{self.provider_options}" if self.provider_options else "",
        ) + (self.extra_config(node) if self.extra_config else "")

    # ------------------------------------------------------------------ status

    def _new_status(self, n: int, pid: int | None, alive: bool) -> NodeStatus:
        return NodeStatus(n=n, port=self.node(n).port, pid=pid, alive=alive, expected_size=len(self.nodes))

    def _read_status(self, conn, st: NodeStatus) -> NodeStatus:
        s = show(
            conn,
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state',"
            "'wsrep_local_state_comment','wsrep_cluster_status','wsrep_cluster_size',"
            "'wsrep_ready','wsrep_local_recv_queue','wsrep_last_committed')",
        )
        v = show(
            conn, "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_desync','read_only','wsrep_reject_queries')"
        )
        st.state = int(s.get("wsrep_local_state", -1))
        st.state_comment = s.get("wsrep_local_state_comment")
        st.cluster_status = s.get("wsrep_cluster_status")
        st.cluster_size = int(s.get("wsrep_cluster_size", 0))
        st.ready = s.get("wsrep_ready")
        st.recv_queue = int(s.get("wsrep_local_recv_queue", 0))
        st.last_committed = int(s.get("wsrep_last_committed", -1))
        st.desync = v.get("wsrep_desync")
        st.read_only = v.get("read_only")
        st.reject_queries = v.get("wsrep_reject_queries")
        return st

    def is_up(self) -> bool:
        """All nodes running, Synced, Primary, cluster size = the lab's nodes (other settings may differ)."""
        return all(s.synced and s.cluster_size == len(self.nodes) for s in self.status())

    def is_healthy(self) -> bool:
        """is_up() and also desync OFF, read_only OFF, reject_queries NONE everywhere."""
        return all(s.healthy for s in self.status())

    def _root_status(self, n: int) -> dict[str, str] | None:
        import MySQLdb

        try:
            with closing(self.root_connection(n, timeout=1, read_timeout=5)) as conn:
                return show(
                    conn,
                    "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state',"
                    "'wsrep_local_state_comment','wsrep_cluster_status','wsrep_cluster_size',"
                    "'wsrep_ready','wsrep_last_committed')",
                )
        except MySQLdb.Error:
            return None

    # ------------------------------------------------------------------ waiting

    def wait_synced(self, n: int, timeout: float = 60.0) -> float:
        """Wait until node n is Synced (4), Primary and ready, polling its socket as root.
        Fails fast if the node dies or is desynced on purpose; returns the seconds waited."""
        import MySQLdb

        node = self.node(n)
        t0 = time.monotonic()
        last = "not checked yet"
        while True:
            if self._process(n) is None:
                raise self._died(n, "waiting for it to reach Synced")
            try:
                with closing(self.root_connection(n, timeout=1, read_timeout=5)) as conn:
                    s = show(
                        conn,
                        "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state',"
                        "'wsrep_local_state_comment','wsrep_cluster_status','wsrep_ready',"
                        "'wsrep_cluster_size','wsrep_local_recv_queue')",
                    )
                    if (
                        s.get("wsrep_local_state") == str(SYNCED)
                        and s.get("wsrep_cluster_status") == "Primary"
                        and s.get("wsrep_ready") == "ON"
                    ):
                        return time.monotonic() - t0
                    last = (
                        f"state {s.get('wsrep_local_state')} {s.get('wsrep_local_state_comment')}, "
                        f"{s.get('wsrep_cluster_status')}, size {s.get('wsrep_cluster_size')}, "
                        f"ready {s.get('wsrep_ready')}, recv queue {s.get('wsrep_local_recv_queue')}"
                    )
                    if s.get("wsrep_local_state") == "2":
                        v = show(conn, "SHOW GLOBAL VARIABLES LIKE 'wsrep_desync'")
                        if v.get("wsrep_desync") == "ON":
                            raise LabError(
                                f"{node.name} is desynced on purpose (wsrep_desync=ON); "
                                f"`python -m lab.galera desync {n} off` or GaleraLab.heal()"
                            )
            except MySQLdb.Error as exc:
                last = f"no connection on {node.socket} ({exc.args[-1] if exc.args else exc})"
            if time.monotonic() - t0 > timeout:
                raise LabError(
                    f"{node.name} (port {node.port}) not Synced after {timeout:.0f} s; last seen: "
                    f"{last}; tail of {node.error_log}:\n{self._log_tail(n)}"
                )
            time.sleep(0.2)

    def wait_cluster_size(self, n: int, size: int, timeout: float = 30.0) -> float:
        """Wait until node n reports wsrep_cluster_size == size (read over TCP as monitor)."""
        t0 = time.monotonic()
        last = None
        while True:
            st = self.node_status(n)
            last = st
            if st.alive and st.cluster_size == size:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise LabError(
                    f"node{n} cluster size still {last.cluster_size} (want {size}) after {timeout:.0f} s: {last.line()}"
                )
            time.sleep(0.1)

    # ------------------------------------------------------------------ files & processes

    def _read_grastate(self, node: GaleraNode) -> GraState | None:
        try:
            text = node.grastate.read_text()
        except FileNotFoundError:
            return None
        g = GraState()
        for line in text.splitlines():
            key, _, value = line.partition(":")
            value = value.strip()
            if key.strip() == "uuid":
                g.uuid = value
            elif key.strip() == "seqno":
                g.seqno = int(value or -1)
            elif key.strip() == "safe_to_bootstrap":
                g.safe_to_bootstrap = value == "1"
        return g

    def _write_grastate_position(self, node: GaleraNode, position: str) -> None:
        uuid, _, seqno = position.rpartition(":")
        text = node.grastate.read_text()
        text = re.sub(r"(?m)^uuid:.*$", f"uuid:    {uuid}", text)
        text = re.sub(r"(?m)^seqno:.*$", f"seqno:   {seqno}", text)
        node.grastate.write_text(text)

    def _set_safe_to_bootstrap(self, node: GaleraNode) -> None:
        text = node.grastate.read_text()
        text = re.sub(r"(?m)^safe_to_bootstrap:.*$", "safe_to_bootstrap: 1", text)
        node.grastate.write_text(text)

    def _wipe(self, node: GaleraNode) -> None:
        self._recovered.pop(node.n, None)
        super()._wipe(node)

    def _spawn(self, n: int, extra: list[str] | tuple[str, ...] = ()) -> int:
        self._recovered.pop(n, None)
        return super()._spawn(n, extra)

    def recover_position(self, n: int) -> str | None:
        """Run `mariadbd --wsrep-recover` on stopped node n; return 'uuid:seqno' or None if unknown."""
        node = self.node(n)
        if self._process(n) is not None:
            raise LabError(f"{node.name} is running; --wsrep-recover needs it stopped")
        self._prepare(node)
        node.recover_log.unlink(missing_ok=True)
        t0 = time.monotonic()
        run_as_server_user(
            [server_binary(), f"--defaults-file={node.cnf}", "--wsrep-recover", f"--log-error={node.recover_log}"],
            timeout=120,
            cwd=node.dir,
        )
        text = node.recover_log.read_text(errors="replace") if node.recover_log.exists() else ""
        m = re.findall(r"Recovered position:\s*([0-9a-f-]{36}):(-?\d+)", text)
        if not m:
            log.warning(
                "%s: --wsrep-recover found no position (%.1f s); tail:\n%s",
                node.name,
                time.monotonic() - t0,
                tail(node.recover_log, 10),
            )
            return None
        uuid, seqno = m[-1]
        log.info("%s: recovered position %s:%s in %.1f s", node.name, uuid, seqno, time.monotonic() - t0)
        position = None if int(seqno) < 0 or uuid.startswith("00000000-") else f"{uuid}:{seqno}"
        self._recovered[n] = position
        return position

    def transfer_method(self, n: int) -> str:
        """How node n's latest join got its state, read from its error log: 'IST', 'SST' or 'none'."""
        text = tail(self.node(n).error_log, 100000, since=self._log_offsets.get(n, 0))
        # A real rsync SST logs "rsync SST completed on joiner"; an IST-only join runs the SST script in
        # bypass mode ("rsync IST completed on joiner") and then "IST received".
        if "rsync SST completed on joiner" in text:
            return "SST"
        if re.search(r"rsync IST completed on joiner|IST received", text):
            return "IST"
        return "none"

    # ------------------------------------------------------------------ init / bootstrap / join

    def _fresh_init(self) -> float:
        for node in self.nodes:
            self._wipe(node)
        return self._install_node(self.node(1))

    def _choose_bootstrap(self) -> tuple[int | None, str | None]:
        """With every node stopped, pick the node to bootstrap from: one marked safe_to_bootstrap,
        else the most advanced one per --wsrep-recover (marked safe then). None: nothing to restart."""
        candidates = [node for node in self.nodes if self._initialised(node.datadir)]
        if not candidates:
            return None, None
        states = {node.n: self._read_grastate(node) for node in candidates}
        safe = [n for n, g in states.items() if g and g.safe_to_bootstrap]
        if safe:
            best = max(safe, key=lambda n: states[n].seqno)
            log.info("node%d: safe_to_bootstrap=1 (seqno %d), bootstrapping from it", best, states[best].seqno)
            return best, None
        if len(candidates) == 1 and states[candidates[0].n] is None:
            return candidates[0].n, None  # initialised, never started
        positions: dict[int, tuple[int, str | None]] = {}
        for node in candidates:
            pos = self.recover_position(node.n)
            seqno = int(pos.rsplit(":", 1)[1]) if pos else (states[node.n].seqno if states[node.n] else -1)
            positions[node.n] = (seqno, pos)
        best = max(positions, key=lambda n: (positions[n][0], -n))
        node = self.node(best)
        if node.grastate.exists():
            self._set_safe_to_bootstrap(node)
        log.info("node%d: most advanced after a crash (seqno %d), marked safe_to_bootstrap", best, positions[best][0])
        return best, positions[best][1]

    def _bootstrap(self, n: int, position: str | None, timeout: float) -> float:
        t0 = time.monotonic()
        extra = ["--wsrep-new-cluster"]
        if position:
            extra.append(f"--wsrep_start_position={position}")
        self._spawn(n, extra)
        self.wait_synced(n, timeout)
        dt = time.monotonic() - t0
        log.info("node%d: bootstrapped a new cluster, Synced in %.1f s", n, dt)
        return dt

    def _join(self, n: int, timeout: float, retry_with_sst: bool = True) -> tuple[float, str]:
        node = self.node(n)
        t0 = time.monotonic()
        extra: list[str] = []
        g = self._read_grastate(node)
        if self._initialised(node.datadir) and (g is None or g.seqno < 0):
            position = self._recovered[n] if n in self._recovered else self.recover_position(n)
            if position:
                extra.append(f"--wsrep_start_position={position}")
                if g is not None and g.uuid is not None and not g.uuid.strip("0-"):
                    # killed soon after an SST join, its grastate.dat still says 00000000-...:-1 and Galera takes
                    # that as its state (a full SST again): write the recovered position there, as an operator does
                    self._write_grastate_position(node, position)
        self._spawn(n, extra)
        try:
            self.wait_synced(n, timeout)
        except NodeDied:
            if not retry_with_sst:
                raise
            log.warning(
                "%s died while joining; tail:\n%s\nwiping its datadir and retrying with a full SST",
                node.name,
                self._log_tail(n),
            )
            self._wipe(node)
            return self._join(n, timeout, retry_with_sst=False)
        dt = time.monotonic() - t0
        method = self.transfer_method(n)
        log.info("%s: joined by %s, Synced in %.1f s", node.name, method, dt)
        return dt, method

    def _ensure_primary(self, alive: list[int], timeout: float = 15.0) -> int:
        """Some running node must be in a Primary component that no longer counts dead members (a
        SIGKILLed member stays in the view until evicted after ~5 s; a new incarnation joining before
        that may end up in a non-Primary component). If the running nodes are a minority without
        Primary (quorum lost), re-bootstrap the most advanced one with pc.bootstrap=YES."""
        info: dict[int, dict] = {}

        def probe():
            for n in alive:
                s = self._root_status(n)
                if s is None:
                    return None
                info[n] = s
            prim = [n for n in alive if info[n].get("wsrep_cluster_status") == "Primary"]
            if prim:
                if all(int(info[n].get("wsrep_cluster_size", 0)) <= len(alive) for n in prim):
                    return sorted(prim, key=lambda n: info[n].get("wsrep_local_state") != str(SYNCED))
                return None  # dead members not evicted yet
            if len(alive) * 2 <= len(self.nodes):
                return "bootstrap"  # a minority never regains Primary on its own
            return None

        t0 = time.monotonic()
        found = wait_until(probe, timeout=timeout, interval=0.2)
        if isinstance(found, list):
            if time.monotonic() - t0 > 0.5:
                log.info("waited %.1f s for the cluster to evict dead members", time.monotonic() - t0)
            return found[0]
        prim = [n for n in info if info[n].get("wsrep_cluster_status") == "Primary"]
        if prim:
            return prim[0]
        if not info:
            raise LabError(f"nodes {alive} are running but none accepts connections on its socket")
        best = max(info, key=lambda n: int(info[n].get("wsrep_last_committed", -1)))
        log.warning("no Primary component among running nodes %s; pc.bootstrap=YES on node%d", alive, best)
        with closing(self.root_connection(best)) as conn:
            execute_all(conn, ["SET GLOBAL wsrep_provider_options='pc.bootstrap=YES'"])
        if not wait_until(lambda: (self._root_status(best) or {}).get("wsrep_cluster_status") == "Primary", 15):
            raise LabError(f"node{best} did not become Primary after pc.bootstrap=YES")
        return best

    def _ensure_users(self, n: int) -> None:
        with closing(self.root_connection(n)) as conn:
            execute_all(
                conn,
                [
                    "DROP USER IF EXISTS ''@'localhost'",
                    f"CREATE DATABASE IF NOT EXISTS `{APP_SCHEMA}` CHARACTER SET utf8mb4",
                    f"CREATE USER IF NOT EXISTS '{MONITOR_USER}'@'%' IDENTIFIED BY '{MONITOR_PASSWORD}'",
                    f"GRANT PROCESS, REPLICATION CLIENT, SLAVE MONITOR, SUPER, READ_ONLY ADMIN, CONNECTION ADMIN, RELOAD "
                    f"ON *.* TO '{MONITOR_USER}'@'%'",
                    f"CREATE USER IF NOT EXISTS '{APP_USER}'@'%' IDENTIFIED BY '{APP_PASSWORD}'",
                    f"GRANT ALL PRIVILEGES ON `{APP_SCHEMA}`.* TO '{APP_USER}'@'%'",
                ],
            )

    # ------------------------------------------------------------------ public operations

    def up(self, timeout: float = 180.0) -> dict:
        """Bring all nodes up and Synced. Reuses a running healthy cluster at once; otherwise
        initialises/bootstraps/joins what is missing. Returns a dict with 'reused', 'was_running' (nodes
        that were already running), 'started', 'timings' and 'seconds'."""
        t0 = time.monotonic()
        self._recovered.clear()
        with self._lock():
            if self.is_up():
                dt = time.monotonic() - t0
                log.info("all %d nodes already up and Synced; reusing (%.2f s)", len(self.nodes), dt)
                return {
                    "reused": True,
                    "was_running": [n.n for n in self.nodes],
                    "started": [],
                    "timings": {},
                    "seconds": dt,
                }
            self.base_dir.mkdir(parents=True, exist_ok=True)
            alive = [node.n for node in self.nodes if self.is_running(node.n)]
            started: list[int] = []
            timings: dict[str, float] = {}
            if not alive:
                # Nothing of ours runs: clear leftovers (e.g. an orphaned SST rsync daemon) first.
                self._kill_leftovers()
                boot, position = self._choose_bootstrap()
                fresh = boot is None
                if fresh:
                    timings["init node1"] = self._fresh_init()
                    boot = 1
                try:
                    timings[f"bootstrap node{boot}"] = self._bootstrap(boot, position, timeout)
                except NodeDied as exc:
                    if fresh:
                        raise
                    log.warning(
                        "bootstrap from stale datadir failed (%s); reinitialising the lab from scratch",
                        str(exc).splitlines()[0],
                    )
                    timings["init node1"] = self._fresh_init()
                    boot = 1
                    timings["bootstrap node1"] = self._bootstrap(1, None, timeout)
                started.append(boot)
                primary = boot
            else:
                primary = self._ensure_primary(alive)
            self._ensure_users(primary)
            for node in self.nodes:
                if node.n in alive or node.n in started:
                    continue
                dt, method = self._join(node.n, timeout)
                timings[f"join node{node.n} ({method})"] = dt
                started.append(node.n)
            for node in self.nodes:
                self.wait_synced(node.n, timeout)
            self.wait_cluster_size(1, len(self.nodes), timeout=30)
            dt = time.monotonic() - t0
            log.info("up: %d nodes Synced, cluster size %d, in %.1f s", len(self.nodes), len(self.nodes), dt)
            return {"reused": False, "was_running": alive, "started": started, "timings": timings, "seconds": dt}

    def _stop_all(self, timeout: float) -> None:
        """One node at a time, node N..1: node 1 stops last and so is the safe_to_bootstrap node next time."""
        for node in reversed(self.nodes):
            self._stop_proc(node.n, timeout)

    def start(self, n: int, timeout: float = 120.0) -> dict:
        """Restart a killed or stopped node so that it rejoins the running cluster (IST when the donor's
        gcache still has the write-sets): --wsrep-recover, then --wsrep_start_position; wait Synced."""
        node = self.node(n)
        t0 = time.monotonic()
        with self._lock():
            if self.is_running(n):
                self.wait_synced(n, timeout)
                return {"seconds": time.monotonic() - t0, "method": "already running"}
            others = [m.n for m in self.nodes if m.n != n and self.is_running(m.n)]
            if not others:
                raise LabError(f"no other node is running, {node.name} has nobody to join; use `up`")
            self._ensure_primary(others)
            dt, method = self._join(n, timeout)
        return {"seconds": time.monotonic() - t0, "method": method}

    def set_desync(self, n: int, on: bool, timeout: float = 30.0) -> None:
        """SET GLOBAL wsrep_desync on node n; with OFF, wait until it is Synced again."""
        with closing(self.root_connection(n)) as conn:
            execute_all(conn, [f"SET GLOBAL wsrep_desync={'ON' if on else 'OFF'}"])
        if not on:
            self.wait_synced(n, timeout)

    def heal(self, timeout: float = 180.0) -> bool:
        """Back to healthy: all nodes running and Synced (size: all of them), wsrep_desync OFF, read_only OFF,
        wsrep_reject_queries NONE. Returns False at once if it already was healthy."""
        import MySQLdb

        with self._lock():
            statuses = self.status()
            if all(s.healthy for s in statuses):
                return False
            t0 = time.monotonic()
            for s in statuses:
                if not s.alive:
                    continue
                try:
                    with closing(self.root_connection(s.n)) as conn:
                        v = show(
                            conn,
                            "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_desync',"
                            "'read_only','wsrep_reject_queries')",
                        )
                        fixes = []
                        if v.get("wsrep_reject_queries") != "NONE":
                            fixes.append("SET GLOBAL wsrep_reject_queries=NONE")
                        if v.get("wsrep_desync") != "OFF":
                            fixes.append("SET GLOBAL wsrep_desync=OFF")
                        if v.get("read_only") != "OFF":
                            fixes.append("SET GLOBAL read_only=OFF")
                        if fixes:
                            log.info("node%d: %s", s.n, "; ".join(fixes))
                            execute_all(conn, fixes)
                except MySQLdb.Error as exc:
                    log.warning("node%d: could not reset settings yet: %s", s.n, exc)
            self.up(timeout)
            # A node that was not reachable before may have come back with a setting still on.
            if not self.is_healthy():
                for s in self.status():
                    if not s.healthy and s.alive:
                        with closing(self.root_connection(s.n)) as conn:
                            execute_all(
                                conn,
                                [
                                    "SET GLOBAL wsrep_reject_queries=NONE",
                                    "SET GLOBAL wsrep_desync=OFF",
                                    "SET GLOBAL read_only=OFF",
                                ],
                            )
                        self.wait_synced(s.n, timeout)
            log.info("heal: healthy again in %.1f s", time.monotonic() - t0)
            return True


# ---------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    def desync_command(sub):
        p = sub.add_parser("desync", help="SET GLOBAL wsrep_desync on node N")
        p.add_argument("n", type=int)
        p.add_argument("value", choices=["on", "off"])

        def run(lab: GaleraLab, args) -> int:
            if args.cmd == "start":
                r = lab.start(args.n)
                print(f"node{args.n} Synced in {r['seconds']:.1f} s ({r['method']})")
            else:
                lab.set_desync(args.n, args.value == "on")
                print(lab.node_status(args.n).line())
            return 0

        return run

    return cluster_cli(GaleraLab, __doc__, argv, "restart node N, rejoining by IST", desync_command)


if __name__ == "__main__":
    sys.exit(main())
