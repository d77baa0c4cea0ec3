"""Read-pool rules and automatic failover against the Galera lab and two ProxySQL doubles."""

import os
import signal
import time

import msgspec
import pytest

from apps.audit.models import AuditEvent
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.monitoring import live, pollers
from apps.operations import rules
from apps.operations.models import Operation

from .conftest import applier_stopped, layout, mirrored, runtime

pytestmark = pytest.mark.django_db


def poll(cluster):
    servers = list(Server.objects.filter(cluster=cluster).select_related("cluster").order_by("port"))
    pollers.backend_round(servers)
    return rules.read_polls([s.pk for s in servers])


def enable_rules(cluster, **policy):
    Cluster.objects.filter(pk=cluster.pk).update(read_pool_rules_enabled=True, rules_dry_run=False, **policy)
    return Cluster.objects.get(pk=cluster.pk)


def doc(local_state=4, queue=0, status="Primary", ready=True, ok=True, reject="NONE"):
    if not ok:
        return rules.BackendPoll(ts=time.time(), ok=False, error="refused")
    return rules.BackendPoll(
        ts=time.time(),
        ok=True,
        synced_primary=local_state == 4 and status == "Primary" and ready,
        state={
            "wsrep_on": True,
            "local_state": local_state,
            "local_state_comment": "x",
            "cluster_status": status,
            "ready": ready,
            "local_recv_queue": queue,
            "reject_queries": reject,
        },
    )


def by_port(cluster, **docs_by_port):
    return {Server.objects.get(port=int(p[1:])).pk: d for p, d in docs_by_port.items()}


def test_decisions_follow_the_rules(adopted_lab, live_redis):
    cluster, _ = adopted_lab
    cluster = enable_rules(cluster, max_replication_lag=100, min_available_readers=1)
    changes, figures, alerts = rules.decide(
        cluster, by_port(cluster, p3311=doc(), p3312=doc(2, queue=500), p3313=doc(ok=False))
    )
    by = {(Server.objects.get(pk=k[0]).port, k[1]): v[0] for k, v in changes.items()}
    assert by == {(3312, 101): "OFFLINE_SOFT", (3313, 101): "OFFLINE_SOFT", (3313, 102): "OFFLINE_SOFT"}
    assert not alerts
    # A desynced node under the threshold stays a reader.
    changes, _, _ = rules.decide(cluster, by_port(cluster, p3311=doc(), p3312=doc(2, queue=50), p3313=doc()))
    assert changes == {}


def test_never_below_the_minimum_of_readers(adopted_lab, live_redis):
    cluster, _ = adopted_lab
    cluster = enable_rules(cluster, max_replication_lag=100, min_available_readers=2)
    changes, _, alerts = rules.decide(
        cluster, by_port(cluster, p3311=doc(), p3312=doc(2, queue=500), p3313=doc(ok=False))
    )
    readers = {Server.objects.get(pk=k[0]).port: v for k, v in changes.items() if k[1] == 101}
    assert 3312 not in readers  # the least bad node (desynced, not dead) is kept ONLINE
    assert readers[3313][0] == "OFFLINE_SOFT" and "3312" in alerts[0]


def test_writer_is_also_reader_zero_takes_the_writer_out_of_the_read_pool(adopted_lab, live_redis):
    cluster, _ = adopted_lab
    cluster = enable_rules(cluster, writer_is_also_reader=2)
    changes, _, _ = rules.decide(cluster, by_port(cluster, p3311=doc(), p3312=doc(), p3313=doc()))
    assert {(Server.objects.get(pk=k[0]).port, k[1]): v[0] for k, v in changes.items()} == {(3311, 101): "OFFLINE_SOFT"}


def test_dry_run_only_audits_once(adopted_lab, live_redis):
    cluster, (first, second) = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(read_pool_rules_enabled=True, rules_dry_run=True)
    cluster.refresh_from_db()
    docs = by_port(cluster, p3311=doc(), p3312=doc(), p3313=doc(ok=False))
    rules.apply_read_pool(cluster, docs)
    rules.apply_read_pool(cluster, docs)
    assert AuditEvent.objects.filter(action="read-pool rules (dry run)", outcome="dry_run").count() == 1
    assert ("127.0.0.1", 3313, "ONLINE") in runtime(first, 101) and not Operation.objects.exists()


def test_desynced_node_leaves_and_rejoins_the_read_pool_with_hysteresis(adopted_lab, live_redis, galera_healthy):
    cluster, (first, second) = adopted_lab
    cluster = enable_rules(cluster, max_replication_lag=20, reader_return_mark=5, reader_return_after_s=1)
    with applier_stopped(galera_healthy, 2):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            docs = poll(cluster)
            queue = docs[Server.objects.get(port=3312).pk].state["local_recv_queue"]
            if queue > 20:
                break
            time.sleep(0.2)
        assert queue > 20, f"recv queue only reached {queue}"
        crossed = time.monotonic()
        rules.apply_read_pool(cluster, docs)
        reacted = time.monotonic() - crossed
        for double in (first, second):
            assert ("127.0.0.1", 3312, "OFFLINE_SOFT") in runtime(double, 101)
        assert reacted < 1.5
        assert HostgroupMembership.objects.get(server__port=3312, hostgroup_id=101).status == "OFFLINE_SOFT"
    # Under the return mark, it comes back only after reader_return_after_s.
    deadline = time.monotonic() + 15
    back = False
    while time.monotonic() < deadline and not back:
        rules.apply_read_pool(cluster, poll(cluster))
        back = ("127.0.0.1", 3312, "ONLINE") in runtime(first, 101)
        time.sleep(0.3)
    assert back
    events = AuditEvent.objects.filter(action__startswith="read_pool done").order_by("id")
    assert events.count() == 2 and "recv queue" in events.first().target


def test_killed_writer_fails_over_by_weight_within_two_polls(adopted_lab, live_redis, galera_healthy):
    cluster, (first, second) = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(auto_failover_enabled=True, failover_after_polls=2, poll_interval_s=1)
    cluster.refresh_from_db()
    galera_healthy.kill(1)
    start = time.monotonic()
    op, polls = None, 0
    for _ in range(4):
        op = rules.apply_failover(cluster, poll(cluster))
        polls += 1
        if op:
            break
        time.sleep(1.0)
    assert op, "no failover happened"
    elapsed = time.monotonic() - start
    operation = Operation.objects.get(pk=op)
    assert operation.state == "done", operation.error
    # Two polls a second apart, then the move: counted in polls, not in wall time (on CI's loaded machine a poll and
    # the move took 3.9 s between them; how fast a failover is, is bin/bench-real-pair's to measure).
    assert polls == 2, (polls, elapsed, operation.plan["options"]["evidence"])
    for double in (first, second):  # 3312 has the highest weight in the backup writer hostgroup (1000 > 100)
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    assert HostgroupMembership.objects.get(hostgroup_id=100).server.port == 3312
    event = AuditEvent.objects.get(action="failover done")
    assert event.actor == "automatic failover" and event.actor_kind == "rule"


def test_failback_waits_for_the_preferred_writer_to_stay_synced(adopted_lab, live_redis):
    cluster, (first, second) = adopted_lab
    preferred = Server.objects.get(port=3312)
    Cluster.objects.filter(pk=cluster.pk).update(
        auto_failover_enabled=True, failback_enabled=True, failback_after_s=1, preferred_writer=preferred
    )
    cluster = Cluster.objects.get(pk=cluster.pk)
    docs = poll(cluster)
    assert rules.apply_failback(cluster, docs) is None  # Synced, but not for long enough yet
    time.sleep(1.1)
    op = rules.apply_failback(cluster, poll(cluster))
    assert op and Operation.objects.get(pk=op).state == "done", Operation.objects.get(pk=op).error
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    assert AuditEvent.objects.get(action="switchover done").actor == "automatic failback"
    assert rules.apply_failback(Cluster.objects.get(pk=cluster.pk), poll(cluster)) is None  # already there


def test_failback_is_off_by_default(adopted_lab, live_redis):
    cluster, _ = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(preferred_writer=Server.objects.get(port=3312))
    cluster = Cluster.objects.get(pk=cluster.pk)
    assert rules.apply_failback(cluster, poll(cluster)) is None and not Operation.objects.exists()


# -- failover at the default policy: one poll and a re-probe --------------------------------------------
def enable_failover(cluster):
    """Automatic failover on, everything else at the cluster's defaults."""
    Cluster.objects.filter(pk=cluster.pk).update(auto_failover_enabled=True)
    return Cluster.objects.get(pk=cluster.pk)


def test_killed_writer_fails_over_after_one_poll_and_a_reprobe(adopted_lab, live_redis, galera_healthy):
    cluster, doubles = adopted_lab
    cluster = enable_failover(cluster)
    before = [layout(d) for d in doubles]
    galera_healthy.kill(1)
    op = rules.apply_failover(cluster, poll(cluster))
    assert op, "one poll that saw the writer down, confirmed by the re-probe, was not enough"
    operation = Operation.objects.get(pk=op)
    assert operation.state == "done", operation.error
    facts = operation.plan["facts"]
    assert facts["down_polls"] == 1 and facts["reprobe"].startswith("down: "), facts
    for double, rows in zip(doubles, before):  # 3312 (first backup writer) writes; the two swapped their roles
        assert layout(double) == mirrored(rows, 3311, 3312, port_at=2)


def test_writer_that_answers_the_reprobe_is_not_failed_over(adopted_lab, live_redis):
    cluster, (first, second) = adopted_lab
    cluster = enable_failover(cluster)
    writer = Server.objects.get(port=3311)
    for _ in range(3):  # three polls in a row could not read the writer (the monitoring path failed, not it)
        docs = poll(cluster)
        docs[writer.pk] = msgspec.structs.replace(  # error_kind "timeout": the rules do not read it
            docs[writer.pk], ok=False, error="backend 127.0.0.1:3311: read wsrep status: no answer within 0.8s"
        )
        assert rules.apply_failover(cluster, docs) is None
    assert not Operation.objects.exists()
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]


def test_a_silent_writer_needs_one_poll_more(adopted_lab, live_redis, galera_healthy):
    """A stalled writer (its process stopped: it accepts TCP, answers nothing) is not failed over on one
    silent poll and a silent re-probe; silent on the next poll too, it is."""
    cluster, (first, second) = adopted_lab
    cluster = enable_failover(cluster)
    writer = Server.objects.get(port=3311)
    pid = galera_healthy.pid(1)
    os.kill(pid, signal.SIGSTOP)
    try:
        docs = poll(cluster)
        assert not docs[writer.pk].ok and live.read_one(live.BACKEND, writer.pk)["error_kind"] == "timeout"
        assert rules.apply_failover(cluster, docs) is None
        os.kill(pid, signal.SIGCONT)  # a stall of about a poll: it answers again
        assert rules.apply_failover(cluster, poll(cluster)) is None
        assert not Operation.objects.exists()

        os.kill(pid, signal.SIGSTOP)  # now silent for two polls
        assert rules.apply_failover(cluster, poll(cluster)) is None
        op = rules.apply_failover(cluster, poll(cluster))
    finally:
        os.kill(pid, signal.SIGCONT)
    operation = Operation.objects.get(pk=op)
    assert operation.state == "done", operation.error
    assert operation.plan["facts"]["down_polls"] == 2 and operation.plan["facts"]["reprobe"].startswith("silent: ")
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
