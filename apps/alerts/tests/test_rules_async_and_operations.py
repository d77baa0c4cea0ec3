"""The async replication rules on the replication lab (a replica stopped, a replica lagging), and the
operation rules with real operations on the Galera lab pair (a drain whose rollback a node refuses ends
failed; a later operation that succeeds resolves it)."""
import threading
import time

import pytest

from apps.fleet.models import Cluster, Server
from apps.operations import drain, executor, services
from conftest import adopt_double
from lab import demo

from .conftest import firing, open_alerts, set_rule, tick, until

pytestmark = pytest.mark.django_db
PORTS = (3321, 3322, 3323)


@pytest.fixture
def async_lab(db, proxysql_double_pair, replication_healthy, live_redis):
    for i, double in enumerate(proxysql_double_pair, 1):
        demo.admin_sql(double.port, *demo.seed_statements(backend_ports=PORTS), user=double.user, password=double.password)
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
    root_sql(lab, 1, "CREATE TABLE IF NOT EXISTS app.lag_probe (id INT PRIMARY KEY, v INT)",
             "REPLACE INTO app.lag_probe VALUES (1, 0)")
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
    """A drain that times out (a connection forced in use on 3313) and whose rollback the second node refuses
    ends failed, ROLLBACK INCOMPLETE; the alert stays until an operation of the cluster succeeds."""
    cluster, (first, second) = adopted_lab
    server = Server.objects.get(port=3313)
    tick()
    first.traffic.set_server(101, "127.0.0.1", 3313, conn_used=3)  # never drains
    demo.admin_sql(second.port, 'LAB FAIL_STATEMENTS {"text": "REPLACE INTO mysql_servers", "message": "refused by the test"}',
                   user=second.user, password=second.password)
    op = services.save_plan(drain.plan_drain(server, drain_timeout_ms=200), user=operator_user)
    services.confirm(op, user=operator_user, enqueue=False)
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == "failed" and "ROLLBACK INCOMPLETE" in op.error
    tick()
    [a] = firing("operation_failed")
    assert a.operation_id == op.pk and a.severity == "critical" and f"operation #{op.pk} (drain) failed" in a.summary

    demo.admin_sql(second.port, "LAB FAIL_STATEMENTS {}", user=second.user, password=second.password)
    first.traffic.set_server(101, "127.0.0.1", 3313, conn_used=0)
    # Put back what the refused rollback left, then a drain that works: the cluster has moved on.
    demo.admin_sql(second.port, "UPDATE mysql_servers SET status='ONLINE' WHERE port=3313", "LOAD MYSQL SERVERS TO RUNTIME",
                   user=second.user, password=second.password)
    ok = services.save_plan(drain.plan_drain(server, drain_timeout_ms=5000), user=operator_user)
    services.confirm(ok, user=operator_user, enqueue=False)
    executor.run(ok.pk)
    ok.refresh_from_db()
    assert ok.state == "done", ok.error
    assert until(lambda: not open_alerts("operation_failed"), 8)
