"""Writes through the API follow the browser's rules, because they call the same services: the two-person
rule, an admin's override with a reason, the cluster's configuration confirm role; change sets from JSON
edits and from a YAML file, planned, confirmed, applied to the lab, diffed, exported, reverted, written back;
and a viewer's token reads everything a viewer sees and changes nothing."""

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from django.utils import timezone

from apps.accounts import tokens
from apps.alerts.models import Alert, Silence
from apps.audit.models import AuditEvent
from apps.configuration.models import ChangeSet, ConfigSecret, ConfigVersion
from apps.digests.tests.factories import digest
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.operations import executor
from apps.operations.models import Operation
from apps.reports import periods
from apps.reports import services as reports
from lab import demo

from .conftest import ApiClient, api_patterns, kwargs_for, view_class
from .test_reads import poll


def client_of(user, name="t"):
    return ApiClient(tokens.create(user, name)[1])


def expect(response, status):
    assert response.status_code == status, response.content[:600]
    return response.json()


def run(op_id):
    """Run a confirmed operation here, as the worker would."""
    executor.run(op_id)
    return Operation.objects.get(pk=op_id)


@pytest.mark.django_db
def test_the_two_person_rule_holds_through_the_api(adopted_lab, operator_user, django_user_model):
    cluster, _ = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(two_person_rule=True)
    second = django_user_model.objects.create_user(username="olga-operator", password="x")
    second.groups.add(operator_user.groups.get())
    planner, confirmer = client_of(operator_user, "a"), client_of(second, "b")
    op = expect(planner.post(f"/api/v1/clusters/{cluster.pk}/repair/"), 201)
    assert all(g["passed"] for g in op["plan"]["guards"])
    refused = expect(planner.post(f"/api/v1/operations/{op['id']}/confirm/"), 409)
    assert refused["error"]["code"] == "refused" and "requires two people" in refused["error"]["message"]
    assert AuditEvent.objects.get(action="repair refused").actor == "otto-operator (token a)"
    confirmed = expect(confirmer.post(f"/api/v1/operations/{op['id']}/confirm/"), 200)
    assert confirmed["state"] == "pending" and confirmed["confirmed_by"] == "olga-operator"
    assert [s["key"] for s in confirmed["steps"]] == [s["key"] for s in op["plan"]["steps"]]
    again = expect(confirmer.post(f"/api/v1/operations/{op['id']}/confirm/"), 409)
    assert "already confirmed" in again["error"]["message"]


@pytest.mark.django_db
def test_a_finish_pending_is_its_own_state_and_the_operator_finishes_it(adopted_lab, operator_user, live_redis):
    """Past the switchover's point of no return the second node stops answering: the API says finish_pending (a
    state its filter knows), its node's statements are a finish, not a rollback, and the operator's "run it now"
    ends the operation done once the node answers."""
    cluster, (first, second) = adopted_lab
    demo.admin_sql(
        second.port,
        'LAB FAIL_STATEMENTS {"text": "SET variable_value=\'5\'", "pause": true}',
        user=second.user,
        password=second.password,
    )
    operator = client_of(operator_user)
    op = expect(
        operator.post(
            f"/api/v1/clusters/{cluster.pk}/switchover/",
            {"new_writer": Server.objects.get(port=3312).pk, "lower_autoinc": True},
        ),
        201,
    )
    expect(operator.post(f"/api/v1/operations/{op['id']}/confirm/"), 200)
    assert run(op["id"]).state == "finish_pending"
    second.set_mode("normal")
    listed = expect(operator.get("/api/v1/operations/", {"state": "finish_pending"}), 200)["results"]
    assert [(o["id"], o["finished"]) for o in listed] == [(op["id"], False)]
    one = expect(operator.get(f"/api/v1/operations/{op['id']}/"), 200)
    assert one["state"] == "finish_pending" and "FINISH PENDING on proxysql-2" in one["error"]
    assert [(p["node_name"], p["finish_or_rollback"], len(p["statements"])) for p in one["pending_rollbacks"]] == [
        ("proxysql-2", "finish", 2)
    ]
    finished = expect(operator.post(f"/api/v1/operations/{op['id']}/rollback-now/"), 200)
    assert finished["state"] == "done" and finished["rollback_tries"] == [
        "proxysql-2: 2 statement(s) ran; the operation is finished there"
    ]
    assert expect(operator.get("/api/v1/operations/", {"state": "finish_pending"}), 200)["results"] == []


@pytest.mark.django_db
def test_failed_guards_need_an_admin_and_a_reason(adopted_lab, operator_user, admin_user_role):
    cluster, _ = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(min_available_readers=5)
    operator, admin = client_of(operator_user), client_of(admin_user_role, "root")
    server = Server.objects.get(port=3313)
    op = expect(
        operator.post(f"/api/v1/servers/{server.pk}/drain/", {"note": "disk swap", "drain_timeout_ms": 2000}), 201
    )
    failed = [g for g in op["plan"]["guards"] if not g["passed"]]
    assert [(g["key"], g["overridable"]) for g in failed] == [("min_readers", True)]
    assert (
        "Only an admin can override"
        in expect(operator.post(f"/api/v1/operations/{op['id']}/confirm/"), 409)["error"]["message"]
    )
    assert expect(admin.post(f"/api/v1/operations/{op['id']}/confirm/", {"override_reason": "  "}), 409)
    done = expect(
        admin.post(f"/api/v1/operations/{op['id']}/confirm/", {"override_reason": "readers are idle at night"}), 200
    )
    assert done["state"] == "pending" and done["override_reason"] == "readers are idle at night"
    event = AuditEvent.objects.get(action="drain confirmed")
    assert event.actor == "ada-admin (token root)" and event.details["overridden_guards"] == ["min_readers"]
    finished = run(op["id"])
    assert finished.state == "done", finished.error
    followed = expect(operator.get(f"/api/v1/operations/{op['id']}/"), 200)
    assert followed["finished"] and {s["state"] for s in followed["steps"]} == {"done"}
    assert Server.objects.get(port=3313).maintenance


@pytest.fixture
def config_client(operator_user):
    return client_of(operator_user, "config")


def new_change_set(api, cluster, edits, reason="raise the connection limit"):
    return expect(
        api.post(f"/api/v1/clusters/{cluster.pk}/config/change-sets/", {"reason": reason, "edits": edits}), 201
    )


@pytest.mark.django_db
def test_an_admin_only_cluster_refuses_an_operators_confirm(adopted_lab, operator_user, admin_user_role, config_client):
    cluster, _ = adopted_lab
    Cluster.objects.filter(pk=cluster.pk).update(config_confirm_role="admin")
    cs = new_change_set(config_client, cluster, [{"op": "set", "name": "mysql-max_connections", "value": "2048"}])
    planned = expect(config_client.post(f"/api/v1/config/change-sets/{cs['id']}/plan/"), 201)
    assert planned["change_set"]["state"] == "planned" and planned["operation"]["kind"] == "config"
    refused = expect(config_client.post(f"/api/v1/config/change-sets/{cs['id']}/confirm/"), 409)
    assert "only an admin confirms configuration changes" in refused["error"]["message"]
    admin = client_of(admin_user_role)
    assert expect(admin.post(f"/api/v1/config/change-sets/{cs['id']}/confirm/"), 200)["state"] == "pending"


@pytest.mark.django_db(transaction=True)
def test_change_sets_from_json_and_yaml_applied_diffed_exported_reverted(
    adopted_lab, operator_user, config_client, redis_server, celery_broker
):
    cluster, (first, second) = adopted_lab
    cs = new_change_set(
        config_client,
        cluster,
        [
            {"op": "set", "name": "mysql-max_connections", "value": "2048"},
            {
                "op": "upsert",
                "table": "mysql_users",
                "row": {"username": "api-app", "password": "s3cret!", "default_hostgroup": 100},
            },
        ],
    )
    assert cs["state"] == "draft" and [e["describe"] for e in cs["edits"]][0] == "set mysql-max_connections = 2048"
    stored = ChangeSet.objects.get(pk=cs["id"]).edits[1]["row"]["password"]
    assert set(stored) == {"secret"} and "s3cret" not in str(cs)  # kept encrypted, named by reference
    assert ConfigSecret.objects.get(ref=stored["secret"]).value.startswith("*")  # the mysql_native_password hash
    planned = expect(config_client.post(f"/api/v1/config/change-sets/{cs['id']}/plan/"), 201)
    sql = [q for step in planned["operation"]["plan"]["steps"] for spec in step["nodes"].values() for q in spec["sql"]]
    assert "UPDATE global_variables SET variable_value='2048' WHERE variable_name='mysql-max_connections'" in sql
    assert not any("s3cret" in q for q in sql)
    op = expect(config_client.post(f"/api/v1/config/change-sets/{cs['id']}/confirm/"), 200)
    assert run(op["id"]).state == "done"
    for double in (first, second):
        assert demo.admin_sql(
            double.port,
            "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-max_connections'",
            user=double.user,
            password=double.password,
        )[0] == ("2048",)
    versions = expect(config_client.get(f"/api/v1/clusters/{cluster.pk}/config/versions/"), 200)
    assert [v["number"] for v in versions["results"]] == [2, 1] and versions["results"][0]["parent"] == 1
    diff = expect(config_client.get(f"/api/v1/clusters/{cluster.pk}/config/diff/", {"a": 1, "b": 2}), 200)
    assert {(line["table"], tuple(line["key"])) for line in diff["lines"]} >= {
        ("global_variables", ("mysql-max_connections",)),
        ("mysql_users", ("api-app",)),
    }
    v2 = ConfigVersion.objects.get(cluster=cluster, number=2)
    export = config_client.get(f"/api/v1/config/versions/{v2.pk}/export/")
    assert export["Content-Type"].startswith("application/yaml")
    doc = yaml.safe_load(export.content)
    assert doc["version"] == 2 and doc["global_variables"]["mysql-max_connections"] == "2048"

    same = expect(
        config_client.post(
            f"/api/v1/clusters/{cluster.pk}/config/change-sets/", {"reason": "again", "file": export.content.decode()}
        ),
        200,
    )
    assert same == {
        "outcome": "nothing to do",
        "version": 2,
        "message": "nothing to do: the cluster already runs this file (version 2)",
    }
    # A file is desired state, whatever version it names; expect_version keeps the optimistic lock.
    doc["global_variables"]["mysql-max_connections"] = "3000"
    from_file = expect(
        config_client.post(
            f"/api/v1/clusters/{cluster.pk}/config/change-sets/",
            {"reason": "from the repository", "file": yaml.safe_dump(dict(doc, version=1))},
        ),
        201,
    )
    assert from_file["source"] == "file" and from_file["base"] == 2 and len(from_file["edits"]) == 1
    refused = expect(
        config_client.post(
            f"/api/v1/clusters/{cluster.pk}/config/change-sets/",
            {"reason": "old", "file": yaml.safe_dump(doc), "expect_version": 1},
        ),
        409,
    )
    assert "expected version 1, but version 2 was recorded since" in refused["error"]["message"]
    upload = SimpleUploadedFile("galera-lab.yaml", yaml.safe_dump(doc).encode())
    refused = expect(
        config_client.client.post(
            f"/api/v1/clusters/{cluster.pk}/config/change-sets/",
            {"reason": "old", "file": upload, "expect_version": "1"},
            **config_client.headers,
        ),
        409,
    )
    assert "expected version 1" in refused["error"]["message"]
    planned = expect(config_client.post(f"/api/v1/config/change-sets/{from_file['id']}/plan/"), 201)
    op = expect(config_client.post(f"/api/v1/operations/{planned['operation']['id']}/confirm/"), 200)
    assert run(op["id"]).state == "done" and ConfigVersion.objects.filter(cluster=cluster).count() == 3

    v1 = ConfigVersion.objects.get(cluster=cluster, number=1)
    revert = expect(
        config_client.post(f"/api/v1/config/versions/{v1.pk}/revert/", {"reason": "back to the start"}), 201
    )
    assert revert["change_set"]["source"] == "revert" and revert["operation"]["state"] == "planned"
    assert len(revert["change_set"]["edits"]) == 2
    expect(config_client.post(f"/api/v1/operations/{revert['operation']['id']}/confirm/"), 200)
    assert run(revert["operation"]["id"]).state == "done"
    assert demo.admin_sql(
        first.port,
        "SELECT COUNT(*) FROM runtime_mysql_users WHERE username='api-app'",
        user=first.user,
        password=first.password,
    )[0] in (("0",), (0,))

    # A node changed by hand, written back: a change set without edits, planned for that node.
    demo.admin_sql(
        second.port,
        "UPDATE global_variables SET variable_value='777' WHERE variable_name='mysql-max_connections'",
        "LOAD MYSQL VARIABLES TO RUNTIME",
        user=second.user,
        password=second.password,
    )
    node = cluster.proxysql_nodes.get(admin_port=second.port)
    back = expect(config_client.post(f"/api/v1/clusters/{cluster.pk}/config/write-back/", {"node": node.pk}), 201)
    assert back["change_set"]["source"] == "write_back" and back["change_set"]["nodes"] == [node.pk]
    expect(config_client.post(f"/api/v1/operations/{back['operation']['id']}/confirm/"), 200)
    assert run(back["operation"]["id"]).state == "done"
    assert AuditEvent.objects.filter(actor="otto-operator (token config)", action="change set created").count() == 2


@pytest.fixture
def lab_objects(adopted_lab, live_redis, operator_user):
    """One of everything a viewer may read, on the polled lab."""
    cluster, _ = adopted_lab
    poll()
    operator = client_of(operator_user, "setup")
    op = expect(operator.post(f"/api/v1/clusters/{cluster.pk}/repair/"), 201)
    cs = new_change_set(operator, cluster, [{"op": "set", "name": "mysql-max_connections", "value": "1500"}])
    report = reports.build_report(cluster, "daily", periods.last_complete("daily", timezone.now()))
    node = cluster.proxysql_nodes.first()
    now = timezone.now()
    alert = Alert.objects.create(
        rule="writer_none",
        cluster=cluster,
        target=f"c{cluster.pk}",
        subject=f"n{node.pk}:hg100",
        subject_label="writer hostgroup 100",
        node=node,
        severity="critical",
        state="firing",
        summary="no usable writer",
        since=now,
        fires_at=now,
        fired_at=now,
        last_seen_at=now,
        active_key=f"writer_none|n{node.pk}:hg100",
    )
    silence = expect(operator.post("/api/v1/silences/", {"cluster": cluster.pk, "minutes": 60, "reason": "setup"}), 201)
    from apps.dr.models import ReplicationChannel

    rollout = expect(
        operator.post(
            "/api/v1/rollouts/",
            {
                "reason": "setup",
                "select": {"names": [cluster.name]},
                "waves": "1",
                "edits": [
                    {
                        "op": "upsert",
                        "table": "mysql_query_rules",
                        "row": {
                            "rule_id": 99,
                            "active": 1,
                            "match_digest": "^x",
                            "destination_hostgroup": 101,
                            "apply": 1,
                        },
                    }
                ],
            },
        ),
        201,
    )
    server = Server.objects.get(port=3312)
    channel = ReplicationChannel.objects.create(
        name="lab",
        source_cluster=cluster,
        replica_cluster=cluster,
        source_server=server,
        replica_server=server,
        replication_user="r",
    )
    from apps.alerts.models import Channel
    from apps.reports.models import ReportSchedule

    return {
        "channel": Channel.objects.create(name="c", kind="webhook", url="http://127.0.0.1:9/hook").pk,
        "schedule": ReportSchedule.objects.create(cluster=cluster).pk,
        "dr_channel": channel.pk,
        "cluster": cluster.pk,
        "server": Server.objects.get(port=3312).pk,
        "node": node.pk,
        "operation": op["id"],
        "change_set": cs["id"],
        "version": ConfigVersion.objects.get().pk,
        "report": report.pk,
        "digest": digest("SELECT 1").pk,
        "event": AuditEvent.objects.last().pk,
        "alert": alert.pk,
        "silence": silence["id"],
        "rollout": rollout["rollout"],
    }


def state_of_everything(doubles):
    """What a write could change: the rows of the console's own tables, and each double's runtime."""
    from django.apps import apps

    counts = {
        m.__name__: m.objects.count()
        for m in apps.get_models()
        if m._meta.app_label in ("fleet", "operations", "configuration", "accounts", "reports", "alerts")
    }
    rows = {
        "memberships": sorted(HostgroupMembership.objects.values_list("hostgroup_id", "server__port", "status")),
        "maintenance": sorted(Server.objects.values_list("port", "maintenance")),
        "operations": sorted(Operation.objects.values_list("pk", "state")),
        "change_sets": sorted(ChangeSet.objects.values_list("pk", "state")),
        "acknowledged": sorted(Alert.objects.values_list("pk", "acked_by")),
        "silences ended": sorted(Silence.objects.values_list("pk", "expired_by")),
    }
    runtime = [
        demo.admin_sql(
            d.port,
            "SELECT hostgroup_id, hostname, port, status, weight FROM runtime_mysql_servers ORDER BY 1, 2, 3",
            user=d.user,
            password=d.password,
        )
        for d in doubles
    ]
    return counts, rows, runtime


@pytest.mark.django_db
def test_a_viewer_token_reads_everything_a_viewer_sees_and_changes_nothing(adopted_lab, lab_objects, viewer_user):
    cluster, doubles = adopted_lab
    viewer = client_of(viewer_user, "script")
    before = state_of_everything(doubles)
    started = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first()
    reads, writes = 0, 0
    for name, pattern in api_patterns():
        cls = view_class(pattern)
        if cls is None:
            continue
        url = reverse(name, kwargs=kwargs_for(name, pattern, lab_objects))
        if "get" in cls.roles:
            params = {"a": 1, "b": 1} if name == "api:config_diff" else {}
            response = viewer.get(url, params)
            assert response.status_code == 200, (url, response.content[:300])
            reads += 1
        if "post" in cls.roles:
            response = viewer.post(url, {"reason": "try", "new_writer": lab_objects["server"]})
            assert response.status_code == 403 and response.json()["error"]["code"] == "permission_denied", url
            writes += 1
    assert reads >= 33 and writes >= 16
    assert state_of_everything(doubles) == before
    written = AuditEvent.objects.filter(id__gt=started)
    assert {e.action.split()[0] for e in written} == {"refused"} and written.count() == writes
    assert {e.actor for e in written} == {"vera-viewer (token script)"}
