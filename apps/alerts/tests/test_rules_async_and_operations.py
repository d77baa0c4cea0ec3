"""The async replication rules on the replication lab (a replica stopped, a replica lagging), and the
operation rules with real operations on the Galera lab pair (a switchover failed past its point of no
return, resolved by a later one that succeeds; a rollback left pending, and a finish left pending past the
point of no return, each resolved when a retry goes through)."""

import threading
import time

import pytest

from django.test import Client
from django.utils import timezone

from apps.alerts.catalogue import BY_KEY
from apps.fleet.models import Cluster, Server
from apps.monitoring import live
from apps.operations import repair, rollbacks, switchover
from apps.operations.models import Operation, PendingRollback
from apps.operations.tests.conftest import fail_statements, run_plan
from conftest import adopt_double
from lab import demo

from .conftest import firing, open_alerts, set_rule, tick, until

pytestmark = pytest.mark.django_db
PORTS = (3321, 3322, 3323)


@pytest.fixture
def async_lab(db, proxysql_double_pair, replication_healthy, live_redis):
    for i, double in enumerate(proxysql_double_pair, 1):
        demo.admin_sql(
            double.port, *demo.seed_statements(backend_ports=PORTS), user=double.user, password=double.password
        )
        adopt_double(double, "async-lab", f"proxysql-{i}", kind="async")
    return Cluster.objects.get(name="async-lab"), proxysql_double_pair, replication_healthy


def root_sql(lab, n, *statements):
    conn = lab.root_connection(n)
    try:
        for sql in statements:
            conn.cursor().execute(sql)
    finally:
        conn.close()


def test_a_stopped_replica(async_lab):
    cluster, doubles, lab = async_lab
    set_rule("replication_stopped", for_s=0)
    tick(["backend"])
    assert not open_alerts()
    root_sql(lab, 3, "STOP SLAVE")
    try:
        assert until(lambda: firing("replication_stopped"), 10, kinds=["backend"])
        [a] = firing("replication_stopped")
        assert a.server.port == 3323 and "replica IO thread No, SQL thread No" in a.summary and a.severity == "critical"
    finally:
        root_sql(lab, 3, "START SLAVE")
    assert until(lambda: not open_alerts("replication_stopped"), 10, kinds=["backend"])


def test_a_lagging_replica(async_lab):
    """MASTER_DELAY holds replica 2 three seconds behind a primary that keeps writing."""
    cluster, doubles, lab = async_lab
    set_rule("replica_lag", cluster, for_s=0, p_seconds=1)
    root_sql(
        lab,
        1,
        "CREATE TABLE IF NOT EXISTS app.lag_probe (id INT PRIMARY KEY, v INT)",
        "REPLACE INTO app.lag_probe VALUES (1, 0)",
    )
    root_sql(lab, 2, "STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY=3", "START SLAVE")
    stop = threading.Event()

    def writes():
        while not stop.is_set():
            root_sql(lab, 1, "UPDATE app.lag_probe SET v = v + 1 WHERE id = 1")
            time.sleep(0.2)

    writer = threading.Thread(target=writes, daemon=True)
    writer.start()
    try:
        assert until(lambda: firing("replica_lag"), 15, kinds=["backend"]), [a.summary for a in open_alerts()]
        [a] = firing("replica_lag")
        assert a.server.port == 3322 and a.value >= 2 and "above 1 s" in a.summary
    finally:
        stop.set()
        writer.join(timeout=5)
        root_sql(lab, 2, "STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY=0", "START SLAVE")
    assert until(lambda: not open_alerts("replica_lag"), 15, kinds=["backend"])


def test_a_failed_operation_until_a_later_one_succeeds(adopted_lab, live_redis, operator_user):
    """A switchover whose last step (the auto-increment variable put back) the second node refuses, past its
    point of no return: it ends failed. The alert stays until an operation of the cluster succeeds (here the
    repair from the inventory)."""
    cluster, (first, second) = adopted_lab
    tick()
    fail_statements(second, "variable_value='5'")  # only the restore of mysql-auto_increment_delay_multiplex
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == "failed" and op.point_of_no_return, op.error
    tick()
    [a] = firing("operation_failed")
    assert (
        a.operation_id == op.pk and a.severity == "critical" and f"operation #{op.pk} (switchover) failed" in a.summary
    )
    fail_statements(second, None)
    fixed = run_plan(repair.plan_repair(cluster), operator_user)  # the nodes back to what the inventory says
    assert fixed.state == "done", fixed.error
    assert until(lambda: not open_alerts("operation_failed"), 8)


def test_a_switchover_leaves_no_restart_drift_behind(adopted_lab, live_redis, operator_user, settings):
    """The switchover LOADs and SAVEs the new writer on both nodes and the inventory follows: the polls after it
    see the runtime changed and read memory and disk again (not only with the variables a minute later), so no
    restart_drift is left behind."""
    cluster, (first, second) = adopted_lab
    settings.MONITOR_VARIABLES_INTERVAL_S = 60
    set_rule("restart_drift", for_s=0)
    tick(["proxysql"])
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == "done", op.error
    for _ in range(3):
        tick(["proxysql"])
        assert not open_alerts("restart_drift")
    for node in cluster.proxysql_nodes.all():  # read after the switchover, not kept from before it
        assert live.read_one(live.PROXYSQL, node.pk)["layers_ts"] > op.finished_at.timestamp()


def test_a_rollback_left_pending_until_the_node_takes_it(adopted_lab, live_redis, operator_user):
    """The drain of a switchover times out (sessions pinned by user variables) and the second node refuses the
    rollback's statements: the operation is left rollback pending until a retry goes through."""
    cluster, (first, second) = adopted_lab
    tick()
    for double in (first, second):
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="user_variable")
    fail_statements(second, "REPLACE INTO mysql_servers")
    op = run_plan(
        switchover.plan_switchover(cluster, Server.objects.get(port=3312), drain_timeout_ms=300), operator_user
    )
    assert op.state == "rollback_pending", op.error
    tick()
    [a] = firing("rollback_pending")
    assert a.operation_id == op.pk and "left a rollback pending" in a.summary and "proxysql-2" in a.summary
    fail_statements(second, None)
    PendingRollback.objects.update(next_try_at=timezone.now())
    rollbacks.retry_due()
    assert Operation.objects.get(pk=op.pk).state == "rolled_back"
    assert until(lambda: not open_alerts("rollback_pending"), 8)


def test_a_finish_left_pending_says_finish_until_the_node_takes_it(adopted_lab, live_redis, operator_user):
    """Past the switchover's point of no return the second node stops answering (paused as it takes the
    auto-increment delay back): the new writer is live everywhere else, nothing was rolled back. The alert must
    say a finish is pending, never a rollback, until the node takes the rest."""
    cluster, (first, second) = adopted_lab
    tick()
    demo.admin_sql(
        second.port,
        'LAB FAIL_STATEMENTS {"text": "SET variable_value=\'5\'", "pause": true}',
        user=second.user,
        password=second.password,
    )
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == "finish_pending", op.error
    second.set_mode("normal")  # it answers again; its statements are still to run
    assert until(lambda: firing("finish_pending"), 8)
    [a] = firing("finish_pending")
    assert a.operation_id == op.pk and a.severity == "critical" and a.rule == "finish_pending"
    assert a.summary.startswith(
        f"operation #{op.pk} left a finish pending: done on the other nodes; "
        "FINISH PENDING on proxysql-2 (2 statement(s) past the point of no return not taken"
    )
    assert "rollback" not in a.summary.lower() and not open_alerts("rollback_pending")
    assert BY_KEY[a.rule].title == "Finish pending" and "rollback" not in BY_KEY[a.rule].why.lower()
    client = Client()
    client.force_login(operator_user)
    page = client.get(a.get_absolute_url()).content.decode()
    assert "Finish pending" in page and "rollback pending" not in page.lower()
    PendingRollback.objects.update(next_try_at=timezone.now())
    rollbacks.retry_due()
    assert Operation.objects.get(pk=op.pk).state == "done"
    assert until(lambda: not open_alerts("finish_pending"), 8)
