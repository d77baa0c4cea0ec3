"""The drift rules over every table of the configuration version (issue 21 §4): the drift watcher runs the
configuration's engine (all three layers of every table and variable) and stores each node's result; `drift` and
`restart_drift` read it beside the polled mysql_servers, never opening a connection themselves. Before, only
mysql_servers were judged: a query rule or a user changed by hand went unnoticed."""

import msgspec
import pytest

from apps.audit.models import AuditEvent
from apps.configuration import services
from apps.configuration.drift import stored, watch
from apps.configuration.models import ConfigVersion
from apps.fleet.models import ProxySQLNode
from lab import demo

from .conftest import firing, open_alerts, set_rule, tick

pytestmark = pytest.mark.django_db


def admin_sql(double, *statements):
    return demo.admin_sql(double.port, *statements, user=double.user, password=double.password)


@pytest.fixture
def rules_lab(adopted_lab, live_redis):
    """The adopted pair with a user and a query rule in every layer, version 1 recorded from them."""
    cluster, doubles = adopted_lab
    for d in doubles:
        admin_sql(
            d,
            "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','app-secret',100)",
            "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply) "
            "VALUES (20,1,'^SELECT',101,1)",
            "LOAD MYSQL USERS TO RUNTIME",
            "SAVE MYSQL USERS TO DISK",
            "LOAD MYSQL QUERY RULES TO RUNTIME",
            "SAVE MYSQL QUERY RULES TO DISK",
        )
    ConfigVersion.objects.filter(cluster=cluster).delete()
    services.record_adopted(cluster, cluster.proxysql_nodes.order_by("pk").first())
    return cluster, doubles


def judged():
    """One drift watcher run, then a poll round judged: what beat and the poll tasks do."""
    events = watch()
    tick(["proxysql"])
    return events


def test_equal_layers_give_nothing(rules_lab):
    set_rule("drift", for_s=0)
    set_rule("restart_drift", for_s=0)
    assert judged() == 0
    results = stored(ProxySQLNode.objects.values_list("pk", flat=True))
    assert len(results) == 2 and all(r.findings == [] and r.runtime == [] for r in results.values())
    assert not open_alerts("drift") and not open_alerts("restart_drift")
    assert not AuditEvent.objects.filter(action__startswith="drift").exists()


def test_a_query_rule_changed_only_on_disk_fires_restart_drift_and_is_audited(rules_lab):
    cluster, (first, second) = rules_lab
    set_rule("restart_drift", for_s=0)
    set_rule("drift", for_s=0)
    judged()
    admin_sql(
        first,
        "UPDATE mysql_query_rules SET destination_hostgroup=100 WHERE rule_id=20",
        "SAVE MYSQL QUERY RULES TO DISK",
        "SAVE MYSQL QUERY RULES TO MEMORY",
    )  # memory back from runtime
    assert judged() == 1
    words = "a restart of proxysql-1 would load query rule 20 destination_hostgroup 100 (disk) instead of 101"
    [a] = firing("restart_drift")
    assert a.node == ProxySQLNode.objects.get(admin_port=first.port) and a.summary == words
    assert not open_alerts("drift")  # runtime is as intended
    found = AuditEvent.objects.get(action="drift found")
    assert found.target.startswith("proxysql-1") and found.details["differences"] == [words]
    admin_sql(first, "SAVE MYSQL QUERY RULES TO DISK")  # memory (as intended) to disk again
    assert judged() == 1
    assert not open_alerts("restart_drift") and AuditEvent.objects.filter(action="drift fixed").count() == 1


def test_a_user_changed_at_runtime_fires_drift(rules_lab):
    cluster, (first, second) = rules_lab
    set_rule("drift", for_s=0)
    set_rule("restart_drift", for_s=0)
    judged()
    admin_sql(second, "UPDATE mysql_users SET max_connections=500 WHERE username='app'", "LOAD MYSQL USERS TO RUNTIME")
    judged()
    [a] = firing("drift")
    assert a.node == ProxySQLNode.objects.get(admin_port=second.port)
    assert a.summary == "proxysql-2: user app max_connections is 500, version 1 says 10000"
    assert not open_alerts("restart_drift")  # the disk still holds version 1's
    admin_sql(
        second, "UPDATE mysql_users SET max_connections=10000 WHERE username='app'", "LOAD MYSQL USERS TO RUNTIME"
    )
    judged()
    assert not open_alerts("drift")


def test_a_result_read_before_an_operation_of_the_cluster_ended_is_not_judged():
    """The watcher may have read a node half way through a switchover (its disk not saved yet): once the operation
    ends, that result is left out until the watcher reads again, so it never opens an alert the operation did not
    leave behind."""
    from apps.alerts.context import OwnChanges
    from apps.alerts.evaluate import with_layers
    from apps.configuration.drift import StoredResult

    doc, result = {"ts": 100.0}, StoredResult(ts=100.0, findings=[{"words": "a restart would..."}])
    assert with_layers(doc, result, [])["layers_drift"] == result
    assert "layers_drift" not in with_layers(doc, result, [OwnChanges("switchover", 1, 90.0, None, set())])
    assert "layers_drift" not in with_layers(doc, result, [OwnChanges("switchover", 1, 90.0, 105.0, set())])
    assert with_layers(
        doc, msgspec.structs.replace(result, ts=106.0), [OwnChanges("switchover", 1, 90.0, 105.0, set())]
    )["layers_drift"]
