"""Rollouts tried on REAL ProxySQL (issue 38, the real tier: lab/fixtures_real_proxysql.py), through the same machinery
as the lab tests (plan, start, run in this process as the worker's task runs it, the gate reading the polls of a
poll thread): a real 2.7.1 pair over the Galera lab, a real ProxySQL Cluster pair with sync at ProxySQL's defaults,
and a cluster of a 2.5.5 and a 2.7.1 node. On the real pair, a rule that makes live queries fail (an error_msg rule
matching the clients' SELECTs) halts at the canary and its rollback leaves every layer of every node as before.

Lean on purpose (the real tier's CI budget): short bakes set on each rollout, one pair for the good and the bad rule."""

import threading
import time

import MySQLdb
import pytest

from apps.audit.actor import Actor
from apps.configuration import services as config
from apps.configuration.drift import cluster_drift
from apps.fleet.models import ProxySQLNode
from apps.operations.tests.test_cluster_sync import PULLS_DUE_S, layers, sync_settings
from apps.rollouts import services
from apps.rollouts.models import ClusterState, RolloutState
from conftest import adopt_double
from lab import demo
from lab.bench_config import free_ports

from .test_canary import watch_canary_bake
from .test_rollouts import LAYERS, RULE, Poller, rule_ids

pytestmark = pytest.mark.django_db(transaction=True)

APP = ("app", "app")  # the Galera lab's application user
APP_USER = [
    "DELETE FROM mysql_users",
    f"INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('{APP[0]}','{APP[1]}',100)",
    "LOAD MYSQL USERS TO RUNTIME",
    "SAVE MYSQL USERS TO DISK",
]
# Before rule 20 (every SELECT to the readers): the clients' SELECT 1 answered by ProxySQL with an error.
BAD = {
    "op": "upsert",
    "table": "mysql_query_rules",
    "row": {"rule_id": 15, "active": 1, "match_pattern": "^SELECT 1$", "error_msg": "rollout broke it", "apply": 1},
}


def real_cluster(factory, versions, name, proxysql_cluster=False):
    """Real nodes laid out by hand (the plain layout over the Galera lab, the lab's app user), adopted as one
    cluster; with proxysql_cluster they form a ProxySQL Cluster (each lists both; sync at ProxySQL's defaults)."""
    ports = peers = None
    if proxysql_cluster:
        free = free_ports(2 * len(versions))
        ports = [(free[2 * i], free[2 * i + 1]) for i in range(len(versions))]
        peers = {f"{name}-{n}": admin for n, (admin, _) in enumerate(ports, 1)}
    nodes = [
        factory(v, name=f"{name}-{n}", peers=peers, ports=ports and ports[n - 1]) for n, v in enumerate(versions, 1)
    ]
    for node in nodes:
        node.admin(*demo.plain_layout_statements(), *APP_USER)
    for node in nodes:
        adopt_double(node, name, node.name)
    return ProxySQLNode.objects.get(admin_port=nodes[0].port).cluster, nodes


def roll_out(cluster, people, change, bake_canary_s, reason="tried on real ProxySQL"):
    planner, starter = people
    rollout = services.plan(
        {"edits": [change]},
        {"names": [cluster.name]},
        "1",
        actor=Actor.command(planner),
        reason=reason,
        bake_canary_s=bake_canary_s,
        bake_s=0.5,
    )
    services.start(rollout, actor=Actor.command(starter), enqueue=False)
    return rollout


class Clients(threading.Thread):
    """The application's SELECT 1 through one real node's client port, every 10 ms: [(monotonic, error code)]."""

    def __init__(self, node):
        super().__init__(daemon=True)
        self.node, self.stop, self.errors, self.ok = node, threading.Event(), [], 0

    def run(self):
        conn = None
        while not self.stop.is_set():
            try:
                conn = conn or MySQLdb.connect(
                    host="127.0.0.1",
                    port=self.node.client_port,
                    user=APP[0],
                    passwd=APP[1],
                    connect_timeout=2,
                    read_timeout=5,
                )
                cur = conn.cursor()
                cur.execute("SELECT 1")
                cur.fetchall()
                self.ok += 1
            except MySQLdb.Error as exc:
                self.errors.append((time.monotonic(), exc.args[0] if exc.args else None))
                if not isinstance(exc, MySQLdb.OperationalError) or exc.args[0] != 1148:
                    conn = None  # not ProxySQL's answer to the rule: a new connection
            self.stop.wait(0.01)


def test_a_harmless_rule_then_a_bad_one_on_a_real_pair(real_proxysql_factory, galera_healthy, live_redis, people):
    cluster, nodes = real_cluster(real_proxysql_factory, ("2.7.1", "2.7.1"), "real-pair")
    canary, peer = nodes
    version = config.latest(cluster).number
    with Poller(interval=0.3):
        rollout = roll_out(cluster, people, RULE, bake_canary_s=1)
        assert services.run(rollout.pk) == RolloutState.DONE, rollout.halt_reason
        rollout.refresh_from_db()
        assert [w["state"] for w in rollout.waves] == ["passed", "passed"]
        assert list(rollout.waves[0]["gate"]["nodes"]) == ["real-pair-1"]
        assert config.latest(cluster).number == version + 1
        for node in nodes:
            assert rule_ids(node) == {layer: [10, 20, 77] for layer in LAYERS}
        assert cluster_drift(cluster).in_sync

        # the bad rule: live traffic through both nodes all along
        before = {node.name: layers(node) for node in nodes}
        version = config.latest(cluster)
        clients = [Clients(node) for node in nodes]
        for c in clients:
            c.start()
        try:
            time.sleep(1.0)  # a clean window before the wave
            assert all(c.ok > 10 and not c.errors for c in clients), [(c.ok, c.errors[:3]) for c in clients]
            bad = roll_out(cluster, people, BAD, bake_canary_s=30, reason="a rule that refuses the clients' SELECTs")
            assert services.run(bad.pk) == RolloutState.HALTED
            done = time.monotonic()
            refused = [t for t, code in clients[0].errors if code == 1148]
            time.sleep(0.5)
            served_after = [c.ok for c in clients]
            time.sleep(0.5)
        finally:
            for c in clients:
                c.stop.set()
            for c in clients:
                c.join(10)
    assert refused and not [e for e in clients[1].errors], clients[1].errors[:3]  # the peer never refused one
    print(f"\nreal pair: the canary's first refused query to its rollback done {done - refused[0]:.2f} s")
    assert done - refused[0] < 5
    assert all(t <= done for t in refused)  # none after the rollback
    assert all(c.ok > n for c, n in zip(clients, served_after))  # served again
    bad.refresh_from_db()
    assert bad.halt_reason.startswith("wave 0 failed its health gate: the errors gate on real-pair-1: "), (
        bad.halt_reason
    )
    assert "refused by the change's query rule 15 (error_msg)" in bad.halt_reason, bad.halt_reason
    assert [w["state"] for w in bad.waves] == ["rolled_back", "pending"]
    assert bad.clusters.get().state == ClusterState.ROLLED_BACK
    assert config.latest(cluster) == version  # nothing recorded
    assert {node.name: layers(node) for node in nodes} == before  # every layer of every node as before
    assert cluster_drift(cluster).in_sync


def test_the_canary_on_a_real_proxysql_cluster_pair_is_not_pulled_by_its_peer_while_it_bakes(
    real_proxysql_factory, galera_lab, live_redis, people
):
    cluster, (canary, peer) = real_cluster(
        real_proxysql_factory, ("2.7.1", "2.7.1"), "real-sync", proxysql_cluster=True
    )
    assert {r[0] for r in canary.admin("SELECT hostname FROM runtime_proxysql_servers")} == {"127.0.0.1"}
    with Poller(interval=0.3):
        rollout = roll_out(cluster, people, RULE, bake_canary_s=PULLS_DUE_S + 2.5)  # past a pull, read through
        watcher, seen = watch_canary_bake(rollout, canary, peer)
        assert services.run(rollout.pk) == RolloutState.DONE, rollout.halt_reason
        watcher.join(5)
    # Not pulled, read all through the bake: past PULLS_DUE_S from the first reading a pull would have landed. (A count
    # of readings stood for that and missed under load: each reading opens six admin connections to real nodes.)
    assert len(seen) >= 3 and seen.at[-1] - seen.at[0] >= PULLS_DUE_S, (len(seen), seen.at)
    assert {str(s) for s in seen} == {str(([10, 20, 77], [10, 20]))}, seen
    for node in (canary, peer):
        assert rule_ids(node) == {layer: [10, 20, 77] for layer in LAYERS}
        assert set(sync_settings(node)["runtime"].values()) == {"3"}  # the sync restored
    time.sleep(PULLS_DUE_S)  # the sync on again: whatever it would pull, it has by now
    assert layers(canary) == layers(peer)
    assert cluster_drift(cluster).in_sync
    # the sync really pulls (so the bake above was long enough to see a pull): an active rule (a real node's runtime
    # and its checksum hold only active ones) loaded on the canary by hand
    canary.admin(
        "INSERT INTO mysql_query_rules (rule_id,active,match_digest,apply) VALUES (99,1,'^SELECT sync_probe',0)",
        "LOAD MYSQL QUERY RULES TO RUNTIME",
    )
    deadline = time.monotonic() + 3 * PULLS_DUE_S
    while 99 not in rule_ids(peer)["runtime"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert 99 in rule_ids(peer)["runtime"], "the peer never pulled: the pair does not sync"


def test_a_rollout_on_a_mixed_2_5_5_and_2_7_1_cluster(real_proxysql_factory, galera_lab, live_redis, people):
    cluster, nodes = real_cluster(real_proxysql_factory, ("2.5.5", "2.7.1"), "real-mixed")
    assert [n.admin("SELECT @@version")[0][0][:5] for n in nodes] == ["2.5.5", "2.7.1"]
    version = config.latest(cluster).number
    with Poller(interval=0.3):
        rollout = roll_out(cluster, people, RULE, bake_canary_s=1)
        assert services.run(rollout.pk) == RolloutState.DONE, rollout.halt_reason
    assert config.latest(cluster).number == version + 1
    for node in nodes:
        assert rule_ids(node) == {layer: [10, 20, 77] for layer in LAYERS}
    assert cluster_drift(cluster).in_sync
