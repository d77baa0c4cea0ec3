"""manage.py rollout: plan a YAML fragment over tagged clusters (the waves printed, exit 0), start it by a second
operator (two-person rule), its status; refusals exit 2 and leave nothing."""
import json

import pytest
from django.core.management import call_command

from apps.configuration import services as config
from apps.fleet.models import Cluster
from apps.rollouts.models import Rollout
from apps.rollouts.tests.test_rollouts import LAYERS, Poller, build_fleet, rule_ids

pytestmark = pytest.mark.django_db(transaction=True)

FRAGMENT = """\
mysql_query_rules:
  - {rule_id: 88, active: 1, match_digest: '^SELECT fragment', destination_hostgroup: 101, apply: 1}
"""


def rollout_command(capsys, *args):
    with pytest.raises(SystemExit) as ended:
        call_command("rollout", *args)
    return ended.value.code, capsys.readouterr().out


def test_plan_then_start_by_a_second_operator_then_status(proxysql_double_factory, live_redis, people, tmp_path,
                                                          capsys):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 3, first_port=43000)
    Cluster.objects.filter(pk=clusters[1].pk).update(two_person_rule=True)
    change = tmp_path / "rule.yaml"
    change.write_text(FRAGMENT)
    code, out = rollout_command(capsys, "plan", str(change), "--select", "env=prod", "--waves", "1,100%",
                                "--user", planner.username, "--reason", "fragment", "--bake-canary", "0.5",
                                "--bake", "0.5", "--json")
    assert code == 0
    doc = json.loads(out)
    assert [[c["name"] for c in w["clusters"]] for w in doc["waves"]] == [["fleet-0"], ["fleet-1", "fleet-2"]]
    rollout = Rollout.objects.get(pk=doc["rollout"])

    code, out = rollout_command(capsys, "start", "--id", str(rollout.pk), "--user", planner.username)
    assert code == 2 and "require(s) two people" in out  # fleet-1 has the two-person rule

    with Poller():
        code, out = rollout_command(capsys, "start", "--id", str(rollout.pk), "--user", starter.username)
    assert code == 0, out
    assert "wave 1 passed: fleet-1 [applied], fleet-2 [applied]" in out
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
    for args, said in ((["plan", str(good), "--select", "env=nowhere"], "no cluster matches"),
                       (["plan", str(good), "--select", "env=prod", "--waves", "0"], "neither a count"),
                       (["plan", str(bad), "--select", "env=prod"], "not cluster")):
        code, out = rollout_command(capsys, *args, "--user", planner.username, "--reason", "r")
        assert (code, said in out) == (2, True), out
    assert not Rollout.objects.exists()
