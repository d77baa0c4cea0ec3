"""A switchover through the API on the lab, run by a real Celery worker: plan (guards and SQL per node), confirm,
follow the operation to done; the writer moved on both ProxySQL doubles; audited with the token's name."""

import time

import pytest

from apps.accounts import tokens
from apps.audit.models import AuditEvent
from apps.fleet.models import HostgroupMembership, Server
from apps.operations.tests.conftest import runtime

from .conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db(transaction=True)


def test_plan_confirm_and_follow_a_switchover_to_done(
    adopted_lab, operator_user, redis_server, celery_broker, celery_factory
):
    cluster, (first, second) = adopted_lab
    celery_factory("worker", redis_server)
    api = ApiClient(tokens.create(operator_user, "runbook")[1])
    target = Server.objects.get(port=3312)
    plan = api.post(
        f"/api/v1/clusters/{cluster.pk}/switchover/",
        {"new_writer": target.pk, "lower_autoinc": True, "drain_timeout_ms": 2000},
    )
    assert plan.status_code == 201, plan.content
    op = plan.json()
    assert op["state"] == "planned" and op["title"] == "Switchover galera-lab: writer 127.0.0.1:3311 → 127.0.0.1:3312"
    assert all(g["passed"] for g in op["plan"]["guards"]) and op["steps"] == []
    drain = next(s for s in op["plan"]["steps"] if s["key"] == "drain")
    assert sorted(spec["name"] for spec in drain["nodes"].values()) == ["proxysql-1", "proxysql-2"]
    assert all(
        spec["sql"][0]
        == "UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=100 AND "
        "hostname='127.0.0.1' AND port=3311"
        and spec["rollback"]
        for spec in drain["nodes"].values()
    )

    confirmed = api.post(f"/api/v1/operations/{op['id']}/confirm/")
    # The answer reads the operation again after handing it to the worker, which may have started it already (seen
    # on MariaDB in a sharded run: "running"): confirmed and queued or under way, never refused or planned.
    assert confirmed.status_code == 200 and confirmed.json()["state"] in ("pending", "running"), confirmed.content
    deadline, seen = time.monotonic() + 30, set()
    while True:
        followed = api.get(f"/api/v1/operations/{op['id']}/").json()
        seen.add(followed["state"])
        if followed["finished"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert followed["state"] == "done", followed["error"]
    assert [s["state"] for s in followed["steps"]] == ["done"] * len(op["plan"]["steps"])
    assert followed["timings"]["total_ms"] > 0 and followed["duration_ms"] is not None
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    assert HostgroupMembership.objects.get(hostgroup_id=100).server == target
    assert {e.action for e in AuditEvent.objects.filter(actor="otto-operator (token runbook)")} == {
        "switchover planned",
        "switchover confirmed",
    }
    # The worker writes its "done" event just after the state (and the inventory's next version): wait for it.
    deadline = time.monotonic() + 10
    while not AuditEvent.objects.filter(action="switchover done", actor="otto-operator").exists():
        assert time.monotonic() < deadline, "the worker's 'switchover done' event never came"
        time.sleep(0.05)


def test_the_apis_default_takes_the_autoinc_way_and_an_explicit_false_keeps_the_old_one(adopted_lab, operator_user):
    """Issue 23: the same default as the page and the command. The lab's writer sessions are pinned by
    auto-increment tokens: with lower_autoinc left out, the plan lowers the variable for the drain and says why."""
    cluster, _ = adopted_lab
    api = ApiClient(tokens.create(operator_user, "runbook")[1])
    target = Server.objects.get(port=3312)
    default = api.post(f"/api/v1/clusters/{cluster.pk}/switchover/", {"new_writer": target.pk}).json()["plan"]
    assert default["options"]["lower_autoinc"] is True and default["facts"]["autoinc_way"]["chosen_by"] == "planner"
    assert "autoinc_off" in [s["key"] for s in default["steps"]]
    # The lab's extended processlist is off: the reason is inferred, and said as a precaution (issue 36 item 4).
    assert default["facts"]["autoinc_way"]["reason"].endswith(
        "lowering it to 0 for the drain, restored after (a precaution)"
    )
    old = api.post(f"/api/v1/clusters/{cluster.pk}/switchover/", {"new_writer": target.pk, "lower_autoinc": False})
    assert old.status_code == 201 and old.json()["plan"]["options"]["lower_autoinc"] is False
    assert "autoinc_off" not in [s["key"] for s in old.json()["plan"]["steps"]]


def test_new_writer_is_an_id_or_host_port_as_the_command_takes_it(adopted_lab, operator_user):
    """Issue 23 §5: a runbook names the backend as the command does; both spellings plan the same switchover."""
    cluster, _ = adopted_lab
    api = ApiClient(tokens.create(operator_user, "runbook")[1])
    target = Server.objects.get(port=3312)
    url = f"/api/v1/clusters/{cluster.pk}/switchover/"
    by_id = api.post(url, {"new_writer": target.pk})
    by_endpoint = api.post(url, {"new_writer": "127.0.0.1:3312"})
    assert by_id.status_code == by_endpoint.status_code == 201, by_endpoint.content
    assert by_endpoint.json()["plan"]["options"]["new_writer"] == target.pk
    assert by_endpoint.json()["plan"]["steps"] == by_id.json()["plan"]["steps"]
    assert api.post(url, {"new_writer": str(target.pk)}).status_code == 201
    failover = api.post(f"/api/v1/clusters/{cluster.pk}/failover/", {"new_writer": "127.0.0.1:3313"})
    assert failover.status_code == 201 and failover.json()["plan"]["options"]["new"] == Server.objects.get(port=3313).pk
    for value, message in (
        ("127.0.0.1:3399", "No backend 127.0.0.1:3399 in cluster galera-lab."),
        ("127.0.0.1", "Give a backend id or HOST:PORT: '127.0.0.1' is not HOST:PORT."),
        ("127.0.0.1:99999", "Give a backend id or HOST:PORT: port 99999 is out of range (1-65535)."),
        (True, "Give a backend id or HOST:PORT: bool is neither a number nor a string."),
        (["127.0.0.1:3312"], "Give a backend id or HOST:PORT: list is neither a number nor a string."),
    ):
        response = api.post(url, {"new_writer": value})
        assert error_of(response, 400)["fields"] == {"new_writer": [message]}, value
