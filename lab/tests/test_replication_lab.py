"""The async-replication lab against real servers (no mocks): one MariaDB primary, two GTID replicas.

The switchover test is the seed's case done by hand with plain SQL through the monitor user, which is
what the product will send; the lab's heal() then has to bring the original topology back.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from contextlib import closing

import MySQLdb
import pytest

from lab._mariadb_common import LAB_VAR, REPO_ROOT, processes_under
from lab.replication import MONITOR_PRIVILEGES, ReplicationLab, gtid_reached, parse_gtid_pos

# The root conftest may load this plugin too; naming it here keeps `pytest lab/tests` working alone.
pytest_plugins = ["lab.fixtures_replication"]


def one(conn, sql, args=None):
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return cur.fetchone()


def run(conn, *statements):
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)


def slave_status(conn) -> dict | None:
    with conn.cursor() as cur:
        cur.execute("SHOW SLAVE STATUS")
        row = cur.fetchone()
        if row is None:
            return None
        return dict(zip([d[0] for d in cur.description], row))


def table(lab: ReplicationLab) -> None:
    with closing(lab.app_connection(1)) as conn:
        run(
            conn,
            "CREATE TABLE IF NOT EXISTS lab_repl (id INT AUTO_INCREMENT PRIMARY KEY, "
            "token VARCHAR(64) NOT NULL, origin VARCHAR(16) NOT NULL DEFAULT '')",
        )


def count(lab: ReplicationLab, n: int, token: str) -> int:
    with closing(lab.root_connection(n)) as conn:
        return one(conn, "SELECT COUNT(*) FROM app.lab_repl WHERE token = %s", (token,))[0]


def change_master(lab: ReplicationLab, primary: int) -> str:
    p = lab.node(primary)
    return (
        f"CHANGE MASTER TO MASTER_HOST='{p.host}', MASTER_PORT={p.port}, MASTER_USER='repl', "
        f"MASTER_PASSWORD='repl', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1"
    )


def test_topology_through_monitor_user(replication_lab: ReplicationLab):
    lab = replication_lab
    server_ids = set()
    for n in (1, 2, 3):
        with closing(lab.monitor_connection(n)) as conn:
            ro, sid, strict, lsu, log_bin = one(
                conn, "SELECT @@read_only, @@server_id, @@gtid_strict_mode, @@log_slave_updates, @@log_bin"
            )
            server_ids.add(sid)
            assert (strict, lsu, log_bin) == (1, 1, 1), n
            st = slave_status(conn)
            if n == 1:
                assert ro == 0 and st is None
                with conn.cursor() as cur:
                    cur.execute("SHOW SLAVE HOSTS")  # REPLICATION MASTER ADMIN: the primary lists its replicas
                    hosts = sorted((r[1], r[2]) for r in cur.fetchall())
                assert hosts == [("127.0.0.1", lab.node(2).port), ("127.0.0.1", lab.node(3).port)]
            else:
                assert ro == 1
                assert (st["Master_Host"], st["Master_Port"]) == ("127.0.0.1", lab.node(1).port)
                assert (st["Slave_IO_Running"], st["Slave_SQL_Running"]) == ("Yes", "Yes")
                assert st["Using_Gtid"] == "Slave_Pos" and st["Seconds_Behind_Master"] == 0
    assert server_ids == {1, 2, 3}
    with closing(lab.monitor_connection(1)) as conn, conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        grants = " ".join(r[0] for r in cur.fetchall())
    assert "SUPER" not in grants
    assert all(p.strip() in grants for p in MONITOR_PRIVILEGES.split(","))


def test_replicas_replicate_a_write_with_gtid(replication_lab: ReplicationLab):
    lab = replication_lab
    table(lab)
    token = uuid.uuid4().hex
    with closing(lab.app_connection(1)) as conn:
        run(conn, f"INSERT INTO lab_repl (token, origin) VALUES ('{token}', 'node1')")
        gtid = one(conn, "SELECT @@last_gtid")[0]
    domain, server, seq = (int(x) for x in gtid.split("-"))
    assert (domain, server) == (0, 1)
    for n in (2, 3):
        assert lab.wait_caught_up(n, timeout=10) < 10
        with closing(lab.monitor_connection(n)) as conn:
            slave_pos, binlog_pos = one(conn, "SELECT @@gtid_slave_pos, @@gtid_binlog_pos")
        assert gtid_reached(slave_pos, gtid)
        assert parse_gtid_pos(binlog_pos)[0][0] == 1  # log_slave_updates: logged with the origin's server_id
        with closing(lab.app_connection(n)) as conn:
            assert one(conn, "SELECT origin FROM lab_repl WHERE token = %s", (token,)) == ("node1",)


def test_replicas_are_read_only_for_the_app(replication_lab: ReplicationLab):
    lab = replication_lab
    table(lab)
    for n in (2, 3):
        with closing(lab.app_connection(n)) as conn:
            with pytest.raises(MySQLdb.OperationalError) as exc:
                run(conn, "INSERT INTO lab_repl (token) VALUES ('must fail')")
            assert exc.value.args[0] == 1290  # --read-only
    with closing(lab.app_connection(1)) as conn:
        run(conn, "INSERT INTO lab_repl (token) VALUES ('primary takes writes')")


def test_up_again_reuses_the_running_lab_fast(replication_lab: ReplicationLab):
    # A test before this one may have just written to the primary: the replicas catch up asynchronously, and
    # up() reuses a lab only when they have (zero lag, the same GTID state). Give them the moment they need.
    deadline = time.monotonic() + 15
    while not replication_lab.is_healthy() and time.monotonic() < deadline:
        time.sleep(0.1)
    t0 = time.monotonic()
    result = replication_lab.up()
    assert result["reused"] is True
    assert time.monotonic() - t0 < 1.0
    out = subprocess.run(
        [str(REPO_ROOT / "bin" / "lab"), "replication", "status"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 3 and all("healthy=yes" in line for line in lines)


def test_manual_gtid_switchover_through_monitor_user_then_heal(replication_healthy: ReplicationLab):
    """The seed's switchover, node1 -> node2, by plain SQL as `monitor`; then heal() switches back."""
    lab = replication_healthy
    table(lab)
    before = uuid.uuid4().hex
    with closing(lab.app_connection(1)) as conn:
        run(conn, f"INSERT INTO lab_repl (token, origin) VALUES ('{before}', 'node1')")

    m = {n: lab.monitor_connection(n, timeout=5) for n in (1, 2, 3)}
    try:
        t0 = time.monotonic()
        # 1. stop writes on the old primary and read how far it got
        run(m[1], "SET GLOBAL read_only = ON")
        old_pos = one(m[1], "SELECT @@gtid_binlog_pos")[0]
        # 2. the candidate catches up (MASTER_GTID_WAIT waits on its gtid_slave_pos; 0 = reached)
        assert one(m[2], "SELECT MASTER_GTID_WAIT(%s, 10)", (old_pos,))[0] == 0
        assert one(m[2], "SELECT @@gtid_current_pos")[0] == old_pos
        # 3. the candidate stops being a replica
        run(m[2], "STOP SLAVE", "RESET SLAVE ALL")
        # 4. the other replica follows the candidate from where it is (its gtid_slave_pos)
        run(m[3], "STOP SLAVE", change_master(lab, 2), "START SLAVE")
        # 5. the old primary too; its own transactions are in its binlog, not in its gtid_slave_pos, so
        #    start from gtid_binlog_pos (else it asks the new primary for the whole history again)
        run(m[1], "SET GLOBAL gtid_slave_pos = @@gtid_binlog_pos", change_master(lab, 2), "START SLAVE")
        # 6. the new primary takes writes
        run(m[2], "SET GLOBAL read_only = OFF")
        switch = time.monotonic() - t0
    finally:
        for conn in m.values():
            conn.close()
    assert switch < 2.0, switch

    after = uuid.uuid4().hex
    with closing(lab.app_connection(2)) as conn:
        run(conn, f"INSERT INTO lab_repl (token, origin) VALUES ('{after}', 'node2')")
    with closing(lab.app_connection(1)) as conn:
        with pytest.raises(MySQLdb.OperationalError) as exc:
            run(conn, "INSERT INTO lab_repl (token) VALUES ('old primary is read-only')")
        assert exc.value.args[0] == 1290
    assert lab.primary() == 2
    for n in (1, 3):
        lab.wait_caught_up(n, timeout=10)
        with closing(lab.monitor_connection(n)) as conn:
            st = slave_status(conn)
        assert st["Master_Port"] == lab.node(2).port and st["Using_Gtid"] == "Slave_Pos"
        assert (st["Slave_IO_Running"], st["Slave_SQL_Running"], st["Last_SQL_Errno"]) == ("Yes", "Yes", 0)
        assert count(lab, n, before) == 1 and count(lab, n, after) == 1
    assert not lab.is_healthy()

    t0 = time.monotonic()
    assert lab.heal() is True
    healed = time.monotonic() - t0
    assert healed < 10, healed
    assert lab.is_healthy()
    assert lab.primary() == 1
    assert all(count(lab, n, after) == 1 for n in (1, 2, 3))  # nothing written on node2 was lost
    again = uuid.uuid4().hex
    with closing(lab.app_connection(1)) as conn:
        run(conn, f"INSERT INTO lab_repl (token, origin) VALUES ('{again}', 'node1')")
    for n in (2, 3):
        lab.wait_caught_up(n, timeout=10)
        assert count(lab, n, again) == 1
    assert lab.heal() is False


def test_failover_after_killing_the_primary_then_heal_keeps_the_new_writes(replication_healthy: ReplicationLab):
    lab = replication_healthy
    table(lab)
    lab.kill(1)
    with closing(lab.monitor_connection(2)) as c2, closing(lab.monitor_connection(3)) as c3:
        run(c2, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")
        run(c3, "STOP SLAVE", change_master(lab, 2), "START SLAVE")
    token = uuid.uuid4().hex
    with closing(lab.app_connection(2)) as conn:
        run(conn, f"INSERT INTO lab_repl (token, origin) VALUES ('{token}', 'node2')")

    t0 = time.monotonic()
    assert lab.heal() is True  # restarts node1, which catches up with node2, then takes over again
    assert time.monotonic() - t0 < 15
    assert lab.is_healthy() and lab.primary() == 1
    assert [count(lab, n, token) for n in (1, 2, 3)] == [1, 1, 1]


def test_heal_reclones_a_replica_with_an_errant_transaction(replication_healthy: ReplicationLab):
    lab = replication_healthy
    table(lab)
    token = uuid.uuid4().hex
    with closing(lab.root_connection(3)) as conn:  # root may write despite read_only: an errant GTID 0-3-x
        run(conn, f"INSERT INTO app.lab_repl (token, origin) VALUES ('{token}', 'errant')")
        assert parse_gtid_pos(one(conn, "SELECT @@gtid_binlog_pos")[0])[0][0] == 3
    pid_before = lab.pid(3)
    assert not lab.is_healthy()

    t0 = time.monotonic()
    assert lab.heal() is True
    assert time.monotonic() - t0 < 20
    assert lab.is_healthy()
    assert lab.pid(3) != pid_before  # wiped, copied from the template, replayed from node1's binlog
    assert count(lab, 3, token) == 0
    with closing(lab.root_connection(1)) as c1, closing(lab.root_connection(3)) as c3:
        sql = "SELECT COUNT(*), COALESCE(BIT_XOR(CRC32(CONCAT(id, token, origin))), 0) FROM app.lab_repl"
        assert one(c1, sql) == one(c3, sql)


def test_kill_a_replica_then_start_resumes_by_gtid(replication_healthy: ReplicationLab):
    lab = replication_healthy
    table(lab)
    lab.kill(3)
    assert not lab.is_running(3)
    token = uuid.uuid4().hex
    with closing(lab.app_connection(1)) as conn, conn.cursor() as cur:
        cur.executemany("INSERT INTO lab_repl (token) VALUES (%s)", [(token,)] * 50)
    result = lab.start(3)
    assert result["role"] == "replica" and result["seconds"] < 30
    assert count(lab, 3, token) == 50
    assert lab.is_healthy()


def test_up_and_heal_do_not_fail_under_a_write_load(replication_healthy: ReplicationLab):
    """A product test may run traffic while a fixture calls up()/heal(): lag of a few ms is no fault."""
    lab = replication_healthy
    table(lab)
    stop, done, errors = threading.Event(), [0], []

    def writer():
        with closing(lab.app_connection(1)) as conn, conn.cursor() as cur:
            while not stop.is_set():
                try:
                    cur.execute("INSERT INTO lab_repl (token) VALUES ('load')")
                    done[0] += 1
                except MySQLdb.Error as exc:
                    errors.append(exc.args[0])

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(0.2)
        for _ in range(5):
            assert lab.up()["seconds"] < 5
        lab.heal()
        assert lab.wait_caught_up(2, timeout=10) < 10
    finally:
        stop.set()
        thread.join(10)
    assert done[0] > 100 and errors == []
    for n in (2, 3):
        lab.wait_caught_up(n, timeout=10)
    assert lab.is_healthy()


def _free_ports(k: int) -> list[int]:
    socks = [socket.socket() for _ in range(k)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_private_lab_up_from_empty_and_down():
    """An own instance (own dir, free ports) so that the shared lab is never disturbed."""
    base = LAB_VAR / f"test-replication-{os.getpid()}"
    lab = ReplicationLab(base_dir=base, ports=_free_ports(3))
    try:
        first = lab.up()
        assert first["reused"] is False and first["seconds"] < 60
        assert lab.is_healthy()
        again = lab.up()
        assert again["reused"] is True and again["seconds"] < 1.0
        pids = [lab.pid(n) for n in (1, 2, 3)]
        lab.down()
        assert not any(lab.is_running(n) for n in (1, 2, 3))
        assert not processes_under(base)
        assert all(pids)
    finally:
        lab.down()
        shutil.rmtree(base, ignore_errors=True)


def test_ports_of_the_other_labs_are_refused():
    from lab._mariadb_common import LabError

    with pytest.raises(LabError, match="Galera"):
        ReplicationLab(base_dir=LAB_VAR / "never-used", ports=[3311, 3331, 3332])
    with pytest.raises(LabError, match="Django"):
        ReplicationLab(base_dir=LAB_VAR / "never-used", ports=[3320, 3331, 3332])
