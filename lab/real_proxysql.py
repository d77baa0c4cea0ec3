"""A REAL ProxySQL process started by the lab's hand-run tools (bin/bench-real-pair, lab/capture_cluster_sync.py)
and by the test suite's real tier (lab/fixtures_real_proxysql.py): its own datadir, config file and process group, stopped at the end.

`peers`: the admin ports of a ProxySQL Cluster it belongs to (itself included). The config then lists them in
proxysql_servers and sets admin-cluster_username/password (a second admin credential, as ProxySQL requires for
the peers' sync connections); every other cluster setting is ProxySQL's default (diffs_before_sync 3, save_to_disk
true, check interval 1 s).

3.0 also opens two PostgreSQL listeners, by default on 0.0.0.0:6132 (admin-pgsql_ifaces) and 0.0.0.0:6133
(pgsql-interfaces): two nodes on one host would contend for them (and for whatever else holds those ports). A node
of 3.0 or later (its `proxysql --version`) therefore has its own on 127.0.0.1, its admin port + 2 and + 3 (16134 and
16135 for admin 16132). Older versions get no such setting: a variable they do not know would be inserted into
global_variables from the file, then deleted with a warning at the first LOAD ADMIN VARIABLES."""

import re
import shutil
import subprocess
import time
from pathlib import Path

import MySQLdb

from lab import demo
from lab.demo_processes import stop_group

CLUSTER_USER = "cluster"  # the peers' sync credential (admin-cluster_username/password)
CONFIG = """datadir="{datadir}"
admin_variables=
{{
    admin_credentials="admin:admin{cluster_credential}"
    mysql_ifaces="127.0.0.1:{admin_port}"{pgsql_admin}{cluster_variables}
}}
mysql_variables=
{{
    threads=2
    interfaces="127.0.0.1:{client_port}"
    monitor_username="monitor"
    monitor_password="monitor"
    server_version="10.11.0"
}}
{pgsql_variables}{proxysql_servers}"""


def config_variables(client_port):
    """The mysql- variables CONFIG sets, as global_variables names them (a double started with them answers like
    this node: lab/conformance.py)."""
    return {
        "mysql-threads": "2",
        "mysql-interfaces": f"127.0.0.1:{client_port}",
        "mysql-monitor_username": "monitor",
        "mysql-monitor_password": "monitor",
        "mysql-server_version": "10.11.0",
    }


def binary_version(binary):
    """(major, minor) of a ProxySQL binary from `proxysql --version` ("ProxySQL version 3.0.1-39-g596d5ba, ..."),
    None when it says no version."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    m = re.search(r"ProxySQL version (\d+)\.(\d+)", done.stdout + done.stderr)
    return (int(m.group(1)), int(m.group(2))) if m else None


def config_text(datadir, admin_port, client_port, peers=None, version=None):
    """The config file of one node; with `peers` ({comment: admin port}) a ProxySQL Cluster member; with `version`
    (major, minor) 3.0 or later, its PostgreSQL listeners on 127.0.0.1, admin port + 2 (admin) and + 3 (clients)."""
    pgsql = version is not None and version >= (3, 0)
    parts = {
        "datadir": datadir,
        "admin_port": admin_port,
        "client_port": client_port,
        "pgsql_admin": f'\n    pgsql_ifaces="127.0.0.1:{admin_port + 2}"' if pgsql else "",
        "pgsql_variables": f'pgsql_variables=\n{{\n    interfaces="127.0.0.1:{admin_port + 3}"\n}}\n' if pgsql else "",
    }
    if not peers:
        return CONFIG.format(**parts, cluster_credential="", cluster_variables="", proxysql_servers="")
    rows = ",\n".join(
        f'    {{ hostname="127.0.0.1", port={port}, weight=0, comment="{name}" }}' for name, port in peers.items()
    )
    return CONFIG.format(
        **parts,
        cluster_credential=f";{CLUSTER_USER}:{CLUSTER_USER}",
        cluster_variables=f'\n    cluster_username="{CLUSTER_USER}"\n    cluster_password="{CLUSTER_USER}"',
        proxysql_servers=f"proxysql_servers=\n(\n{rows}\n)\n",
    )


def connect(port, timeout=1):
    return MySQLdb.connect(
        host="127.0.0.1", port=port, user="admin", passwd="admin", connect_timeout=timeout, read_timeout=5
    )


def fetch(conn, sql):
    cur = conn.cursor()
    cur.execute(sql)
    return [list(r) for r in cur.fetchall()]


INIT_CRASH_RESTARTS = 3  # starts again after a crash in ProxySQL's own start-up before giving up


class RealProxySQL:
    """One ProxySQL process started here (its own process group, its own datadir), stopped at the end."""

    def __init__(self, binary, datadir, admin_port, client_port, *, peers=None, name=None):
        self.binary, self.admin_port, self.client_port = binary, admin_port, client_port
        self.datadir, self.peers, self.name = Path(datadir), peers, name or str(admin_port)
        self.proc = None
        self.conn = None  # a connection kept by sql(); admin() opens one per call
        self.init_crashes = 0  # starts that crashed in ProxySQL's own start-up and were started again (start())

    # As the doubles name them (conftest.adopt_double, demo.admin_sql callers): the admin endpoint and credentials.
    user = password = "admin"

    @property
    def port(self):
        return self.admin_port

    def start(self, fresh=True):
        """fresh: an empty datadir and a new config file (ProxySQL, finding no proxysql.db, reads the file). Otherwise
        (restart) the same datadir and config as they are: never --initial (nor --reload), so ProxySQL loads its
        disk layer (proxysql.db) into memory and runtime, as an operator's restart does. Returns its version."""
        cnf = self.datadir / "proxysql.cnf"
        if fresh:
            shutil.rmtree(self.datadir, ignore_errors=True)
            self.datadir.mkdir(parents=True)
            cnf.write_text(
                config_text(self.datadir, self.admin_port, self.client_port, self.peers, binary_version(self.binary))
            )
        log_path = self.datadir / "stdout.log"
        for attempt in range(1, INIT_CRASH_RESTARTS + 2):
            log_from = log_path.stat().st_size if log_path.exists() and not (fresh and attempt == 1) else 0
            log = open(log_path, "wb" if fresh and attempt == 1 else "ab")
            self.proc = subprocess.Popen(
                [self.binary, "-f", "--no-version-check", "-c", str(cnf), "-D", str(self.datadir)],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            deadline = time.monotonic() + 30
            while True:
                try:
                    return self.admin("SELECT @@version")[0][0]
                except MySQLdb.Error:
                    if (
                        self.proc.poll() is not None
                        and attempt <= INIT_CRASH_RESTARTS
                        and self._crashed_in_init(log_path, log_from)
                    ):
                        # 2.7.1 can segfault at start in MySQL_HostGroups_Manager::commit (ev_async_send from
                        # init_mysql_servers, sysown/proxysql#3233): its angel or systemd's Restart= starts it again,
                        # and so does the lab, a bounded number of times, each counted in `init_crashes` for the
                        # tests to report (a CI run saw it crash twice in a row).
                        self.init_crashes += 1
                        break
                    if self.proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(
                            f"ProxySQL {self.name} (admin port {self.admin_port}) did not start; see {log_path}"
                        ) from None
                    time.sleep(0.05)

    @staticmethod
    def _crashed_in_init(log_path, log_from):
        """The start's own log shows ProxySQL's crash handler inside its start-up (init_mysql_servers)."""
        with open(log_path, "rb") as f:
            f.seek(log_from)
            text = f.read().decode("utf-8", "replace")
        return "Error: signal 11" in text and "init_mysql_servers" in text

    def admin(self, *statements):
        """Each statement on a new connection's session; the last one's rows (tuples)."""
        return demo.admin_sql(self.admin_port, *statements)

    def sql(self, *statements):
        """As admin(), on a connection kept between calls (a sampler's, a tight loop's)."""
        if self.conn is None:
            self.conn = connect(self.admin_port)
        out = []
        for s in statements:
            out = fetch(self.conn, s)
        return out

    def checksum(self, name):
        """(version, epoch, checksum) of one module in runtime_checksums_values."""
        return self.sql(f"SELECT version, epoch, checksum FROM runtime_checksums_values WHERE name='{name}'")[0]

    def stop(self):
        """SIGTERM to its process group (ProxySQL 2.1+: its fast shutdown), SIGKILL after 10 s. Says which."""
        if self.conn is not None:
            try:
                self.conn.close()
            except MySQLdb.Error:
                pass
            self.conn = None
        if self.proc and self.proc.poll() is None:
            how = stop_group(self.proc.pid, grace_s=10)
            return f"{how}, exit {self.proc.wait()}"
        return "not running"

    def restart(self):
        """Stop the process, start it again from the same datadir and config without --initial (it loads its disk);
        returns (how it stopped, seconds until the admin answered again)."""
        pid = self.proc.pid if self.proc else None
        how = self.stop()
        began = time.monotonic()
        self.start(fresh=False)
        return f"pid {pid} {how}; new pid {self.proc.pid}", time.monotonic() - began
