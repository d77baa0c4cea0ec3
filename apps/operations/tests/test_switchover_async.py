"""The seed's own case: a switchover of an async MariaDB GTID topology (one primary, two replicas),
through two ProxySQL doubles."""

import pytest

from apps.audit.actor import Actor
from apps.fleet.models import Server
from apps.operations import executor, services, switchover

from .conftest import query, runtime

pytestmark = pytest.mark.django_db


def test_gtid_switchover_repoints_every_replica_and_loses_no_write(async_lab, operator_user):
    cluster, (first, second), lab = async_lab
    assert cluster.kind == "async"
    query(lab, 1, "CREATE TABLE IF NOT EXISTS app.marks (id INT PRIMARY KEY, note VARCHAR(20))")
    query(lab, 1, "REPLACE INTO app.marks VALUES (1, 'before')")  # written on the old primary just before

    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3322), lower_autoinc=True)
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    executor.run(op.pk)
    op.refresh_from_db()
    assert op.state == "done", op.error

    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3322, "ONLINE")]
    assert query(lab, 2, "SELECT @@read_only")[0][0] == 0
    assert query(lab, 1, "SELECT @@read_only")[0][0] == 1
    assert query(lab, 2, "SELECT note FROM app.marks WHERE id=1") == (("before",),)  # nothing lost
    query(lab, 2, "REPLACE INTO app.marks VALUES (2, 'after')")  # the new primary takes writes...
    for n in (1, 3):  # ...and both the old primary and the other replica now follow it
        status = lab.monitor_connection(n).cursor()
        status.execute("SHOW SLAVE STATUS")
        cols = [d[0] for d in status.description]
        row = dict(zip(cols, status.fetchone()))
        assert row["Master_Port"] == 3322 and row["Slave_IO_Running"] == "Yes" and row["Slave_SQL_Running"] == "Yes"
        assert lab.wait_caught_up(n, 10) is not False
        assert query(lab, n, "SELECT note FROM app.marks WHERE id=2") == (("after",),)
