"""manage.py rollout: plan a YAML fragment over tagged clusters (the waves printed, exit 0), start it by a second
operator (two-person rule), its status; refusals exit 2 and leave nothing."""

import json

import pytest
from django.core.management import call_command

from apps.audit.actor import Actor
from apps.configuration import services as config
from apps.fleet.models import Cluster
from apps.rollouts.models import Rollout
from apps.rollouts import services
from apps.rollouts.tests.test_rollouts import LAYERS, RULE, Poller, build_fleet, once_baking, rule_ids

pytestmark = pytest.mark.django_db(transaction=True)

FRAGMENT = """\
mysql_query_rules:
  - {rule_id: 88, active: 1, match_digest: '^SELECT fragment', destination_hostgroup: 101, apply: 1}
"""


def rollout_command(capsys, *args):
    with pytest.raises(SystemExit) as ended:
        call_command("rollout", *args)
    return ended.value.code, capsys.readouterr().out


def test_plan_then_start_by_a_second_operator_then_status(
    proxysql_double_factory, live_redis, people, tmp_path, capsys
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 3, first_port=43000)
    Cluster.objects.filter(pk=clusters[1].pk).update(two_person_rule=True)
    change = tmp_path / "rule.yaml"
    change.write_text(FRAGMENT)
    code, out = rollout_command(
        capsys,
        "plan",
        str(change),
        "--select",
        "env=prod",
        "--waves",
        "1,100%",
        "--user",
        planner.username,
        "--reason",
        "fragment",
        "--bake-canary",
        "0.5",
        "--bake",
        "0.5",
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    assert [[c["name"] for c in w["clusters"]] for w in doc["waves"]] == [
        ["fleet-0"],
        ["fleet-0"],
        ["fleet-1", "fleet-2"],
    ]
    rollout = Rollout.objects.get(pk=doc["rollout"])
    code, out = rollout_command(
        capsys,
        "plan",
        str(change),
        "--select",
        "name=fleet-2",
        "--waves",
        "1",
        "--user",
        planner.username,
        "--reason",
        "the SQL",
    )
    assert code == 0 and "the change set of fleet-2 (the first cluster), planned now:" in out, out
    assert "REPLACE INTO mysql_query_rules" in out and "LOAD MYSQL QUERY RULES TO RUNTIME;" in out, out

    code, out = rollout_command(capsys, "start", "--id", str(rollout.pk), "--user", planner.username)
    assert code == 2 and "require(s) two people" in out  # fleet-1 has the two-person rule

    with Poller():
        code, out = rollout_command(capsys, "start", "--id", str(rollout.pk), "--user", starter.username)
    assert code == 0, out
    assert "wave 0 (canary) passed: fleet-0 [applied] (node fleet-0-proxysql-1 only)" in out, out
    assert "wave 2 passed: fleet-1 [applied], fleet-2 [applied]" in out
    for double in doubles:
        assert rule_ids(double) == {layer: [88] for layer in LAYERS}
    for cluster in clusters:  # the fragment named the rules only: the servers and users are as they were
        content = config.latest(cluster).content
        assert [r["rule_id"] for r in content["mysql_query_rules"]] == [88]
        assert len(content["mysql_servers"]) == 6
    assert rollout_command(capsys, "status", str(rollout.pk))[0] == 0


def test_refusals_exit_2_and_plan_nothing(proxysql_double_factory, people, tmp_path, capsys):
    planner, _ = people
    build_fleet(proxysql_double_factory, 1, first_port=44000)
    good, bad = tmp_path / "rule.yaml", tmp_path / "bad.yaml"
    good.write_text(FRAGMENT)
    bad.write_text("cluster: fleet-0\nmysql_query_rules: []\n")
    for args, said in (
        (["plan", str(good), "--select", "env=nowhere"], "no cluster matches"),
        (["plan", str(good), "--select", "env=prod", "--waves", "0"], "neither a count"),
        (["plan", str(bad), "--select", "env=prod"], "not cluster"),
    ):
        code, out = rollout_command(capsys, *args, "--user", planner.username, "--reason", "r")
        assert (code, said in out) == (2, True), out
    assert not Rollout.objects.exists()


def test_a_halt_at_the_second_cluster_keeps_the_canary_s_until_abort_rolls_it_back(
    proxysql_double_factory, live_redis, people, capsys
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=49000)
    rollout = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,1",
        actor=Actor.command(planner),
        reason="wave 2 hurts",
        bake_canary_s=0.3,
        bake_s=6,
    )

    def hurt():
        for n, double in enumerate(doubles[2:]):
            double.traffic.set_global("Client_Connections_aborted", 100000 * (n + 1))

    with Poller(interval=0.3):
        hurting = once_baking(rollout, 2, hurt)
        code, out = rollout_command(capsys, "start", "--id", str(rollout.pk), "--user", starter.username)
        hurting.join(5)
    assert code == 3 and "halted: wave 2 failed its health gate" in out, out
    assert "wave 0 (canary) passed: fleet-0 [applied]" in out and "wave 2 rolled_back: fleet-1 [rolled_back]" in out
    assert [rule_ids(d)["disk"] for d in doubles] == [[77], [77], [], []]

    code, out = rollout_command(capsys, "abort", str(rollout.pk), "--user", starter.username)
    assert code == 3 and "wave 0 (canary) rolled_back: fleet-0 [rolled_back]" in out, out
    for double in doubles:
        assert rule_ids(double) == {layer: [] for layer in LAYERS}
    assert rollout_command(capsys, "status", str(rollout.pk))[0] == 3
