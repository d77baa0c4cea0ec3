"""The double shuns like ProxySQL 2.7.1, held to the reference's samples/shunned.jsonl: two ProxySQL nodes
of one cluster (the seeds' layout) in front of the real Galera lab, one carrying client reads and one
idle, while a reader backend is killed and restarted.

What the sample shows, and this test holds the double to: only the node whose clients use a hostgroup
shuns the dead backend there (runtime_mysql_servers and stats_mysql_connection_pool), its main table
still says ONLINE, ConnERR grows; recovery is lazy: not before mysql-shun_recovery_time_sec after the
last connection error, and only where the hostgroup is used; a LOAD that changes the row resets it.
"""

import json
import threading
import time

from lab import demo

KILLED = 3312  # Galera node 2: a reader in 101 and a backup writer in 102 in the seeds' layout
RECOVERY_S = 3  # mysql-shun_recovery_time_sec for the test (default 10)


def sql(double, *statements):
    return demo.admin_sql(double.port, *statements, user=double.user, password=double.password)


def runtime_status(double, hg, port=KILLED):
    return sql(double, f"SELECT status FROM runtime_mysql_servers WHERE hostgroup_id={hg} AND port={port}")[0][0]


def pool_row(double, hg, port=KILLED):
    status, err = sql(
        double, f"SELECT status, ConnERR FROM stats_mysql_connection_pool WHERE hostgroup={hg} AND srv_port={port}"
    )[0]
    return status, int(err)


def memory_statuses(double):
    return {r[0] for r in sql(double, "SELECT DISTINCT status FROM mysql_servers")}


def not_online(double):
    runtime = sql(double, "SELECT hostgroup_id, port, status FROM runtime_mysql_servers WHERE status<>'ONLINE'")
    pool = sql(double, "SELECT hostgroup, srv_port, status FROM stats_mysql_connection_pool WHERE status<>'ONLINE'")
    return runtime, pool


def reader_backends(double, hg=101):
    return next(w["on_servers"] for w in double.traffic.status()["workloads"] if w["hostgroup"] == hg)


def wait_for(check, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(step)
    return False


def test_a_killed_reader_is_shunned_by_the_busy_node_only_and_recovers_lazily(lab_pair, galera_healthy):
    busy, idle = lab_pair
    for double in lab_pair:
        sql(double, f"SET mysql-shun_recovery_time_sec='{RECOVERY_S}'", "LOAD MYSQL VARIABLES TO RUNTIME")
    busy.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
    # Each read session picks a reader by weight (3311: 100, 3312 and 3313: 10,000 each) and keeps it while it is
    # ONLINE: with 8 sessions none picked 3312 once in about 240 runs (0.5025^8), which failed the next line (a CI
    # run of 2026-11-27). With 24 it is once in about 15 million (0.5025^24), here and when they spread again after
    # the recovery below.
    busy.traffic.set_sessions(hostgroup=101, count=24, kind="read")
    assert wait_for(lambda: f"127.0.0.1:{KILLED}" in reader_backends(busy), 3)
    assert pool_row(busy, 101) == ("ONLINE", 0)

    # -- the kill: the busy node shuns the backend in the hostgroup its clients use, and there only --------
    galera_healthy.kill(2)
    assert wait_for(lambda: runtime_status(busy, 101) == "SHUNNED", 5), "the busy node never shunned it"
    status, first_errors = pool_row(busy, 101)
    assert status == "SHUNNED" and first_errors >= 5  # mysql-shun_on_failures errors in a second
    assert runtime_status(busy, 102) == "ONLINE" and pool_row(busy, 102) == ("ONLINE", 0)  # no client uses 102
    assert f"127.0.0.1:{KILLED}" not in reader_backends(busy)  # a SHUNNED server takes no sessions
    assert not_online(idle) == ((), ())  # the idle node never tried it
    assert pool_row(idle, 101) == ("ONLINE", 0)
    for double in lab_pair:
        assert memory_statuses(double) == {"ONLINE"}  # ProxySQL's verdict, not configuration
    # traffic reaching 102 now shuns it there too; then 102 goes quiet again
    busy.traffic.set_sessions(hostgroup=102, count=2, kind="read")
    assert wait_for(lambda: runtime_status(busy, 102) == "SHUNNED", 5)
    busy.traffic.clear_sessions(hostgroup=102)

    # -- the restart (IST): reads keep trying; ConnERR grows while the backend refuses --------------------
    restart = threading.Thread(target=galera_healthy.start, args=(2,))
    restart.start()
    samples = []  # (time, status, ConnERR) of 101 on the busy node
    while restart.is_alive() or not samples or samples[-1][1] != "ONLINE":
        samples.append((time.monotonic(), *pool_row(busy, 101)))
        assert samples[-1][0] - samples[0][0] < 60, "no recovery within 60 s"
        assert runtime_status(idle, 101) == "ONLINE"
        time.sleep(0.1)
    restart.join()
    online_at = next(t for t, status, _ in samples if status == "ONLINE")
    assert all(status == "SHUNNED" for t, status, _ in samples if t < online_at)
    errors = [e for _, _, e in samples]
    assert errors == sorted(errors) and errors[-1] > first_errors, "retries while it was down add to ConnERR"
    # not before shun_recovery_time_sec after the last failed attempt (which came after the sample before
    # the last ConnERR increase), and promptly once it is over
    last_increase = max(i for i in range(1, len(samples)) if samples[i][2] > samples[i - 1][2])
    assert online_at - samples[last_increase - 1][0] >= RECOVERY_S
    assert online_at - samples[last_increase][0] <= RECOVERY_S + 2.5
    assert runtime_status(busy, 101) == "ONLINE"
    # Takes sessions again: the unpinned ones pick a server again (at random, by weight) when it comes back, seen
    # by the traffic model's next tick, which on a loaded machine can be seconds; the recovery's timing is asserted
    # above.
    assert wait_for(lambda: f"127.0.0.1:{KILLED}" in reader_backends(busy), 10)

    # -- lazily: the backend answers and the wait is over, but nobody uses 102 on the busy node ----------
    time.sleep(0.6)
    assert runtime_status(busy, 102) == "SHUNNED" and pool_row(busy, 102)[0] == "SHUNNED"
    assert not_online(idle) == ((), ()) and pool_row(idle, 101) == ("ONLINE", 0)

    # -- a LOAD that leaves the row as it was keeps the verdict; one that changes the row resets it -------
    sql(
        busy,
        "UPDATE mysql_servers SET weight=9000 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    assert runtime_status(busy, 102) == "SHUNNED"
    sql(
        busy,
        f"UPDATE mysql_servers SET weight=999 WHERE hostgroup_id=102 AND port={KILLED}",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    assert runtime_status(busy, 102) == "ONLINE" and pool_row(busy, 102)[0] == "ONLINE"
    for double in lab_pair:
        assert memory_statuses(double) == {"ONLINE"}


def test_lab_shun_state_shows_the_verdict_and_its_evidence(lab_pair, galera_healthy):
    """LAB SHUN_STATE: per server, the configured and shown status, ConnERR, the recovery wait and the
    latest probe of its backend."""
    busy, _ = lab_pair
    busy.traffic.set_sessions(hostgroup=101, count=4, kind="read")
    galera_healthy.kill(3)
    assert wait_for(lambda: runtime_status(busy, 101, 3313) == "SHUNNED", 5)
    state = {(s["hostgroup"], s["port"]): s for s in json.loads(sql(busy, "LAB SHUN_STATE")[0][0])}
    shunned = state[(101, 3313)]
    assert shunned["configured_status"] == "ONLINE" and shunned["status"] == "SHUNNED"
    assert shunned["conn_err"] >= 5 and shunned["hostgroup_used"] is True
    assert shunned["recovery_wait_s"] == 9  # default 10 s, capped at connect_timeout_server_max - 1 s
    assert shunned["probe"]["ok"] is False and shunned["probe"]["error"].startswith("2002")
    assert state[(102, 3313)]["status"] == "ONLINE" and state[(102, 3313)]["hostgroup_used"] is False
    assert state[(101, 3312)]["status"] == "ONLINE" and state[(101, 3312)]["probe"]["ok"] is True


# ---------------------------------------------------------------------------------------- without Galera
def closed_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_endpoint_without_sessions_never_probes_its_backends(proxysql_double_in_process):
    from lab.proxysql_double.backends import PROBER

    port = closed_port()
    sql(
        proxysql_double_in_process,
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (10,'127.0.0.1',{port})",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    for _ in range(3):
        assert pool_row(proxysql_double_in_process, 10, port) == ("ONLINE", 0)
        time.sleep(0.1)
    proxysql_double_in_process.traffic.set_sessions(hostgroup=10, count=2, rate=0)  # connected, sending nothing
    time.sleep(0.2)
    assert pool_row(proxysql_double_in_process, 10, port) == ("ONLINE", 0)
    assert PROBER.peek("127.0.0.1", port) is None
    proxysql_double_in_process.traffic.set_sessions(hostgroup=10, count=2, rate=100)
    assert wait_for(lambda: pool_row(proxysql_double_in_process, 10, port)[0] == "SHUNNED", 3)
    assert PROBER.peek("127.0.0.1", port).ok is False


def test_a_refusing_or_paused_backend_is_shunned_and_held_sessions_wait_for_its_recovery(proxysql_double_factory):
    """Another double stands for the backend (it answers the MySQL greeting; access denied counts as an
    answer, as in ProxySQL): refused connections and a paused server both shun it; with nothing else in
    the hostgroup the sessions are held, and the recovery wait is a tenth of the usual one (at least 1 s)."""
    front, backend = proxysql_double_factory(2)
    sql(
        front,
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (10,'127.0.0.1',{backend.port})",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    front.traffic.set_sessions(hostgroup=10, count=3, kind="read")
    for mode in ("refuse", "hang"):
        backend.set_mode(mode)
        assert wait_for(lambda: runtime_status(front, 10, backend.port) == "SHUNNED", 4), mode
        assert front.traffic.status()["workloads"][0]["held"] == 3  # nothing usable: queries wait
        backend.set_mode("normal")
        t0 = time.monotonic()
        assert wait_for(lambda: runtime_status(front, 10, backend.port) == "ONLINE", 4), mode
        assert front.traffic.status()["workloads"][0]["held"] == 0
        assert time.monotonic() - t0 < 3
    assert pool_row(front, 10, backend.port)[1] >= 10


def test_shun_recovery_time_zero_keeps_a_shunned_server_while_others_serve(proxysql_double_factory):
    front, backend, other = proxysql_double_factory(3)
    sql(
        front,
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (10,'127.0.0.1',{backend.port}),"
        f"(10,'127.0.0.1',{other.port})",
        "SET mysql-shun_recovery_time_sec=0",
        "LOAD MYSQL SERVERS TO RUNTIME",
        "LOAD MYSQL VARIABLES TO RUNTIME",
    )
    front.traffic.set_sessions(hostgroup=10, count=4, kind="read")
    backend.set_mode("refuse")
    assert wait_for(lambda: runtime_status(front, 10, backend.port) == "SHUNNED", 4)
    backend.set_mode("normal")
    time.sleep(2.5)
    assert runtime_status(front, 10, backend.port) == "SHUNNED"
    assert reader_backends(front, 10) == [f"127.0.0.1:{other.port}"]
