"""Poll rounds against the lab: two ProxySQL doubles and the three Galera nodes, real Redis."""

import threading
import time

import pytest

from apps.monitoring.status import polled_layer
from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import chunks, live, pollers, rounds
from apps.monitoring.models import BackendSample, PoolSnapshot, ProxySQLSample
from lab import demo

pytestmark = pytest.mark.django_db


def nodes():
    return list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))


def test_proxysql_round_stores_latest_state_and_rates(adopted_lab, live_redis):
    cluster, doubles = adopted_lab
    first = pollers.proxysql_round(nodes(), now=time.time())
    docs = first.pop("docs")  # each node's previous and new document, for the alert rules
    assert first == {"polled": 2, "failed": 0, "seconds": pytest.approx(first["seconds"])}
    assert set(docs) == {n.pk for n in nodes()} and all(new["ok"] and prev is None for prev, new in docs.values())
    time.sleep(0.5)
    pollers.proxysql_round(nodes(), now=time.time())
    doc = live.read_one(live.PROXYSQL, nodes()[0].pk)
    assert doc["ok"] and doc["figures"]["questions_ps"] > 0
    writer = [r for r in doc["pool"] if r["key"][0] == 100][0]
    assert writer["key"] == [100, "127.0.0.1", 3311] and writer["conn_used"] == 4 and writer["queries_ps"] > 0
    assert doc["figures"]["mirror_max_concurrency"] == 16 and doc["figures"]["mysql_threads"] > 0
    assert {tuple(r["key"]) for r in doc["pool"]} == {
        (100, "127.0.0.1", 3311),
        (101, "127.0.0.1", 3311),
        (101, "127.0.0.1", 3312),
        (101, "127.0.0.1", 3313),
        (102, "127.0.0.1", 3312),
        (102, "127.0.0.1", 3313),
    }
    samples = ProxySQLSample.objects.filter(resolution=0).order_by("ts")
    assert samples.count() == 4 and samples.first().questions_ps is None  # no rate from a first poll
    assert samples.last().questions_ps > 0
    assert (
        PoolSnapshot.objects.count() == 4 and len(list(chunks.read_pool({}, ["status"]))) == 24
    )  # 6 servers x 4 polls


def test_memory_and_disk_are_read_with_the_variables_and_after_a_runtime_change(adopted_lab, live_redis, settings):
    cluster, (first, second) = adopted_lab
    settings.MONITOR_VARIABLES_INTERVAL_S = 60
    node = ProxySQLNode.objects.get(admin_port=first.port)

    def disk_reads():
        return sum(1 for s in first.statements() if s.startswith("SELECT * FROM disk.mysql_servers"))

    def weight(rows):
        return [r["weight"] for r in rows if (r["hostgroup_id"], r["port"]) == (101, 3312)]

    first.clear_statements()
    t = time.time()
    pollers.proxysql_round(nodes(), now=t)
    doc = live.read_one(live.PROXYSQL, node.pk)
    assert disk_reads() == 1 and doc["layers_ts"] == t
    assert doc["disk_servers"] == doc["memory_servers"] == "runtime"  # as the runtime: not copied
    assert polled_layer(doc, "disk") == doc["runtime_servers"] and len(doc["runtime_servers"]) == 6
    pollers.proxysql_round(nodes(), now=t + 10)
    doc = live.read_one(live.PROXYSQL, node.pk)
    assert disk_reads() == 1 and doc["layers_ts"] == t and doc["disk_servers"] == "runtime"  # kept, not read again

    demo.admin_sql(
        first.port,
        "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3312",
        "LOAD MYSQL SERVERS TO RUNTIME",
        user=first.user,
        password=first.password,
    )
    pollers.proxysql_round(nodes(), now=t + 20)  # the runtime changed: read at once...
    doc = live.read_one(live.PROXYSQL, node.pk)
    assert disk_reads() == 2 and doc["memory_servers"] == "runtime" and weight(doc["disk_servers"]) == [10000]
    demo.admin_sql(first.port, "SAVE MYSQL SERVERS TO DISK", user=first.user, password=first.password)
    pollers.proxysql_round(nodes(), now=t + 22)  # ...and at every poll for a while: the SAVE that follows is seen
    doc = live.read_one(live.PROXYSQL, node.pk)
    assert disk_reads() == 3 and doc["disk_servers"] == "runtime" and doc["runtime_changed_ts"] == t + 20
    demo.admin_sql(
        first.port,
        "UPDATE mysql_servers SET weight=8 WHERE hostgroup_id=101 AND port=3312",
        user=first.user,
        password=first.password,
    )  # not loaded
    pollers.proxysql_round(nodes(), now=t + 20 + pollers.LAYERS_AFTER_CHANGE_S + 5)  # the while is over
    assert disk_reads() == 3
    pollers.proxysql_round(nodes(), now=t + 61)  # with the variables again
    doc = live.read_one(live.PROXYSQL, node.pk)
    assert disk_reads() == 4 and doc["layers_ts"] == t + 61 and weight(polled_layer(doc, "memory")) == [8]
    assert weight(polled_layer(doc, "runtime")) == weight(polled_layer(doc, "disk")) == [7]


def test_one_hanging_node_does_not_delay_the_others(adopted_lab, live_redis):
    cluster, (first, second) = adopted_lab
    pollers.proxysql_round(nodes())  # connections are open and cached now
    second.set_mode("hang")
    start = time.monotonic()
    summary = pollers.proxysql_round(nodes())
    elapsed = time.monotonic() - start
    assert summary["failed"] == 1 and elapsed < 1.5  # bounded by one read timeout (0.8 s), not a sum
    by_port = {n.admin_port: live.read_one(live.PROXYSQL, n.pk) for n in nodes()}
    assert by_port[first.port]["ok"] and by_port[first.port]["ts"] == by_port[second.port]["ts"]
    hung = by_port[second.port]
    assert not hung["ok"] and hung["error_kind"] == "timeout" and hung["error_since"] == hung["ts"]
    assert hung["figures"]  # the last good figures are kept beside the error
    since = hung["error_since"]
    pollers.proxysql_round(nodes())
    assert live.read_one(live.PROXYSQL, nodes()[1].pk)["error_since"] == since  # "since when" holds
    assert ProxySQLSample.objects.filter(node__admin_port=second.port, reachable=False).count() == 2


def test_a_hanging_node_does_not_hold_back_the_others_documents(adopted_lab, live_redis):
    cluster, (first, second) = adopted_lab
    targets = nodes()
    pollers.proxysql_round(targets)  # connections are open and cached now
    second.set_mode("hang")
    healthy = next(n.pk for n in targets if n.admin_port == first.port)
    ts, seen = time.time(), {}

    def watch():  # when does the healthy node's document of this round appear in Redis?
        while "at" not in seen and time.time() - ts < 5:
            doc = live.read_one(live.PROXYSQL, healthy)
            if doc and doc["ts"] == ts:
                seen["at"] = time.time()
            time.sleep(0.01)

    watcher = threading.Thread(target=watch)
    watcher.start()
    pollers.proxysql_round(targets, now=ts)
    finished = time.time()
    watcher.join()
    assert finished - ts >= 0.7  # the round waited for the hung node's read timeout (0.8 s)...
    assert seen["at"] - ts < 0.4  # ...but the healthy node's figures were written as soon as it was polled


def test_restarted_proxysql_gives_no_negative_rates(adopted_lab, live_redis):
    cluster, (first, second) = adopted_lab
    pollers.proxysql_round(nodes())
    time.sleep(0.3)
    pollers.proxysql_round(nodes())
    first.restart()  # counters and uptime start again from zero
    time.sleep(0.3)
    pollers.proxysql_round(nodes())
    last = ProxySQLSample.objects.filter(node__admin_port=first.port).order_by("-ts").first()
    assert last.reachable and last.questions_ps is None  # a gap, not a negative or doubled figure
    rates = [values[0] for *_, values in chunks.read_pool({}, ["queries_ps"]) if values[0] is not None]
    assert rates and all(r >= 0 for r in rates)


def test_backend_round_reads_galera_state(adopted_lab, live_redis, galera_healthy):
    servers = list(Server.objects.select_related("cluster").order_by("port"))
    galera_healthy.set_desync(2, True)
    summary = pollers.backend_round(servers)
    assert summary["failed"] == 0
    docs = live.read_many(live.BACKEND, [s.pk for s in servers])
    states = [docs[s.pk]["state"] for s in servers]
    assert [s["local_state"] for s in states] == [4, 2, 4]
    assert states[1]["desync"] is True and docs[servers[1].pk]["synced_primary"] is False
    desynced = BackendSample.objects.get(server=servers[1])
    assert desynced.local_state == 2 and desynced.desync and desynced.primary and desynced.recv_queue >= 0


def test_killed_backend_is_unreachable_for_that_node_only(adopted_lab, live_redis, galera_healthy):
    servers = list(Server.objects.select_related("cluster").order_by("port"))
    galera_healthy.kill(3)
    summary = pollers.backend_round(servers)
    docs = live.read_many(live.BACKEND, [s.pk for s in servers])
    assert summary["failed"] == 1 and docs[servers[2].pk]["error_kind"] == "unreachable"
    assert docs[servers[0].pk]["ok"] and docs[servers[1].pk]["ok"]
    assert BackendSample.objects.get(server=servers[2]).reachable is False


def test_shard_round_skips_a_tick_while_the_previous_round_runs(adopted_lab, live_redis):
    live_redis.set("poll-lease:proxysql:0", "7 someone-else", ex=5)
    assert rounds.run_shard(live.PROXYSQL, 0, 1)["skipped"]
    assert int(live_redis.hget("poll-skipped:proxysql", 0)) == 1
    live_redis.delete("poll-lease:proxysql:0")
    now = time.time()
    assert rounds.run_shard(live.PROXYSQL, 0, 1, now=now)["polled"] == 2
    # A second tick within the cluster's interval polls nothing: every node was polled just now.
    assert rounds.run_shard(live.PROXYSQL, 0, 1, now=now + 0.5) == {"polled": 0}
    assert rounds.run_shard(live.PROXYSQL, 0, 1, now=now + 2.0)["polled"] == 2


@pytest.mark.parametrize("kind", [live.PROXYSQL, live.BACKEND])
def test_a_tick_that_finds_nothing_due_reads_plain_rows_only(adopted_lab, live_redis, proxysql_double, kind):
    """Issue 40: a shard ticks every second and its nodes are due once per interval, so most ticks find none due.
    Such a tick reads the schedule in one query of plain rows: no node is loaded whole (no credential read, no
    model instance), and a node added since is due at the next tick all the same."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    now = time.time()
    assert rounds.run_shard(kind, 0, 1, now=now)["polled"] == (2 if kind == live.PROXYSQL else 3)
    with CaptureQueriesContext(connection) as idle:
        assert rounds.run_shard(kind, 0, 1, now=now + 0.1) == {"polled": 0}  # (a backend's interval is 1 s)
    assert len(idle.captured_queries) == 1, [q["sql"] for q in idle.captured_queries]
    assert "password" not in idle.captured_queries[0]["sql"]
    if kind == live.PROXYSQL:
        cluster, _ = adopted_lab
        added = ProxySQLNode.objects.create(
            cluster=cluster,
            name="proxysql-3",
            admin_host="127.0.0.1",
            admin_port=proxysql_double.port,
            admin_user=proxysql_double.user,
            admin_password=proxysql_double.password,
        )
        summary = rounds.run_shard(kind, 0, 1, now=now + 0.2)
        assert summary["polled"] == 1 and added.pk in summary["docs"]


def test_shards_split_the_nodes(adopted_lab, live_redis):
    polled = [rounds.run_shard(live.PROXYSQL, shard, 2).get("polled", 0) for shard in (0, 1)]
    assert sorted(polled) == [1, 1]


def test_redis_down_skips_the_round_without_crashing(adopted_lab, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    assert rounds.run_shard(live.PROXYSQL, 0, 1)["skipped"]


def test_a_restarted_proxysql_has_its_version_and_variables_read_at_the_next_poll(adopted_lab, live_redis):
    """A restart may be an upgrade: the first poll after it reads the variables (admin-version among them) again,
    not MONITOR_VARIABLES_INTERVAL_S (60 s) later. Shown here with a variable changed on disk only, which only a
    restart brings to runtime."""
    cluster, (first, second) = adopted_lab
    pollers.proxysql_round(nodes())
    node = ProxySQLNode.objects.get(admin_port=first.port)
    before = live.read_one(live.PROXYSQL, node.pk)
    assert before["variables"]["admin-version"] and before["variables"]["mysql-mirror_max_concurrency"] != "17"
    demo.admin_sql(
        first.port,
        "SET mysql-mirror_max_concurrency=17",
        "SAVE MYSQL VARIABLES TO DISK",
        user=first.user,
        password=first.password,
    )
    time.sleep(1.2)  # the uptime (whole seconds) past 0, so that the restart reads as one
    pollers.proxysql_round(nodes())
    assert live.read_one(live.PROXYSQL, node.pk)["variables_ts"] == before["variables_ts"]  # not read again yet
    first.restart()
    pollers.proxysql_round(nodes())
    after = live.read_one(live.PROXYSQL, node.pk)
    assert after["variables_ts"] > before["variables_ts"] and after["variables"]["mysql-mirror_max_concurrency"] == "17"
    assert after["variables"]["admin-version"] == before["variables"]["admin-version"]
