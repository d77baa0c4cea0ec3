"""ProxySQL Cluster sync and the product's operations, on two ProxySQL doubles in front of the Galera lab (not
collected by pytest: no test_ prefix; run by path, prints its figures):

    LAB_KEEP=1 SWITCHOVERS=10 .venv/bin/pytest lab/bench_cluster_sync.py -q -s

- switchovers with native sync ON at ProxySQL's defaults (adopted_cluster_lab: the plan holds the sync of the modules
  it loads for the operation, sync_hold.py) against the same switchovers with sync OFF (adopted_lab): the writer hold
  per ProxySQL node (drain LOAD -> move LOAD, from the doubles' statement logs), the whole operation, the hold and
  restore steps, and the pulls the doubles made meanwhile (there must be none);
- change sets of one module (a reader's weight) on nodes with sync ON at the defaults, in each of the cluster's two
  ways (Cluster.cluster_sync_mode): "hold" (every node written, the sync held) and "propagate" (one node written,
  the peers' pull waited for): the whole operation and the steps each way adds;
- propagation per module with sync on at the defaults (check interval 1 s, diffs_before_sync 3): from a LOAD on one
  double to the peer's checksum equal (read every 20 ms).
"""

import os
import statistics
import time

import pytest

from apps.audit.actor import Actor
from apps.fleet.models import Server
from apps.operations import executor, services, switchover

SWITCHOVERS = int(os.environ.get("SWITCHOVERS", "10"))
LOAD_SERVERS = "LOAD MYSQL SERVERS TO RUNTIME"


def summary(values):
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))]
    return f"median {statistics.median(values):.1f} ms, p95 {p95:.1f} ms, max {max(values):.1f} ms (n={len(values)})"


def switchovers(cluster, doubles, user):
    for d in doubles:
        d.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
        d.traffic.set_sessions(hostgroup=101, count=8, kind="read")
    started = time.time()
    holds, totals, hold_steps, restore_steps = [], [], [], []
    for i in range(SWITCHOVERS):
        marks = [d.engine.log_seq for d in doubles]
        plan = switchover.plan_switchover(
            cluster, Server.objects.get(cluster=cluster, port=(3312, 3311)[i % 2]), drain_timeout_ms=3000
        )
        op = services.save_plan(plan, actor=Actor.command(user))
        services.confirm(op, actor=Actor.command(user), enqueue=False)
        executor.run(op.pk)
        op.refresh_from_db()
        assert op.state == "done", op.error
        totals.append(op.timings["total_ms"])
        hold_steps += [op.timings[k] for k in ("sync_hold",) if k in op.timings]
        restore_steps += [op.timings[k] for k in ("sync_restore",) if k in op.timings]
        for d, mark in zip(doubles, marks):
            loads = [e["t"] for e in list(d.engine.log) if e["seq"] > mark and e["sql"] == LOAD_SERVERS]
            holds.append((loads[1] - loads[0]) * 1000)  # the drain's LOAD, then the move's
    time.sleep(4.0)  # past 3 checks: a pull due would have happened
    pulls = sum(1 for d in doubles for p in d.status()["cluster"]["pulls"] if p[0] >= started)
    return {
        "writer hold per node (drain LOAD -> move LOAD)": summary(holds),
        "switchover total": summary(totals),
        "sync hold step": summary(hold_steps) if hold_steps else "none (no sync to hold)",
        "sync restore step": summary(restore_steps) if restore_steps else "none",
        "pulls by the doubles during the switchovers": pulls,
    }


def report(title, figures):
    print(f"\n{title}")
    for k, v in figures.items():
        print(f"  {k}: {v}")


def test_switchovers_sync_on(adopted_cluster_lab, operator_user):
    cluster, doubles = adopted_cluster_lab
    report(
        f"{SWITCHOVERS} switchovers, ProxySQL Cluster sync ON at the defaults (held by the plan)",
        switchovers(cluster, doubles, operator_user),
    )


def test_switchovers_sync_off(adopted_lab, operator_user):
    cluster, doubles = adopted_lab
    report(f"{SWITCHOVERS} switchovers, ProxySQL Cluster sync OFF", switchovers(cluster, doubles, operator_user))


CHANGE_SETS = int(os.environ.get("CHANGE_SETS", "5"))


@pytest.mark.parametrize("mode", ["hold", "propagate"])
def test_change_sets_each_way(adopted_cluster_lab, operator_user, mode):
    from apps.configuration import services as config
    from apps.configuration.tests.test_change_sets import run
    from apps.fleet.models import Cluster

    cluster, doubles = adopted_cluster_lab
    Cluster.objects.filter(pk=cluster.pk).update(cluster_sync_mode=mode)
    cluster.refresh_from_db()
    time.sleep(1.1)  # past the seed LOADs' epoch second
    totals, added = [], []
    for i in range(CHANGE_SETS):
        reader = next(
            r for r in config.latest(cluster).content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3313
        )
        cs = config.start_change_set(cluster, actor=Actor.command(operator_user), reason="bench")
        config.add_edit(
            cs,
            {
                "op": "upsert",
                "table": "mysql_servers",
                "key": [101, "127.0.0.1", 3313],
                "row": {**reader, "weight": 10 + i},
            },
            actor=Actor.command(operator_user),
        )
        op, _ = run(cs, operator_user)
        assert op.state == "done", op.error
        totals.append(op.timings["total_ms"])
        added.append(sum(op.timings.get(k, 0) for k in ("sync_hold", "sync_restore", "sync_wait")))
        time.sleep(1.1)  # the next LOAD in another second
    report(
        f"{CHANGE_SETS} change sets of one module, sync ON at the defaults, the cluster's way: {mode}",
        {
            "operation total": summary(totals),
            "its sync steps (hold + restore, or the wait for the peer's pull)": summary(added),
        },
    )


CHANGES = {
    "mysql_servers": [
        "INSERT INTO mysql_servers (hostgroup_id, hostname, port) VALUES (100, '127.0.0.1', {n})",
        "LOAD MYSQL SERVERS TO RUNTIME",
    ],
    "mysql_users": [
        "INSERT INTO mysql_users (username, password, default_hostgroup) VALUES ('u{n}', 'p', 100)",
        "LOAD MYSQL USERS TO RUNTIME",
    ],
    "mysql_query_rules": [
        "INSERT INTO mysql_query_rules (rule_id, active, match_digest, destination_hostgroup, apply)"
        " VALUES ({n}, 1, '^SELECT', 101, 1)",
        "LOAD MYSQL QUERY RULES TO RUNTIME",
    ],
    "mysql_variables": ["SET mysql-max_connections={n}", "LOAD MYSQL VARIABLES TO RUNTIME"],
    "admin_variables": ["SET admin-cluster_check_status_frequency={n}", "LOAD ADMIN VARIABLES TO RUNTIME"],
}


def checksum(double, name):
    return double.query(f"SELECT checksum FROM runtime_checksums_values WHERE name='{name}'")[1][0][0]


@pytest.mark.parametrize("rounds", [int(os.environ.get("ROUNDS", "5"))])
def test_propagation_per_module(proxysql_cluster_pair, rounds):
    a, b = proxysql_cluster_pair
    figures = {}
    for module, statements in CHANGES.items():
        took = []
        for i in range(rounds):
            time.sleep(1.0)  # a LOAD in a second of its own: its epoch is newer than the last
            for sql in statements:
                a.query(sql.format(n=4000 + i))
            loaded, want = time.monotonic(), checksum(a, module)
            while checksum(b, module) != want:
                assert time.monotonic() - loaded < 10, f"{module} did not propagate within 10 s"
                time.sleep(0.02)
            took.append((time.monotonic() - loaded) * 1000)
        figures[module] = summary(took)
    report(
        f"propagation per module, sync on at the defaults (check 1 s, diffs_before_sync 3), {rounds} LOADs each",
        figures,
    )
