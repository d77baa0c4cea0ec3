"""The doubles served by a host process (lab/proxysql_double/host.py, TEST_DOUBLES=process): the same answers as the
in-process double through the same API, and a host that never outlives its test process."""

import subprocess
import sys
import time
from pathlib import Path

import MySQLdb
import pytest

from lab.proxysql_double import ProxySQLDouble
from lab.proxysql_double.host import ProcessDouble, host

ROOT = Path(__file__).resolve().parents[2]


def wire_rows(double, sql):
    conn = MySQLdb.connect(**double.connect_kwargs())
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return cur.fetchall()
    finally:
        conn.close()


def drive(double):
    """What tests do to a double, and what they read back."""
    double.query("INSERT INTO mysql_servers (hostgroup_id, hostname, port) VALUES (100, '127.0.0.1', 3311)")
    double.query("LOAD MYSQL SERVERS TO RUNTIME")
    double.traffic.set_sessions(hostgroup=100, count=3, pinned_reason="auto_increment")
    double.traffic.set_global("Slow_queries", 42)
    wire = wire_rows(double, "SELECT hostgroup_id, hostname, port FROM runtime_mysql_servers")
    slow = wire_rows(double, "SELECT variable_value FROM stats_mysql_global WHERE variable_name='Slow_queries'")
    statements = double.statements()
    logged = [e["sql"] for e in double.engine.log]
    with pytest.raises(RuntimeError, match="syntax error"):
        double.query("SELEC 1")
    double.clear_statements()
    return {
        "wire": wire,
        "slow": slow,
        "sessions": len(double.traffic.processlist_rows(False)),
        "statements": statements,
        "log_is_statements": logged == statements,
        "mode": double.engine.mode,
        "cleared": double.statements(),
        "status_port": double.status()["endpoint"]["port"] == double.port,
    }


def test_a_double_in_the_host_answers_as_the_in_process_one():
    with ProxySQLDouble() as here, ProcessDouble() as there:
        assert host().process.pid != 0 and there.port != here.port
        assert drive(there) == drive(here)


def test_every_accessor_of_the_in_process_double_is_forwarded_by_the_host_one():
    """One list (ProxySQLDouble.ACCESSORS) says what the host forwards: a public method added to the in-process double
    without joining it fails here."""
    public = {n for n in dir(ProxySQLDouble) if not n.startswith("_") and n != "ACCESSORS"}
    assert public - set(dir(ProcessDouble)) == set()
    assert all(
        getattr(ProcessDouble, n).__doc__ == getattr(ProxySQLDouble, n).__doc__ for n in ProxySQLDouble.ACCESSORS
    )


def test_modes_and_restart_go_through_the_host():
    with ProcessDouble() as d:
        d.set_mode("refuse")
        with pytest.raises(MySQLdb.OperationalError):
            MySQLdb.connect(**d.connect_kwargs(connect_timeout=2))
        d.set_mode("normal")
        d.query("INSERT INTO mysql_servers (hostgroup_id, hostname, port) VALUES (100, '10.0.0.1', 3306)")
        d.restart()  # memory is lost, as a ProxySQL restart without SAVE
        assert d.query("SELECT COUNT(*) FROM mysql_servers")[1] == [("0",)]


def test_the_host_exits_when_its_test_process_is_killed():
    script = (
        "import sys, time\n"
        "from lab.proxysql_double.host import ProcessDouble, host\n"
        "ProcessDouble().start()\n"
        "print(host().process.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        host_pid = int(parent.stdout.readline())
        assert alive(host_pid)
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 5
        while alive(host_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(host_pid), f"host {host_pid} outlived its killed parent"
    finally:
        parent.kill()


def alive(pid):
    """Running (an exited process waiting for init to reap it is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
