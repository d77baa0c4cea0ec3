"""Fleet rollouts on the lab: clusters of two ProxySQL doubles each (one DoubleServer thread serves them all; each
cluster its own backends on closed ports, as lab/bench_drift_watch.py builds them), adopted through the product,
polled by a thread as the poll tasks do (the gate reads the stored polls), and the change reaching every node
through the change set machinery."""

import threading
import time

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import services as config
from apps.configuration.models import ChangeSet
from apps.fleet import tags
from apps.fleet.models import Cluster, ProxySQLNode
from apps.monitoring import pollers
from apps.rollouts import services
from apps.rollouts.models import ClusterState, Rollout, RolloutState
from conftest import adopt_double
from lab import demo

pytestmark = pytest.mark.django_db(transaction=True)

RULE = {
    "op": "upsert",
    "table": "mysql_query_rules",
    "row": {
        "rule_id": 77,
        "active": 1,
        "match_digest": "^SELECT rollout_probe",
        "destination_hostgroup": 101,
        "apply": 1,
    },
}
LAYERS = {"memory": "mysql_query_rules", "runtime": "runtime_mysql_query_rules", "disk": "disk.mysql_query_rules"}


def build_fleet(factory, count, prefix="fleet", env="prod", first_port=41000):
    doubles = factory(2 * count)
    clusters = []
    for i in range(count):
        backends = tuple(first_port + 3 * i + k for k in range(3))  # closed ports: each cluster its own backends
        for n, double in enumerate(doubles[2 * i : 2 * i + 2], 1):
            demo.admin_sql(
                double.port, *demo.seed_statements(backend_ports=backends), user=double.user, password=double.password
            )
            adopt_double(
                double,
                f"{prefix}-{i}",
                f"{prefix}-{i}-proxysql-{n}",
                kind="galera",
                roles={"writer": 100, "reader": 101, "backup_writer": 102},
            )
        cluster = Cluster.objects.get(name=f"{prefix}-{i}")
        tags.set_tags(cluster, {"env": env}, actor=Actor.command(label="test"))
        clusters.append(cluster)
    return clusters, doubles


def rule_ids(double):
    return {
        layer: sorted(
            int(r[0])
            for r in demo.admin_sql(
                double.port, f"SELECT rule_id FROM {table}", user=double.user, password=double.password
            )
        )
        for layer, table in LAYERS.items()
    }


class Poller:
    """The poll tasks' part the gate reads: a ProxySQL poll round of every node every `interval` seconds."""

    def __init__(self, interval=0.5):
        self.interval, self.stop, self.thread = interval, threading.Event(), None

    def round(self):
        pollers.proxysql_round(list(ProxySQLNode.objects.select_related("cluster")), threads=4)

    def __enter__(self):
        def loop():
            from django.db import connection

            try:
                while not self.stop.is_set():
                    self.round()
                    self.stop.wait(self.interval)
            finally:
                connection.close()

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


def once_baking(rollout, wave, action):
    """A thread that calls action() once the rollout's `wave` bakes (as an operator or a fault would, meanwhile)."""

    def wait():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if Rollout.objects.get(pk=rollout.pk).waves[wave]["state"] == "baking":
                return action()
            time.sleep(0.1)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def test_waves_are_counts_then_shares_of_the_fleet_and_the_last_takes_the_rest():
    assert services.parse_waves("1,1,25%,100%", 20) == [1, 1, 3, 15]
    assert services.parse_waves("1,2,100%", 6) == [1, 2, 3]
    assert services.parse_waves("1,1", 6) == [1, 5]
    assert services.parse_waves("1,50%,100%", 2) == [1, 1]
    for bad in ("", "0", "x", "150%", "-1"):
        with pytest.raises(services.Refused):
            services.parse_waves(bad, 6)


def test_a_harmless_rule_reaches_six_clusters_in_three_waves_every_layer_of_every_node(
    proxysql_double_factory, live_redis, people
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 6)
    others, other_doubles = build_fleet(proxysql_double_factory, 1, prefix="dev", env="dev", first_port=42000)
    rollout = services.plan(
        {"edits": [RULE]},
        services.parse_selector(["env=prod"]),
        "1,2,100%",
        actor=Actor.command(planner),
        reason="route the probe",
        bake_canary_s=1,
        bake_s=0.5,
    )
    plan = services.describe(rollout)
    assert [[c["name"] for c in w["clusters"]] for w in plan["waves"]] == [  # a node of fleet-0, then the rest of it
        ["fleet-0"],
        ["fleet-0"],
        ["fleet-1", "fleet-2"],
        ["fleet-3", "fleet-4", "fleet-5"],
    ]
    assert plan["waves"][0]["node"] == "fleet-0-proxysql-1" and plan["waves"][1]["rest_of_canary"]
    assert plan["waves"][0]["canary"] and all(c["state"] == "pending" for w in plan["waves"] for c in w["clusters"])
    before = {c.pk: config.latest(c).number for c in clusters}
    first = services.first_cluster_plan(rollout)  # read from fleet-0's nodes, nothing saved
    assert (
        first["cluster"] == "fleet-0" and sum("REPLACE INTO mysql_query_rules" in line for line in first["lines"]) == 2
    )
    assert not ChangeSet.objects.exists()

    with Poller():
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.DONE

    rollout.refresh_from_db()
    assert [w["state"] for w in rollout.waves] == ["passed"] * 4
    assert all(w["gate"]["ok"] and w["gate"]["nodes"] for w in rollout.waves)
    assert set(rollout.clusters.values_list("state", flat=True)) == {ClusterState.APPLIED}
    for cluster in clusters:
        assert config.latest(cluster).number == before[cluster.pk] + 1
        assert 77 in [r["rule_id"] for r in config.latest(cluster).content["mysql_query_rules"]]
    for double in doubles:
        assert rule_ids(double) == {layer: [77] for layer in LAYERS}
    assert rule_ids(other_doubles[0]) == {layer: [] for layer in LAYERS}  # not selected: untouched
    actions = list(AuditEvent.objects.filter(target=str(rollout)).order_by("pk").values_list("action", flat=True))
    assert actions[:2] == ["rollout planned", "rollout started"] and actions[-1] == "rollout done"
    assert ChangeSet.objects.filter(reason__startswith=f"{rollout} wave").count() == 6


def test_errors_at_the_canary_halt_it_and_its_rollback_leaves_every_layer_as_before(
    proxysql_double_factory, live_redis, people
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 3)
    before_version = config.latest(clusters[0])
    before_layers = [rule_ids(d) for d in doubles]
    rollout = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="a rule that hurts",
        bake_canary_s=6,
        bake_s=0.5,
    )
    canary = doubles[:2]
    hurt_at, healed = [], threading.Event()

    def hurt():
        # The change's harm as the nodes report it: the canary's nodes count aborted client connections, more every
        # 0.1 s while the rule is in place (the double's rules do not route its modelled traffic, so the errors are
        # made here; the gate reads the polls). A single burst read by a round that began before the change is
        # test_gate_latest_poll.py's.
        hurt_at.append(time.monotonic())
        aborted = 0
        while not healed.is_set():
            aborted += 10000
            for n, double in enumerate(canary):
                double.traffic.set_global("Client_Connections_aborted", aborted * (n + 1))
            healed.wait(0.1)

    with Poller(interval=0.3):
        hurting = once_baking(rollout, 0, hurt)
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        started = time.monotonic()
        try:
            assert services.run(rollout.pk) == RolloutState.HALTED
        finally:
            healed.set()  # the rule rolled back (or the test over): no more errors
        rolled_back_at = time.monotonic()
        halted_in = rolled_back_at - started
        hurting.join(5)
    # From the canary's first errors to its rollback done (polls every 0.3 s here, the gate read every 0.5 s).
    print(f"first errors to rollback done: {rolled_back_at - hurt_at[0]:.2f} s")
    assert rolled_back_at - hurt_at[0] < 5

    rollout.refresh_from_db()
    assert "wave 0 failed its health gate" in rollout.halt_reason and "errors/s since the change" in rollout.halt_reason
    assert halted_in < 6, halted_in  # the gate failed before the end of the 6 s bake
    assert [w["state"] for w in rollout.waves] == ["rolled_back", "pending", "pending"]
    states = dict(rollout.clusters.values_list("cluster__name", "state"))
    assert states == {
        "fleet-0": ClusterState.ROLLED_BACK,
        "fleet-1": ClusterState.PENDING,
        "fleet-2": ClusterState.PENDING,
    }
    # the canary (one node) rolled back by its own operation: no version was recorded, none to revert
    assert config.latest(clusters[0]) == before_version
    assert [rule_ids(d) for d in doubles] == before_layers
    assert AuditEvent.objects.filter(target=str(rollout), action="rollout halted").exists()


def test_abort_after_wave_two_rolls_back_waves_two_one_zero(proxysql_double_factory, live_redis, people):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 4)
    rollout = services.plan(
        {"edits": [RULE]},
        {"names": [c.name for c in clusters]},
        "1,1,100%",
        actor=Actor.command(planner),
        reason="then changed our mind",
        bake_canary_s=0.2,
        bake_s=3,
    )

    with Poller():
        aborter = once_baking(
            rollout, 2, lambda: services.abort(Rollout.objects.get(pk=rollout.pk), actor=Actor.command(starter))
        )
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.ROLLED_BACK
        aborter.join(5)

    rollout.refresh_from_db()
    # waves: a node of fleet-0, the rest of fleet-0, fleet-1, then fleet-2 and fleet-3
    assert [w["state"] for w in rollout.waves] == ["rolled_back", "rolled_back", "rolled_back", "pending"]
    reverts = list(ChangeSet.objects.filter(source="revert").order_by("pk").values_list("cluster__name", flat=True))
    assert reverts == ["fleet-1", "fleet-0"]  # newest wave first
    for double in doubles:
        assert rule_ids(double) == {layer: [] for layer in LAYERS}


def test_a_pause_waits_for_the_wave_under_way_and_a_resume_goes_on(proxysql_double_factory, live_redis, people):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 3, first_port=47000)
    rollout = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="paused midway",
        bake_canary_s=1.5,
        bake_s=0.2,
    )

    with Poller():
        pauser = once_baking(
            rollout, 0, lambda: services.pause(Rollout.objects.get(pk=rollout.pk), actor=Actor.command(starter))
        )
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.PAUSED
        pauser.join(5)
        rollout.refresh_from_db()
        # the canary's bake is inside its cluster's operation: the rest of fleet-0 (wave 1) ends before the pause
        assert [w["state"] for w in rollout.waves] == ["passed", "passed", "pending"]
        assert [rule_ids(d)["runtime"] for d in doubles] == [[77], [77], [], [], [], []]
        assert services.resume_stale(stale_after_s=0) == []  # a paused rollout is not a dead worker's
        services.resume(rollout, actor=Actor.command(starter), enqueue=False)
    rollout.refresh_from_db()
    assert rollout.state == RolloutState.DONE
    for double in doubles:
        assert rule_ids(double) == {layer: [77] for layer in LAYERS}


def test_an_alert_of_the_canary_fired_during_its_bake_halts_it(proxysql_double_factory, live_redis, people):
    from django.utils import timezone

    from apps.alerts.models import Alert

    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=48000)
    rollout = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="alerts gate",
        bake_canary_s=8,
        bake_s=0.5,
    )
    node = clusters[0].proxysql_nodes.first()

    def fire():  # the row the alert evaluation writes when a rule fires (apps/alerts/evaluate.py)
        now = timezone.now()
        Alert.objects.create(
            rule="writer_none",
            cluster=clusters[0],
            target=f"c{clusters[0].pk}",
            subject=f"n{node.pk}:hg100",
            subject_label="writer hostgroup 100",
            node=node,
            severity="critical",
            state="firing",
            summary="no usable ONLINE writer",
            since=now,
            fires_at=now,
            fired_at=now,
            last_seen_at=now,
            active_key=f"writer_none|n{node.pk}:hg100",
        )

    with Poller():
        firing = once_baking(rollout, 0, fire)
        services.start(rollout, actor=Actor.command(starter), enqueue=False)
        assert services.run(rollout.pk) == RolloutState.HALTED
        firing.join(5)
    rollout.refresh_from_db()
    assert "alert writer_none firing on fleet-0: no usable ONLINE writer" in rollout.halt_reason
    assert rollout.waves[0]["gate"]["alerts"] == ["writer_none"]
    assert [rule_ids(d) for d in doubles] == [{layer: [] for layer in LAYERS}] * 4


def test_the_plan_checks_the_change_as_the_planner_would_create_it_and_writes_no_change_set(
    proxysql_double_factory, operator_user, admin_user_role
):
    """Each selected cluster's change is validated (configuration's validate_change_set) in the planner's name:
    an admin may roll out a scheduler row, an operator is refused as a change set refuses them; nothing written."""
    from apps.configuration.models import ConfigSecret

    build_fleet(proxysql_double_factory, 2, first_port=49000)
    scheduler = {
        "op": "upsert",
        "table": "scheduler",
        "row": {
            "id": 1,
            "active": 1,
            "interval_ms": 10000,
            "filename": "/bin/true",
            "arg1": None,
            "arg2": None,
            "arg3": None,
            "arg4": None,
            "arg5": None,
            "comment": "",
        },
    }
    user = {
        "op": "upsert",
        "table": "mysql_users",
        "row": {"username": "probe", "password": "probe-secret", "default_hostgroup": 100},
    }
    audited_last = AuditEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    with pytest.raises(services.Refused, match="fleet-0: Only an admin may change scheduler rows"):
        services.plan(
            {"edits": [scheduler]},
            {"tags": [["env", "prod"]]},
            "1,100%",
            actor=Actor.command(operator_user),
            reason="a job on the host",
        )
    refusals = AuditEvent.objects.filter(pk__gt=audited_last).values_list("action", flat=True)
    assert list(refusals) == ["change set refused"]  # audited as a change set's refusal is, and nothing else
    rollout = services.plan(
        {"edits": [scheduler, user]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(admin_user_role),
        reason="a job on the host",
    )
    assert AuditEvent.objects.order_by("-pk").values_list("action", "target").first() == (
        "rollout planned",
        str(rollout),
    )
    assert (
        not ChangeSet.objects.exists() and not ConfigSecret.objects.filter(ref__startswith="mysql_users/probe").exists()
    )
