"""Issue 34: the pollers' last line of defence. A backend row on a host outside the cluster's credential hosts (one an
admin no longer allows, or one that came in with a node's rows edited directly) is not polled with the monitor
credentials: its document says why, and the fake MySQL server there receives nothing."""

import pytest

from apps.clients.tests.fake_mysql import FakeMySQL
from apps.fleet.models import Cluster, Server
from apps.monitoring import live, pollers

pytestmark = pytest.mark.django_db


def test_a_backend_outside_the_list_is_not_polled_with_credentials(live_redis):
    cluster = Cluster.objects.create(
        name="shop",
        writer_hostgroup=100,
        reader_hostgroup=101,
        monitor_user="monitor",
        monitor_password="St0red-M0nitor-Pw",
        credential_hosts="10.0.0.0/8",
    )
    with FakeMySQL(b"mysql_native_password") as fake:
        server = Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=fake.port)
        summary = pollers.backend_round(pollers.servers_for_shard(0, 1))
        doc = live.read_one(live.BACKEND, server.pk)
        assert fake.received() == b""
        assert summary["failed"] == 1 and doc["ok"] is False and doc["error_kind"] == "not_allowed"
        assert f"127.0.0.1:{fake.port} is not in shop's credential hosts" in doc["error"]
        # An admin allows it: the next round logs in (the fake server sees the monitor user)
        Cluster.objects.filter(pk=cluster.pk).update(credential_hosts="127.0.0.1")
        pollers.backend_round(pollers.servers_for_shard(0, 1))
        assert b"monitor" in fake.received()
        # ...and no longer: the open connection is dropped (at most its COM_QUIT), no login again
        Cluster.objects.filter(pk=cluster.pk).update(credential_hosts="10.0.0.0/8")
        logins = fake.received().count(b"monitor")
        pollers.backend_round(pollers.servers_for_shard(0, 1))
        assert fake.received().count(b"monitor") == logins
        assert live.read_one(live.BACKEND, server.pk)["error_kind"] == "not_allowed"
