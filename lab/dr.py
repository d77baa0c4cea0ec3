"""Two three-node Galera clusters, "dc1" and "dc2", and an asynchronous channel from dc1 into dc2: the
HA-plus-DR shape (a tightly coupled cluster per site, loosely coupled between the sites).

CLI::

    python -m lab.dr up|down|status
    python -m lab.dr kill dc1|dc2 N      # SIGKILL one node (the channel is not moved: that is the product's job)
    python -m lab.dr start dc1|dc2 N     # rejoin it
    python -m lab.dr load SECONDS        # the write load on dc1, then compare both sides

Python::

    lab = DrLab(); lab.up()              # both clusters Synced, the channel running dc1 node1 -> dc2 node1
    lab.dc1 / lab.dc2                    # GaleraLab objects (ports 3331-3333 and 3341-3343 by default)
    lab.channel()                        # ChannelStatus of the dc2 node that replicates (or None)
    with WriteLoad(lab) as load: ...     # counter + checksum rows written in transactions on dc1
    compare(lab)                         # row counts, checksums and GTID positions on both sides

Each cluster is a `lab.galera.GaleraLab` on its own ports and directory, with binary logs, log_slave_updates
and MariaDB GTID: wsrep_gtid_mode=ON, wsrep_gtid_domain_id 1 (dc1) / 2 (dc2), and a gtid_domain_id and
server_id per node (11-13, 21-23) for anything written outside Galera. The channel is the default (unnamed)
replication connection of one dc2 node, `CHANGE MASTER TO ... MASTER_USE_GTID=slave_pos`, with the
replication account `repl`/`repl` made on dc1.

Environment overrides: LAB_DR_DIR (base dir, default var/lab/dr), LAB_DR_DC1_PORTS ("3331,3332,3333"),
LAB_DR_DC2_PORTS ("3341,3342,3343"), LAB_DR_PROVIDER_OPTIONS (more wsrep_provider_options for every node, e.g.
"evs.suspect_timeout=PT2S;evs.inactive_timeout=PT3S": read when a node starts, so `down` first). Galera's own ports: dc1 gcomm 4600/4610/4620 (IST +1), SST 4700/...;
dc2 gcomm 4800/..., SST 4900/...
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from lab._mariadb_common import LAB_VAR, LabError, LabLock, execute_all, setup_cli_logging, wait_until
from lab.galera import GaleraLab, GaleraNode

log = logging.getLogger("lab.dr")

REPL_USER, REPL_PASSWORD = "repl", "repl"
LOAD_SCHEMA = "app"

SITES = {
    # name: (default client ports, gcomm base, SST base, wsrep_gtid_domain_id)
    "dc1": ((3331, 3332, 3333), 4600, 4700, 1),
    "dc2": ((3341, 3342, 3343), 4800, 4900, 2),
}


def _ports(site: str) -> list[int]:
    raw = os.environ.get(f"LAB_DR_{site.upper()}_PORTS", "").strip()
    if raw:
        return [int(p) for p in raw.replace(" ", "").split(",") if p]
    return list(SITES[site][0])


def gtid_config(domain: int):
    """my.cnf lines for a node of the cluster with wsrep_gtid_domain_id `domain` (GaleraLab.extra_config)."""

    def lines(node: GaleraNode) -> str:
        own = domain * 10 + node.n
        return (
            f"\n# Added by lab/dr.py: binary logs and MariaDB GTID (a domain per cluster, one per node)\n"
            f"server_id                      = {own}\n"
            f"log_bin                        = mariadb-bin\n"
            f"log_slave_updates              = ON\n"
            f"wsrep_gtid_mode                = ON\n"
            f"wsrep_gtid_domain_id           = {domain}\n"
            f"gtid_domain_id                 = {own}\n"
            f"slave_net_timeout              = 5\n"
            # A node that restarts must not resume a channel by itself: after a move another node runs it
            # (the product, or `up` for a fresh lab, starts channels).
            f"skip_slave_start               = ON\n"
        )

    return lines


def site_lab(site: str, base_dir: Path) -> GaleraLab:
    _, gcomm, sst, domain = SITES[site]
    return GaleraLab(
        base_dir=base_dir / site,
        ports=_ports(site),
        gcomm_base=gcomm,
        sst_base=sst,
        cluster_name=f"dr_{site}",
        extra_config=gtid_config(domain),
        provider_options=os.environ.get("LAB_DR_PROVIDER_OPTIONS", ""),
    )


@dataclass
class ChannelStatus:
    """SHOW SLAVE STATUS of one dc2 node, the parts that matter."""

    replica: int
    source_port: int | None
    io_running: str
    sql_running: str
    seconds_behind: int | None
    last_io_error: str
    last_sql_error: str
    gtid_slave_pos: str

    @property
    def running(self) -> bool:
        return self.io_running == "Yes" and self.sql_running == "Yes"

    def line(self) -> str:
        return (
            f"channel: dc2 node{self.replica} <- 127.0.0.1:{self.source_port} io={self.io_running} "
            f"sql={self.sql_running} behind={self.seconds_behind} gtid_slave_pos={self.gtid_slave_pos}"
            + (f" io_error={self.last_io_error!r}" if self.last_io_error else "")
            + (f" sql_error={self.last_sql_error!r}" if self.last_sql_error else "")
        )


@dataclass
class DrLab:
    base_dir: Path | str | None = None
    dc1: GaleraLab = field(init=False)
    dc2: GaleraLab = field(init=False)

    def __post_init__(self) -> None:
        self.base_dir = Path(self.base_dir or os.environ.get("LAB_DR_DIR") or (LAB_VAR / "dr")).resolve()
        self.dc1 = site_lab("dc1", self.base_dir)
        self.dc2 = site_lab("dc2", self.base_dir)

    def site(self, name: str) -> GaleraLab:
        if name not in ("dc1", "dc2"):
            raise LabError(f"no site {name!r}: dc1 or dc2")
        return self.dc1 if name == "dc1" else self.dc2

    def _lock(self) -> LabLock:
        return LabLock(self.base_dir / ".lock")

    # ------------------------------------------------------------------ channel

    def replica_status(self, n: int) -> ChannelStatus | None:
        """The channel as dc2 node n sees it; None when node n is down or has no replication configured."""
        import MySQLdb

        if not self.dc2.is_running(n):
            return None
        try:
            with closing(self.dc2.root_connection(n, timeout=1, read_timeout=5)) as conn:
                cur = conn.cursor()
                cur.execute("SHOW SLAVE STATUS")
                row = cur.fetchone()
                names = [d[0] for d in cur.description] if cur.description else []
                cur.execute("SELECT @@gtid_slave_pos")
                slave_pos = cur.fetchone()[0] or ""
        except MySQLdb.Error:
            return None
        if not row:
            return None
        s = dict(zip(names, row))
        if not s.get("Master_Host"):
            return None
        behind = s.get("Seconds_Behind_Master")
        return ChannelStatus(
            replica=n,
            source_port=int(s["Master_Port"]) if s.get("Master_Port") else None,
            io_running=s.get("Slave_IO_Running") or "",
            sql_running=s.get("Slave_SQL_Running") or "",
            seconds_behind=None if behind is None else int(behind),
            last_io_error=s.get("Last_IO_Error") or "",
            last_sql_error=s.get("Last_SQL_Error") or "",
            gtid_slave_pos=slave_pos,
        )

    def channel(self) -> ChannelStatus | None:
        """The dc2 node whose replication threads run, else the one configured last (after a move an old
        replica keeps its stopped configuration), or None."""
        seen = [s for s in (self.replica_status(node.n) for node in self.dc2.nodes) if s is not None]
        running = [s for s in seen if s.io_running in ("Yes", "Connecting") or s.sql_running == "Yes"]
        if running or not seen:
            return (running or [None])[0]

        def configured_at(status: ChannelStatus) -> float:
            info = self.dc2.node(status.replica).datadir / "master.info"
            return info.stat().st_mtime if info.exists() else 0.0

        return max(seen, key=configured_at)

    def _ensure_repl_user(self) -> None:
        n = next(node.n for node in self.dc1.nodes if self.dc1.is_running(node.n))
        with closing(self.dc1.root_connection(n)) as conn:
            execute_all(
                conn,
                [
                    f"CREATE USER IF NOT EXISTS '{REPL_USER}'@'%' IDENTIFIED BY '{REPL_PASSWORD}'",
                    f"GRANT REPLICATION SLAVE, REPLICATION CLIENT, SLAVE MONITOR ON *.* TO '{REPL_USER}'@'%'",
                ],
            )

    def start_channel(self, replica: int = 1, source: int = 1, timeout: float = 60.0) -> ChannelStatus:
        """Point dc2 node `replica` at dc1 node `source` by GTID (slave_pos) and start it. The first time
        (empty gtid_slave_pos) dc2 replays dc1's whole binary log, so both sides start from the same data."""
        port = self.dc1.node(source).port
        with closing(self.dc2.root_connection(replica)) as conn:
            execute_all(
                conn,
                [
                    "STOP SLAVE",
                    f"CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT={port}, MASTER_USER='{REPL_USER}', "
                    f"MASTER_PASSWORD='{REPL_PASSWORD}', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1",
                    "START SLAVE",
                ],
            )
        status = wait_until(lambda: (s := self.replica_status(replica)) and s.running and s, timeout, 0.2)
        if not status:
            raise LabError(
                f"channel into dc2 node{replica} not running after {timeout:.0f} s: {self.replica_status(replica)}"
            )
        log.info("channel dc1 node%d -> dc2 node%d running", source, replica)
        return status

    def stop_channel(self) -> None:
        import MySQLdb

        for node in self.dc2.nodes:
            if self.dc2.is_running(node.n):
                try:
                    with closing(self.dc2.root_connection(node.n)) as conn:
                        execute_all(conn, ["STOP SLAVE"])
                except MySQLdb.Error as exc:
                    log.warning("dc2 node%d: STOP SLAVE failed: %s", node.n, exc)

    def wait_caught_up(self, timeout: float = 60.0) -> ChannelStatus:
        """Until the running channel has applied everything dc1 has written (dc1's gtid_binlog_pos for
        domain 1 reached by dc2's gtid_slave_pos)."""

        def done():
            status = self.channel()
            if status is None or not status.running:
                return None
            source = gtid_map(binlog_pos(self.dc1))
            applied = gtid_map(status.gtid_slave_pos)
            return status if applied.get(1) == source.get(1) else None

        status = wait_until(done, timeout, 0.2)
        if not status:
            raise LabError(f"channel not caught up after {timeout:.0f} s: {self.channel()}")
        return status

    # ------------------------------------------------------------------ lifecycle

    def is_up(self) -> bool:
        channel = self.channel()
        return self.dc1.is_up() and self.dc2.is_up() and channel is not None and channel.running

    def up(self, timeout: float = 240.0) -> dict:
        """Both clusters up and Synced, the channel running. Reuses what runs; a configured channel that
        stopped (a node restarted) is started again where it was, a missing one on dc2 node1 from node1."""
        t0 = time.monotonic()
        with self._lock():
            was_running = [
                f"{site}:{n.n}"
                for site in ("dc1", "dc2")
                for n in self.site(site).nodes
                if self.site(site).is_running(n.n)
            ]
            r1 = self.dc1.up(timeout)
            r2 = self.dc2.up(timeout)
            self._ensure_repl_user()
            channel = self.channel()
            if channel is None or not channel.running:
                replica = channel.replica if channel else 1
                source = next((node.n for node in self.dc1.nodes if channel and node.port == channel.source_port), 1)
                self.start_channel(replica, source)
            dt = time.monotonic() - t0
            return {"reused": r1["reused"] and r2["reused"], "was_running": was_running, "seconds": dt}

    def down(self, timeout: float = 60.0) -> float:
        t0 = time.monotonic()
        with self._lock():
            self.stop_channel()
            self.dc2.down(timeout)
            self.dc1.down(timeout)
        return time.monotonic() - t0

    def heal(self) -> None:
        """Both clusters back to 3 x Synced; the channel running (where it is, else dc2 node1)."""
        with self._lock():
            self.dc1.heal()
            self.dc2.heal()
            self.up()

    def status_lines(self) -> list[str]:
        lines = []
        for site in ("dc1", "dc2"):
            lines += [f"{site} {s.line()}" for s in self.site(site).status()]
        channel = self.channel()
        lines.append(channel.line() if channel else "channel: not configured on any running dc2 node")
        return lines


# ---------------------------------------------------------------------------------------------- GTIDs


def gtid_map(position: str) -> dict[int, int]:
    """'1-11-5,2-21-3' -> {1: 5, 2: 3}: the sequence number per domain."""
    out: dict[int, int] = {}
    for part in (position or "").replace(" ", "").split(","):
        if part:
            domain, _, seq = part.split("-")
            out[int(domain)] = int(seq)
    return out


def any_node(site: GaleraLab):
    """A root connection to the first running node of a site (they all hold the same data)."""
    for node in site.nodes:
        if site.is_running(node.n):
            return closing(site.root_connection(node.n))
    raise LabError(f"no node of {site.cluster_name} is running")


def binlog_pos(site: GaleraLab) -> str:
    with any_node(site) as conn:
        cur = conn.cursor()
        cur.execute("SELECT @@gtid_binlog_pos")
        return cur.fetchone()[0] or ""


# ---------------------------------------------------------------------------------------------- load

LOAD_TABLES = [
    f"CREATE TABLE IF NOT EXISTS `{LOAD_SCHEMA}`.dr_counter (id INT PRIMARY KEY, n BIGINT NOT NULL) ENGINE=InnoDB",
    f"INSERT IGNORE INTO `{LOAD_SCHEMA}`.dr_counter VALUES (1, 0)",
    f"CREATE TABLE IF NOT EXISTS `{LOAD_SCHEMA}`.dr_checksum (n BIGINT PRIMARY KEY, payload VARCHAR(64) NOT NULL,"
    f" crc BIGINT NOT NULL) ENGINE=InnoDB",
]


class WriteLoad:
    """Transactions on dc1, each `counter += 1` and one checksum row keyed by the new counter value, so
    that on either side counter == rows == max(n), and a lost or doubled transaction shows. It writes to
    one dc1 node and moves on to the next when that node fails (like an application behind ProxySQL).
    `committed` counts acknowledged commits; a commit cut off by a kill is `uncertain`."""

    def __init__(self, lab: DrLab, node: int = 1, pause: float = 0.01):
        self.lab = lab
        self.node = node
        self.pause = pause
        self.committed = 0
        self.uncertain = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "WriteLoad":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        with closing(self.lab.dc1.app_connection(self.node)) as conn:
            execute_all(conn, LOAD_TABLES)
        self._thread = threading.Thread(target=self._run, name="dr-write-load", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(30)

    def wait_committed(self, count: int, timeout: float = 30.0) -> int:
        """Until at least `count` commits were acknowledged (a slow machine commits fewer per second than an
        idle one: a test that wants writes around an event waits for them, not for a fixed time)."""
        deadline = time.monotonic() + timeout
        while self.committed < count:
            if time.monotonic() > deadline or not (self._thread and self._thread.is_alive()):
                raise LabError(
                    f"write load: {self.committed} of {count} commits after {timeout:g} s; "
                    f"last errors: {self.errors[-3:]}"
                )
            time.sleep(0.02)
        return self.committed

    def _connect(self):
        import MySQLdb

        nodes = [n.n for n in self.lab.dc1.nodes]
        for _ in range(len(nodes) * 20):
            try:
                return self.lab.dc1.app_connection(self.node, autocommit=False)
            except MySQLdb.Error as exc:
                self.errors.append(f"node{self.node}: {exc}")
                self.node = nodes[(nodes.index(self.node) + 1) % len(nodes)]  # the next node
                time.sleep(0.1)
        raise LabError("write load: no dc1 node accepts connections")

    def _run(self) -> None:
        import MySQLdb

        conn = None
        while not self._stop.is_set():
            try:
                if conn is None:
                    conn = self._connect()
                cur = conn.cursor()
                cur.execute(f"UPDATE `{LOAD_SCHEMA}`.dr_counter SET n = LAST_INSERT_ID(n + 1) WHERE id = 1")
                cur.execute(
                    f"INSERT INTO `{LOAD_SCHEMA}`.dr_checksum (n, payload, crc) "
                    f"SELECT LAST_INSERT_ID(), MD5(LAST_INSERT_ID()), CRC32(MD5(LAST_INSERT_ID()))"
                )
            except MySQLdb.Error as exc:
                self.errors.append(str(exc))
                conn = self._drop(conn)
                continue
            try:
                conn.commit()
                self.committed += 1
            except MySQLdb.Error as exc:
                self.uncertain += 1  # the commit may or may not have happened
                self.errors.append(f"commit: {exc}")
                conn = self._drop(conn)
            time.sleep(self.pause)
        self._drop(conn)

    @staticmethod
    def _drop(conn):
        if conn is not None:
            try:
                conn.close()
            except Exception:
                pass
        return None


@dataclass
class SideData:
    counter: int | None
    rows: int
    max_n: int | None
    checksum: int | None
    gtid_binlog_pos: str

    def consistent(self) -> bool:
        """One row per counter step: nothing lost or doubled inside this side."""
        return (self.counter or 0) == self.rows == (self.max_n or 0)


def read_side(site: GaleraLab) -> SideData:
    with any_node(site) as conn:
        cur = conn.cursor()
        cur.execute("SELECT @@gtid_binlog_pos")
        pos = cur.fetchone()[0] or ""
        cur.execute(
            f"SELECT COUNT(*) FROM information_schema.tables WHERE table_schema='{LOAD_SCHEMA}' "
            f"AND table_name IN ('dr_counter', 'dr_checksum')"
        )
        if cur.fetchone()[0] < 2:
            return SideData(None, 0, None, None, pos)
        cur.execute(f"SELECT n FROM `{LOAD_SCHEMA}`.dr_counter WHERE id = 1")
        row = cur.fetchone()
        cur.execute(
            f"SELECT COUNT(*), MAX(n), SUM(crc), BIT_XOR(CRC32(CONCAT(n, ':', payload))) "
            f"FROM `{LOAD_SCHEMA}`.dr_checksum"
        )
        rows, max_n, crc_sum, crc_xor = cur.fetchone()
        checksum = None if crc_sum is None else int(crc_sum) ^ int(crc_xor)
        return SideData(row[0] if row else None, int(rows), max_n, checksum, pos)


@dataclass
class Comparison:
    dc1: SideData
    dc2: SideData

    @property
    def identical(self) -> bool:
        """Same counter, rows, checksum on both sides, each side consistent, and dc2 applied exactly dc1's
        domain-1 GTIDs (no transaction lost, none applied twice)."""
        return (
            self.dc1.consistent()
            and self.dc2.consistent()
            and (self.dc1.counter, self.dc1.rows, self.dc1.checksum)
            == (self.dc2.counter, self.dc2.rows, self.dc2.checksum)
            and gtid_map(self.dc1.gtid_binlog_pos).get(1) == gtid_map(self.dc2.gtid_binlog_pos).get(1)
        )

    def line(self) -> str:
        return (
            f"dc1 counter={self.dc1.counter} rows={self.dc1.rows} checksum={self.dc1.checksum} "
            f"gtid={self.dc1.gtid_binlog_pos} | dc2 counter={self.dc2.counter} rows={self.dc2.rows} "
            f"checksum={self.dc2.checksum} gtid={self.dc2.gtid_binlog_pos} | "
            f"{'identical' if self.identical else 'DIFFERENT'}"
        )


def compare(lab: DrLab, catch_up_timeout: float = 60.0) -> Comparison:
    """Wait until the channel applied all of dc1, then read both sides."""
    lab.wait_caught_up(catch_up_timeout)
    return Comparison(read_side(lab.dc1), read_side(lab.dc2))


# ---------------------------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.dr", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("up", help="both clusters up and Synced, the channel dc1 -> dc2 running")
    sub.add_parser("down", help="stop the channel and both clusters")
    sub.add_parser("status", help="one line per node and the channel (exit 1 unless all is well)")
    for name, text in (("kill", "SIGKILL node N of a site"), ("start", "restart node N of a site")):
        p = sub.add_parser(name, help=text)
        p.add_argument("site", choices=["dc1", "dc2"])
        p.add_argument("n", type=int)
    p = sub.add_parser("load", help="write on dc1 for SECONDS, then compare both sides")
    p.add_argument("seconds", type=float)
    args = parser.parse_args(argv)

    setup_cli_logging()
    lab = DrLab()
    try:
        if args.cmd == "up":
            r = lab.up()
            print(f"dr lab {'already up' if r['reused'] else 'up'} in {r['seconds']:.1f} s")
            print("\n".join(lab.status_lines()))
        elif args.cmd == "down":
            print(f"dr lab down in {lab.down():.1f} s")
        elif args.cmd == "status":
            print("\n".join(lab.status_lines()))
            return 0 if lab.is_up() else 1
        elif args.cmd == "kill":
            lab.site(args.site).kill(args.n)
            print(f"{args.site} node{args.n} killed")
        elif args.cmd == "start":
            r = lab.site(args.site).start(args.n)
            print(f"{args.site} node{args.n} Synced in {r['seconds']:.1f} s ({r['method']})")
        elif args.cmd == "load":
            with WriteLoad(lab) as load:
                time.sleep(args.seconds)
            print(f"committed {load.committed}, uncertain {load.uncertain}, errors {len(load.errors)}")
            print(compare(lab).line())
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---------------------------------------------------------------------------------------------- inventory


def register_in_inventory(lab: DrLab, *, channel_name: str = "dc1_to_dc2"):
    """The lab in the product's inventory (Django must be set up): clusters dc1 and dc2 with their servers,
    and the channel as the lab runs it now, every node a candidate (node 1 weighs most). Used by the tests'
    fixture and the benchmark. Returns (channel, dc1 servers, dc2 servers)."""
    from apps.dr.models import REPLICA, SOURCE, ChannelCandidate, ReplicationChannel
    from apps.fleet.models import Cluster, Server

    sites = {}
    for name, site, writer in (("dc1", lab.dc1, 100), ("dc2", lab.dc2, 200)):
        cluster = Cluster.objects.create(
            name=name,
            writer_hostgroup=writer,
            reader_hostgroup=writer + 1,
            monitor_user="monitor",
            monitor_password="monitor",
        )
        sites[name] = (
            cluster,
            [Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=node.port) for node in site.nodes],
        )
    (dc1, dc1_servers), (dc2, dc2_servers) = sites["dc1"], sites["dc2"]
    status = lab.channel()
    channel = ReplicationChannel.objects.create(
        name=channel_name,
        source_cluster=dc1,
        replica_cluster=dc2,
        source_server=next(s for s in dc1_servers if s.port == status.source_port),
        replica_server=dc2_servers[status.replica - 1],
        replication_user=REPL_USER,
        replication_password=REPL_PASSWORD,
    )
    for side, servers in ((SOURCE, dc1_servers), (REPLICA, dc2_servers)):
        for i, server in enumerate(servers):
            ChannelCandidate.objects.create(channel=channel, side=side, server=server, weight=100 - 10 * i)
    return channel, dc1_servers, dc2_servers
