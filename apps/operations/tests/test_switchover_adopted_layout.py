"""A plain layout adopted as it is (issue 9, item 4) keeps its shape through switchovers: the seed-001 layout
(the writer alone in 100, the readers in 101 without it) is adopted with writer-is-also-reader 0, and two
switchovers later the writer has never appeared in the reader hostgroup."""

import pytest

from apps.audit.actor import Actor
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.operations import executor, services, switchover
from apps.operations.choices import OperationState
from conftest import adopt_double
from lab import demo

from .conftest import runtime

pytestmark = pytest.mark.django_db


@pytest.fixture
def plain_pair(proxysql_double_pair, galera_lab):
    for i, double in enumerate(proxysql_double_pair, 1):
        demo.admin_sql(double.port, *demo.plain_layout_statements(), user=double.user, password=double.password)
        adopt_double(double, "galera-plain", f"proxysql-{i}")  # nothing entered: everything inferred
        double.traffic.set_sessions(hostgroup=100, count=2, kind="write", pinned_reason="auto_increment")
        double.traffic.set_sessions(hostgroup=101, count=4, kind="read")
    return Cluster.objects.get(name="galera-plain"), proxysql_double_pair


def test_two_switchovers_keep_the_writer_out_of_the_reader_hostgroup(plain_pair, operator_user):
    cluster, doubles = plain_pair
    assert (cluster.writer_hostgroup, cluster.reader_hostgroup, cluster.writer_is_also_reader) == (100, 101, 0)
    for old, new in ((3311, 3312), (3312, 3311)):
        plan = switchover.plan_switchover(cluster, Server.objects.get(port=new), lower_autoinc=True)
        assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
        op = services.save_plan(plan, actor=Actor.command(operator_user))
        services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
        executor.run(op.pk)
        op.refresh_from_db()
        assert op.state == OperationState.DONE, op.error
        readers = sorted({3311, 3312, 3313} - {new})
        for double in doubles:
            assert runtime(double, 100) == [("127.0.0.1", new, "ONLINE")]
            assert runtime(double, 101) == [("127.0.0.1", port, "ONLINE") for port in readers]
        assert [m.server.port for m in HostgroupMembership.objects.filter(hostgroup_id=100)] == [new]
        assert sorted(m.server.port for m in HostgroupMembership.objects.filter(hostgroup_id=101)) == readers
    cluster.refresh_from_db()
    assert cluster.writer_is_also_reader == 0
