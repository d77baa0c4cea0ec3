"""The fault matrix benchmark (issue 21): see lab/bench_faults.py for what a row does.

    bin/bench-faults [--operations switchover,drain,restore,config,repair] [--steps move,save,none]
                     [--pause-seconds 3] [--latency-ms 50] [--retry-seconds 40]

On a Galera lab of its own (a named lab, `--lab-name faults` by default, in var/lab/galera-faults on ports of its
own: no other engineer's test kills its nodes under a row; started if needed and stopped at the end if this run
started it, unless --keep-lab), or with `--lab-name ""` the shared default lab (through the fixtures' lease), a
private redis-server, and the scratch database bin/bench-faults makes. Prints the
machine and the table (fault point x outcome).
"""

import contextlib
import logging
import os
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand

from lab import bench_faults
from lab.fixture_leases import leased
from lab.galera import GaleraLab
from lab.management.commands.bench_operations import machine, private_redis


def _list(text):
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


class Command(BaseCommand):
    help = "A ProxySQL node paused at every step of each operation, then both restarted: the fault matrix."

    def add_arguments(self, parser):
        parser.add_argument(
            "--operations",
            default=",".join(bench_faults.KINDS),
            help=f"comma-separated, of {', '.join(bench_faults.KINDS)} (default: all)",
        )
        parser.add_argument(
            "--steps", default="", help="comma-separated step keys, 'none' for the row without a fault (default: all)"
        )
        parser.add_argument(
            "--pause-seconds",
            type=float,
            default=3.0,
            help="how long the second node stays hung (default 3; the client's read timeout is "
            f"{settings.PROXYSQL_READ_TIMEOUT:g} s)",
        )
        parser.add_argument(
            "--latency-ms",
            type=float,
            default=50.0,
            help="the second node answers this late (default 50), so that a pause lands inside a step",
        )
        parser.add_argument(
            "--lab-name",
            default="faults",
            help="the named Galera lab to use (default faults); '' for the shared default lab",
        )
        parser.add_argument("--keep-lab", action="store_true", help="leave the named lab running at the end")
        parser.add_argument(
            "--retry-seconds",
            type=float,
            default=40.0,
            help="at most this long of the product's retries (every 2 s) per row (default 40)",
        )
        parser.add_argument(
            "--console",
            action="store_true",
            help="the console's own faults instead (issue 39): the worker, Redis, the database, beat "
            "at each step of a switchover, drain, change set and repair run by a real Celery worker",
        )
        parser.add_argument(
            "--faults",
            default=",".join(bench_faults.CONSOLE_FAULTS),
            help=f"--console: comma-separated, of {', '.join(bench_faults.CONSOLE_FAULTS)} (default: all), "
            "two at once joined by '+' (worker+redis), or 'two' for "
            f"{', '.join(bench_faults.TWO_FAULTS)}",
        )
        parser.add_argument(
            "--stale-seconds",
            type=float,
            default=3.0,
            help="--console: the heartbeat window (OPERATIONS_STALE_AFTER_S of the worker and beat; default 3)",
        )
        parser.add_argument(
            "--bound-seconds",
            type=float,
            default=60.0,
            help="--console: a row waits at most this long for its operation to end (default 60)",
        )
        parser.add_argument(
            "--real-proxysql",
            default="",
            metavar="VERSION",
            help="--console: real ProxySQL nodes (../shared/proxysql/VERSION/proxysql, e.g. 2.7.1) "
            "instead of the doubles",
        )

    def handle(
        self,
        operations,
        steps,
        pause_seconds,
        latency_ms,
        retry_seconds,
        lab_name,
        keep_lab,
        console,
        faults,
        stale_seconds,
        bound_seconds,
        real_proxysql,
        **options,
    ):
        if real_proxysql and not console:
            raise SystemExit("--real-proxysql is an option of --console")
        if console:
            return self.console(
                operations, steps, faults, latency_ms, lab_name, keep_lab, stale_seconds, bound_seconds, real_proxysql
            )
        kinds = _list(operations)
        unknown = [k for k in kinds if k not in bench_faults.KINDS]
        if unknown:
            raise SystemExit(f"unknown operation(s): {', '.join(unknown)}; known: {', '.join(bench_faults.KINDS)}")
        for noisy in ("apps.operations", "apps.clients", "lab.proxysql_double"):
            logging.getLogger(noisy).setLevel(logging.CRITICAL)
        out = self.stdout.write
        out(f"machine: {machine()}")
        out(
            f"fault: the second ProxySQL double hung {pause_seconds:g} s (read timeout {settings.PROXYSQL_READ_TIMEOUT:g} s), "
            f"answering {latency_ms:g} ms late; retries every {bench_faults.RETRY_EVERY_S} s for at most "
            f"{retry_seconds:g} s; then each double restarted from its disk"
        )
        started = time.monotonic()
        with self.galera(lab_name, keep_lab) as lab, private_redis():
            out(f"Galera lab: {lab.name or 'the default lab'} on ports {', '.join(str(n.port) for n in lab.nodes)}")
            rows = bench_faults.run(
                kinds,
                _list(steps),
                pause_s=pause_seconds,
                latency_ms=latency_ms,
                retry_s=retry_seconds,
                out=out,
                lab=lab,
            )
        took = time.monotonic() - started
        out("")
        out(bench_faults.table(rows))
        good = sum(1 for r in rows if r.before == "equal" and r.equal and r.agreed and r.hand_sql == "none")
        out("")
        out(
            f"{len(rows)} rows in {took / 60:.1f} min; 'equal, agreed, none' (every layer equal before and after the "
            f"restart): {good} of {len(rows)}"
        )

    def console(self, operations, steps, faults, latency_ms, lab_name, keep_lab, stale_s, bound_s, real_version=""):
        kinds = _list(operations) if operations != ",".join(bench_faults.KINDS) else list(bench_faults.CONSOLE_KINDS)
        unknown = [k for k in kinds if k not in bench_faults.CONSOLE_KINDS]
        try:
            faults = ",".join(bench_faults.console_faults(_list(faults)))
        except ValueError as exc:
            unknown.append(str(exc))
        if unknown:
            raise SystemExit(
                f"unknown: {', '.join(unknown)}; operations {', '.join(bench_faults.CONSOLE_KINDS)}, "
                f"faults {', '.join(bench_faults.CONSOLE_FAULTS)}"
            )
        for noisy in ("apps.operations", "apps.clients", "lab.proxysql_double"):
            logging.getLogger(noisy).setLevel(logging.CRITICAL)
        out = self.stdout.write
        target = stale_s + bench_faults.REAP_TICK_S
        vendor = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
        out(f"machine: {machine()}")
        out(
            f"console: a real Celery worker (concurrency 2) and beat, a redis-server of the benchmark's own, the {vendor} "
            f"database; heartbeat window (OPERATIONS_STALE_AFTER_S) {stale_s:g} s, reaper every "
            f"{bench_faults.REAP_TICK_S} s: target resolution within {target:g} s; the second double answers "
            f"{latency_ms:g} ms late"
        )
        make_node = None
        if real_version:
            binary = Path(settings.BASE_DIR).parent / "shared" / "proxysql" / real_version / "proxysql"
            if not binary.is_file():
                raise SystemExit(f"no real ProxySQL {real_version} at {binary}")
            out(
                f"nodes: two REAL ProxySQL {real_version} processes per row ({binary}), answering at once: a fault "
                f"lands where the step was seen running"
            )
        database_lab = None
        if vendor == "mysql":
            if os.environ.get("BENCH_DATABASE_LAB") != "mariadb_standalone":
                raise SystemExit(
                    "--console on MariaDB stops the server: run it as DB=mariadb bin/bench-faults --console "
                    "(the lab's own MariaDB), not on a DATABASE_URL of yours"
                )
            from lab.mariadb_standalone import MariaDBStandalone

            database_lab = MariaDBStandalone()
            out(
                f"database fault: the console's MariaDB (lab, port {database_lab.port}) stopped (SIGTERM, clean) and "
                f"started again 10 s later"
            )
        if vendor == "sqlite3":
            out(
                "database fault on SQLite: its write lock held 10 s by another process (writers wait, up to the busy "
                "timeout; readers read the last commit): the analogue of a database that does not answer"
            )
        started = time.monotonic()
        workdir = tempfile.mkdtemp(prefix="console-", dir="var/bench")
        out(f"the processes' logs: {workdir}")
        if real_version:
            make_node = bench_faults.real_node_maker(binary, os.path.join(workdir, "real-proxysql"))
        with self.galera(lab_name, keep_lab) as lab:
            processes = bench_faults.ConsoleProcesses(workdir, stale_s, database_lab=database_lab)
            processes.up()
            try:
                out(f"Galera lab: {lab.name or 'the default lab'} on ports {', '.join(str(n.port) for n in lab.nodes)}")
                rows = bench_faults.run_console(
                    processes,
                    kinds,
                    _list(steps),
                    _list(faults),
                    latency_ms=latency_ms,
                    bound_s=bound_s,
                    out=out,
                    lab=lab,
                    make_node=make_node,
                )
            finally:
                processes.down()
        took = time.monotonic() - started
        out("")
        out(f"machine at the end: {machine()}")
        out(bench_faults.console_table(rows))
        good = sum(1 for r in rows if r.as_targeted(target))
        out("")
        out(
            f"{len(rows)} rows in {took / 60:.1f} min; as targeted (ended, layers equal, intent equal, writer agreed, "
            f"no hand SQL, resolved within {target:g} s): {good} of {len(rows)}"
        )

    @contextlib.contextmanager
    def galera(self, name, keep):
        if not name:
            with leased(GaleraLab()) as lab:
                yield lab
            return
        lab = GaleraLab(name=name)
        started = not lab.up()["was_running"]
        try:
            yield lab
        finally:
            if started and not keep:
                lab.down()
