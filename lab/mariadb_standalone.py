"""A plain (non-Galera) MariaDB on 127.0.0.1 for Django's own database when the tests run "on MariaDB".

CLI::

    python -m lab.mariadb_standalone up|down|status     (or: bin/lab django-db up|down|status)

Python::

    db = MariaDBStandalone()       # base dir <repo>/var/lab/django-db, port 3320
    db.up()                        # idempotent: reuses a running server at once
    db.database_url                # mysql://controlplane:controlplane@127.0.0.1:3320/controlplane
    db.down()                      # clean stop by pid

It serves database `controlplane` (utf8mb4) to user `controlplane`/`controlplane`, who has all
privileges on `controlplane` and on any `test_controlplane%` database (Django's test database, also the
per-worker clones), including creating and dropping them. Root uses unix_socket auth on the socket.

Environment overrides: LAB_DJANGO_DB_PORT (3320), LAB_DJANGO_DB_DIR (<repo>/var/lab/django-db).
"""

from __future__ import annotations

import argparse
import sys
import time
from contextlib import closing
from pathlib import Path

from lab._mariadb_common import LabError, connect_tcp, execute_all, mib, setup_cli_logging
from lab.mariadb_lab import LabNode, MariaDBLab, env_int

DB_NAME = DB_USER = DB_PASSWORD = "controlplane"


class MariaDBStandalone(MariaDBLab):
    """One plain MariaDB server owned by this repo's lab (tracked by pid, never by name): a one-node
    MariaDBLab whose node lives in the base dir itself."""

    kind = "django-db"
    module = "mariadb_standalone"
    env_prefix = "LAB_DJANGO_DB"
    default_port_base = 3319  # + node 1: 3320
    default_nodes = 1
    collation = "utf8mb4_unicode_ci"
    app_user = app_password = app_schema = DB_NAME

    def __init__(self, base_dir: Path | str | None = None, port: int | None = None, name: str | None = None):
        if port is None and not name:
            port = env_int("LAB_DJANGO_DB_PORT")
        super().__init__(base_dir=base_dir, ports=[port] if port else None, name=name, nodes=1)

    def _node_dir(self, n: int) -> Path:
        return self.base_dir

    def _socket_key(self, n: int) -> str:
        return self.kind + (f"-{self.name}" if self.name else "")

    def _cnf_extra(self, node: LabNode) -> str:
        return "skip-log-bin\n"

    # ------------------------------------------------------------------ layout (the one node's)

    def _the_node(attr: str):  # noqa: N805 (a helper of the class body)
        return property(lambda self: getattr(self.nodes[0], attr), doc=f"the server's {attr}")

    host, port, socket = _the_node("host"), _the_node("port"), _the_node("socket")
    datadir, tmpdir, cnf, error_log = (
        _the_node("datadir"),
        _the_node("tmpdir"),
        _the_node("cnf"),
        _the_node("error_log"),
    )
    pid_file, lab_pid_file = _the_node("pid_file"), _the_node("lab_pid_file")
    del _the_node

    @property
    def database_url(self) -> str:
        return f"mysql://{DB_USER}:{DB_PASSWORD}@{self.host}:{self.port}/{DB_NAME}"

    # ------------------------------------------------------------------ process

    def pid(self, n: int = 1) -> int | None:
        return super().pid(n)

    def is_running(self, n: int = 1) -> bool:
        return super().is_running(n)

    def root_connection(self, n: int = 1, timeout: int = 2, read_timeout: int = 30):
        return super().root_connection(n, timeout=timeout, read_timeout=read_timeout)

    def connection(self, database: str | None = DB_NAME, timeout: int = 2):
        """A connection as the `controlplane` user over TCP."""
        return connect_tcp(self.host, self.port, DB_USER, DB_PASSWORD, timeout=timeout, db=database)

    def _accepts_app_user(self) -> bool:
        import MySQLdb

        try:
            with closing(self.connection(timeout=1)) as conn:
                conn.ping()
            return True
        except MySQLdb.Error:
            return False

    # ------------------------------------------------------------------ operations

    def _ensure_database(self) -> None:
        with closing(self.root_connection()) as conn:
            execute_all(
                conn,
                [
                    "DROP USER IF EXISTS ''@'localhost'",
                    f"CREATE DATABASE IF NOT EXISTS `{DB_NAME}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
                    f"CREATE USER IF NOT EXISTS '{DB_USER}'@'%' IDENTIFIED BY '{DB_PASSWORD}'",
                    f"GRANT ALL PRIVILEGES ON `{DB_NAME}`.* TO '{DB_USER}'@'%'",
                    f"GRANT ALL PRIVILEGES ON `test\\_{DB_NAME}%`.* TO '{DB_USER}'@'%'",
                ],
            )

    def up(self, timeout: float = 60.0) -> dict:
        """Start the server (initialising an empty or half-made datadir) unless it already runs; make
        sure the database and user exist. Returns {'reused', 'seconds', 'url'}."""
        t0 = time.monotonic()
        with self._lock():
            if self.is_running() and self._accepts_app_user():
                dt = time.monotonic() - t0
                self.log.info("django-db: already running (pid %s); reusing (%.2f s)", self.pid(), dt)
                return {"reused": True, "was_running": [1], "seconds": dt, "url": self.database_url}
            was_running = self.is_running()
            if not was_running:
                self._kill_leftovers()
                if not self._initialised(self.datadir):
                    self._wipe(self.nodes[0])
                    self._install_node(self.nodes[0])
            if was_running:
                self._wait_ready(1, timeout)
            else:
                self._start_nodes([1], timeout)
            self._ensure_database()
            dt = time.monotonic() - t0
            self.log.info("django-db: up in %.1f s at %s", dt, self.database_url)
            return {"reused": False, "was_running": [1] if was_running else [], "seconds": dt, "url": self.database_url}

    def status_line(self) -> str:
        proc = self._process(1)
        if proc is None:
            return f"django-db port={self.port} pid=- alive=no"
        try:
            rss = proc.memory_info().rss
        except Exception:
            rss = None
        ok = "yes" if self._accepts_app_user() else "no"
        return (
            f"django-db port={self.port} pid={proc.pid} alive=yes accepts_controlplane={ok} rss={mib(rss)} "
            f"url={self.database_url}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.mariadb_standalone", description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-dir", help="directory (default var/lab/django-db or $LAB_DJANGO_DB_DIR)")
    parser.add_argument("--port", type=int, help="client port (default 3320 or $LAB_DJANGO_DB_PORT)")
    parser.add_argument("--name", help="another server, in var/lab/django-db-NAME on its own port")
    parser.add_argument("cmd", choices=["up", "down", "status"])
    args = parser.parse_args(argv)
    setup_cli_logging()
    try:
        db = MariaDBStandalone(base_dir=args.base_dir, port=args.port, name=args.name)
        if args.cmd == "up":
            r = db.up()
            print(f"django-db {'reused' if r['reused'] else 'up'} in {r['seconds']:.2f} s")
            print(f"DATABASE_URL={db.database_url}")
        elif args.cmd == "down":
            print(f"django-db down in {db.down():.1f} s")
        else:
            print(db.status_line())
            return 0 if db.is_running() else 1
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
