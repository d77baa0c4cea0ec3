"""The local MariaDB labs against real servers (no mocks): the 3-node Galera cluster and the standalone
server that Django uses when the suite runs on MariaDB."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from contextlib import closing

import pytest

from lab._mariadb_common import LAB_VAR, REPO_ROOT, LabError, processes_under
from lab.galera import GaleraLab
from lab.mariadb_standalone import MariaDBStandalone
from lab.replication import ReplicationLab

# The root conftest normally loads this plugin; naming it here too keeps `pytest lab/tests` working alone.
pytest_plugins = ["lab.fixtures_galera"]


def wsrep(conn) -> dict[str, str]:
    with conn.cursor() as cur:
        cur.execute(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_local_state','wsrep_local_state_comment',"
            "'wsrep_cluster_status','wsrep_cluster_size','wsrep_ready')"
        )
        return {k.lower(): v for k, v in cur.fetchall()}


def test_three_nodes_synced_through_monitor_user(galera_lab: GaleraLab):
    for n in (1, 2, 3):
        with closing(galera_lab.monitor_connection(n)) as conn:
            s = wsrep(conn)
        assert s["wsrep_local_state"] == "4", (n, s)
        assert s["wsrep_local_state_comment"] == "Synced"
        assert s["wsrep_cluster_status"] == "Primary"
        assert s["wsrep_cluster_size"] == "3"
        assert s["wsrep_ready"] == "ON"


def test_up_again_reuses_the_running_lab_fast(galera_lab: GaleraLab):
    t0 = time.monotonic()
    result = galera_lab.up()
    assert result["reused"] is True
    assert time.monotonic() - t0 < 1.0


def test_status_cli_reports_three_healthy_nodes(galera_lab: GaleraLab):
    out = subprocess.run(
        [sys.executable, "-m", "lab.galera", "status"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=30
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3
    assert all("Synced" in line and "size=3" in line and "recv_queue=0" in line for line in lines)


def test_write_on_node1_is_visible_on_node3(galera_lab: GaleraLab):
    token = uuid.uuid4().hex
    with closing(galera_lab.app_connection(1)) as c1:
        with c1.cursor() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS lab_smoke (id INT AUTO_INCREMENT PRIMARY KEY, token VARCHAR(64) NOT NULL)"
            )
            cur.execute("INSERT INTO lab_smoke (token) VALUES (%s)", (token,))
    with closing(galera_lab.app_connection(3)) as c3:
        with c3.cursor() as cur:
            cur.execute("SET SESSION wsrep_sync_wait = 1")  # causal read: wait for the apply queue
            cur.execute("SELECT COUNT(*) FROM lab_smoke WHERE token = %s", (token,))
            assert cur.fetchone()[0] == 1


def test_desync_node2_shows_donor_desynced_then_synced(galera_healthy: GaleraLab):
    lab = galera_healthy
    with closing(lab.monitor_connection(2)) as conn:
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL wsrep_desync = ON")
        s = wsrep(conn)
        assert (s["wsrep_local_state"], s["wsrep_local_state_comment"]) == ("2", "Donor/Desynced")
        assert s["wsrep_cluster_status"] == "Primary"
        with conn.cursor() as cur:
            cur.execute("SET GLOBAL wsrep_desync = OFF")
        deadline = time.monotonic() + 10
        while wsrep(conn)["wsrep_local_state"] != "4":
            assert time.monotonic() < deadline, "node2 not Synced 10 s after wsrep_desync=OFF"
            time.sleep(0.05)
        assert wsrep(conn)["wsrep_local_state_comment"] == "Synced"


def test_kill_node3_then_start_rejoins_by_ist(galera_healthy: GaleraLab):
    lab = galera_healthy
    with closing(lab.app_connection(1)) as c1, c1.cursor() as cur:
        cur.execute(
            "CREATE TABLE IF NOT EXISTS lab_smoke (id INT AUTO_INCREMENT PRIMARY KEY, token VARCHAR(64) NOT NULL)"
        )
    lab.kill(3)
    assert not lab.is_running(3)
    # A crashed member is only evicted after evs.suspect_timeout (5 s): allow that plus margin.
    waited = lab.wait_cluster_size(1, 2, timeout=20)
    lab.wait_cluster_size(2, 2, timeout=5)
    assert waited < 15

    token = uuid.uuid4().hex
    with closing(lab.app_connection(1)) as c1, c1.cursor() as cur:
        cur.executemany("INSERT INTO lab_smoke (token) VALUES (%s)", [(token,)] * 50)

    result = lab.start(3)
    assert result["method"] == "IST", result
    assert result["seconds"] < 60
    st = lab.node_status(3)
    assert st.synced and st.cluster_size == 3, st.line()
    with closing(lab.app_connection(3)) as c3, c3.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM lab_smoke WHERE token = %s", (token,))
        assert cur.fetchone()[0] == 50


def test_heal_resets_desync_read_only_and_reject_queries(galera_healthy: GaleraLab):
    lab = galera_healthy
    with closing(lab.monitor_connection(1)) as conn, conn.cursor() as cur:
        # The monitor user may flip every switch the operations need.
        cur.execute("SET GLOBAL read_only = ON")
        cur.execute("SET GLOBAL wsrep_reject_queries = ALL")
        cur.execute("SET GLOBAL wsrep_desync = ON")
    st = lab.node_status(1)
    assert (st.read_only, st.reject_queries, st.desync, st.state) == ("ON", "ALL", "ON", 2)
    assert lab.heal() is True
    assert lab.is_healthy()
    assert lab.heal() is False  # already healthy: nothing to do


def test_named_labs_get_their_own_slot_ports_and_size():
    """No server started: where named labs would listen. Each gets its own slot, kept in its dir; no port
    of one is a port of another lab, of any kind; a size that contradicts the recorded one is refused."""
    names = [f"slots{os.getpid()}a", f"slots{os.getpid()}b"]
    try:
        a, b = GaleraLab(name=names[0], nodes=2), GaleraLab(name=names[1])
        assert a.slot != b.slot and 0 not in (a.slot, b.slot)
        assert (len(a.nodes), len(b.nodes)) == (2, 3)
        again = GaleraLab(name=names[0])
        assert (again.slot, again.ports, len(again.nodes)) == (a.slot, a.ports, 2)
        assert a.cluster_name == f"lab_galera_{names[0]}" and GaleraLab().cluster_name == "lab_galera"
        labs = [
            a,
            b,
            GaleraLab(),
            ReplicationLab(),
            ReplicationLab(name=names[0]),
            MariaDBStandalone(),
            MariaDBStandalone(name=names[0]),
        ]
        seen: dict[int, str] = {}
        for lab in labs:
            for node in lab.nodes:
                for what, port in node.ports():
                    where = f"{lab.title} {node.name} {what}"
                    assert port not in seen, f"{where} and {seen[port]} both on {port}"
                    seen[port] = where
        with pytest.raises(LabError, match="has 2 nodes"):
            GaleraLab(name=names[0], nodes=3)
    finally:
        for kind in ("galera", "replication", "django-db"):
            for name in names:
                shutil.rmtree(LAB_VAR / f"{kind}-{name}", ignore_errors=True)


def test_a_second_cluster_runs_beside_the_first_on_its_own_ports(galera_lab: GaleraLab):
    """Two Galera clusters on one machine (shared ProxySQL nodes, DR): `bin/lab galera --name X --nodes 2 up`
    starts a second, smaller cluster in its own dir on its own ports; both are Primary with their own sizes."""
    name = f"t{os.getpid()}"
    second = None
    try:
        out = subprocess.run(
            [str(REPO_ROOT / "bin" / "lab"), "galera", "--name", name, "--nodes", "2", "up"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        second = GaleraLab(name=name)  # finds its slot and size in its dir
        assert second.base_dir == LAB_VAR / f"galera-{name}" and len(second.nodes) == 2
        first_ports = {p for node in galera_lab.nodes for _, p in node.ports()}
        second_ports = {p for node in second.nodes for _, p in node.ports()}
        assert not first_ports & second_ports, (first_ports, second_ports)

        def view(lab, n):
            with closing(lab.monitor_connection(n)) as conn, conn.cursor() as cur:
                cur.execute(
                    "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_status',"
                    "'wsrep_cluster_size','wsrep_cluster_state_uuid','wsrep_local_state_comment')"
                )
                return {k.lower(): v for k, v in cur.fetchall()}

        first_views = [view(galera_lab, n) for n in (1, 2, 3)]
        second_views = [view(second, n) for n in (1, 2)]
        assert all(
            (v["wsrep_cluster_status"], v["wsrep_cluster_size"], v["wsrep_local_state_comment"])
            == ("Primary", "3", "Synced")
            for v in first_views
        ), first_views
        assert all(
            (v["wsrep_cluster_status"], v["wsrep_cluster_size"], v["wsrep_local_state_comment"])
            == ("Primary", "2", "Synced")
            for v in second_views
        ), second_views
        # Two clusters, not one: each has its own history.
        assert len({v["wsrep_cluster_state_uuid"] for v in first_views}) == 1
        assert {v["wsrep_cluster_state_uuid"] for v in second_views}.isdisjoint(
            {v["wsrep_cluster_state_uuid"] for v in first_views}
        )
        assert second.is_healthy() and galera_lab.is_healthy()

        second.down()
        assert not processes_under(second.base_dir)
        assert galera_lab.is_healthy()  # the first cluster did not notice
    finally:
        if second is not None:
            second.down()
        else:
            subprocess.run(
                [str(REPO_ROOT / "bin" / "lab"), "galera", "--name", name, "down"],
                cwd=REPO_ROOT,
                capture_output=True,
                timeout=120,
            )
        shutil.rmtree(LAB_VAR / f"galera-{name}", ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_standalone_mariadb_up_connect_down():
    """A private instance (own dir and port), so a shared django-db on 3320 is never disturbed."""
    base = LAB_VAR / f"test-django-db-{os.getpid()}"
    db = MariaDBStandalone(base_dir=base, port=_free_port())
    try:
        first = db.up()
        assert first["reused"] is False
        assert db.database_url == f"mysql://controlplane:controlplane@127.0.0.1:{db.port}/controlplane"
        with closing(db.connection()) as conn, conn.cursor() as cur:
            cur.execute("SELECT DATABASE(), @@character_set_database")
            assert cur.fetchone() == ("controlplane", "utf8mb4")
            cur.execute("CREATE DATABASE test_controlplane")  # what Django's test runner does
            cur.execute("CREATE TABLE test_controlplane.t (id INT PRIMARY KEY)")
            cur.execute("DROP DATABASE test_controlplane")
        again = db.up()
        assert again["reused"] is True and again["seconds"] < 1.0
        pid = db.pid()
        db.down()
        assert not db.is_running()
        assert not processes_under(base)
        assert pid is not None
    finally:
        db.down()
        shutil.rmtree(base, ignore_errors=True)


def test_a_labs_processes_are_not_those_of_a_lab_whose_dir_name_starts_the_same(tmp_path):
    """`bin/lab galera down` (var/lab/galera) must leave a named lab's nodes (var/lab/galera-NAME) alone: a benchmark's
    named lab lost its three nodes at once when a test suite next to it stopped the default lab."""
    named_node = tmp_path / "galera-pause" / "node1"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "mariadbd", f"--datadir={named_node}"]
    )
    try:
        deadline = time.monotonic() + 5
        while proc.pid not in {p.pid for p in processes_under(tmp_path / "galera-pause")}:
            assert time.monotonic() < deadline, "the stand-in process never showed its command line"
            time.sleep(0.05)
        assert proc.pid not in {p.pid for p in processes_under(tmp_path / "galera")}
    finally:
        proc.kill()
        proc.wait()
