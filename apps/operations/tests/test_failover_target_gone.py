"""A failover planned for a server that is in no hostgroup any more (it is planned again when a worker starts it, and
the inventory may have changed since): a plan refused by its target guard, not an AttributeError on None."""

import pytest

from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.operations import rules

pytestmark = pytest.mark.django_db


def test_a_failover_to_a_server_in_no_hostgroup_is_refused_by_its_target_guard():
    cluster = Cluster.objects.create(
        name="c1", writer_hostgroup=100, reader_hostgroup=101, monitor_user="monitor", monitor_password="monitor"
    )
    dead = Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=3311)
    gone = Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=3312)
    HostgroupMembership.objects.create(server=dead, hostgroup_id=100, weight=1000)

    plan = rules.plan_failover(cluster, dead, gone.pk, {"down_polls": 2})

    assert [g.key for g in plan.failed_guards] == ["target"]
    assert plan.steps == []
    assert plan.options["new"] == gone.pk
