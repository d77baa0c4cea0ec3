"""Issue 24 §1 for change sets: on nodes that run ProxySQL Cluster sync (adopted_cluster_lab), a change set holds the
sync of the modules it loads on every node for the operation and restores it after, also through a pending rollback;
no peer pulls anything meanwhile (the doubles' history of pulls)."""

import time

import pytest

from apps.audit.actor import Actor
from apps.configuration import services
from apps.operations.choices import OperationState
from apps.operations.tests.test_cluster_sync import (
    EACH_NODE,
    PULLS_DUE_S,
    assert_cooperated,
    retried,
    sql,
    sync_settings,
)

from .test_change_sets import run

pytestmark = pytest.mark.django_db(transaction=True)


def change_set(cluster, user):
    """A reader's weight and a new query rule: two synced modules."""
    reader = next(
        r for r in services.latest(cluster).content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3313
    )
    cs = services.start_change_set(cluster, actor=Actor.command(user), reason="a reader's weight and a rule")
    for edit in (
        {"op": "upsert", "table": "mysql_servers", "key": [101, "127.0.0.1", 3313], "row": {**reader, "weight": 5}},
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 30, "active": 1, "apply": 1, "match_digest": "^DELETE", "destination_hostgroup": 100},
        },
    ):
        services.add_edit(cs, edit, actor=Actor.command(user))
    return cs


def test_a_change_set_holds_the_sync_of_its_modules_and_restores_it(adopted_cluster_lab, operator_user):
    cluster, doubles = adopted_cluster_lab
    before = {d.port: sync_settings(d) for d in doubles}
    started = time.time()
    op, plan = run(change_set(cluster, operator_user), operator_user)
    assert op.state == OperationState.DONE, op.error
    assert [plan.steps[0].key, plan.steps[-1].key] == ["sync_hold", "sync_restore"]
    assert plan.facts["cluster_sync_held"]["said"] == (
        "ProxySQL Cluster sync of admin_variables, mysql_query_rules, "
        "mysql_servers held off on both nodes for the operation, "
        "restored after"
    )
    time.sleep(PULLS_DUE_S)
    assert_cooperated(doubles, started, before)
    assert sql(doubles[1], "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == [("5",)]


@EACH_NODE
def test_a_change_set_paused_at_its_save_rolls_back_and_the_retry_restores_the_sync(
    adopted_cluster_lab, operator_user, live_redis, paused_index
):
    """Issue 24, done-when: each node paused once mid-change (at its SAVE, with its LOAD taken): both nodes end equal
    in every layer on the version before, the sync restored, and no peer pulled the half-applied state."""
    cluster, (first, second) = adopted_cluster_lab
    paused = (first, second)[paused_index]
    before = {d.port: sync_settings(d) for d in (first, second)}
    started = time.time()
    sql(paused, 'LAB FAIL_STATEMENTS {"text": "SAVE MYSQL SERVERS TO DISK", "pause": true}')
    op, _ = run(change_set(cluster, operator_user), operator_user)
    assert op.state == OperationState.ROLLBACK_PENDING, op.error
    retried(op, paused, OperationState.ROLLED_BACK)
    assert_cooperated((first, second), started, before)
    for d in (first, second):
        assert sql(d, "SELECT weight FROM disk.mysql_servers WHERE hostgroup_id=101 AND port=3313") != [("5",)]
