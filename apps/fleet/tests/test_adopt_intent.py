"""Issue 21 §4: adoption writes the inventory rows and the cluster's version 1 in one transaction (the version is the
only record of intent; the rows are its copy): no cluster adopted without its version, no version without rows."""

import pytest
from django.db import DatabaseError

from apps.audit.tests.faults import answer, audit_outage  # noqa: F401 (a fixture)
from apps.configuration import services as config
from apps.configuration.models import ConfigVersion
from apps.configuration.adoption import AdoptionError
from apps.fleet.models import Cluster, HostgroupMembership
from conftest import adopt_double

pytestmark = pytest.mark.django_db


def test_adoption_records_version_1_with_its_rows_in_one_transaction(lab_pair, audit_outage):
    first, second = lab_pair
    audit_outage("configuration version recorded")
    # SQLite's trigger abort is an IntegrityError, which adoption reports as a race; MariaDB's a DatabaseError
    with pytest.raises((DatabaseError, AdoptionError), match="the audit log does not answer"):
        adopt_double(first, "galera-lab", "proxysql-1")
    assert not Cluster.objects.exists() and not HostgroupMembership.objects.exists()
    assert not ConfigVersion.objects.exists()

    answer()
    cluster, _ = adopt_double(first, "galera-lab", "proxysql-1")
    adopt_double(second, "galera-lab", "proxysql-2")  # the same rows: nothing new to record
    version = config.latest(cluster)
    assert (version.number, version.source, version.reason) == (1, "adopt", "adopted from proxysql-1")
    cluster.refresh_from_db()
    assert config.inventory_content(cluster, base=version.content) == config.C.sort(version.content)
    assert {r["port"] for r in version.content["mysql_servers"] if r["hostgroup_id"] == 100} == {3311}


def test_a_node_unreadable_at_apply_still_gives_the_cluster_version_1_of_its_rows_and_variables(lab_pair):
    """Issue 35 item 3: every cluster has a version from its creation. The node read for the plan stops answering
    before the apply: version 1 holds the adopted rows and the variables operations change, not nothing."""
    from apps.audit.actor import Actor
    from apps.clients.proxysql import ProxySQLAdmin
    from apps.configuration import adoption as adopt
    from apps.fleet.drift import AUTOINC

    first, _ = lab_pair
    with ProxySQLAdmin(
        "127.0.0.1", first.port, first.user, first.password, connect_timeout=5, read_timeout=10
    ) as admin:
        snapshot = adopt.read_snapshot(admin)
    plan = adopt.plan_adoption(
        snapshot, cluster_name="galera-lab", node_name="proxysql-1", admin_host="127.0.0.1", admin_port=first.port
    )
    first.stop()
    cluster, _ = adopt.apply_adoption(
        plan, admin_user=first.user, admin_password=first.password, actor=Actor.command(label="test adoption")
    )
    version = config.latest(cluster)
    assert (version.number, version.source) == (1, "adopt") and "could not be read" in version.reason
    assert version.content["global_variables"] == {AUTOINC: "5"}
    assert {(r["hostgroup_id"], r["port"]) for r in version.content["mysql_servers"]} == {
        (m.hostgroup_id, m.server.port) for m in HostgroupMembership.objects.select_related("server")
    }


def test_a_cluster_made_in_the_admin_has_version_1_of_its_roles(client, admin_user_role):
    from django.urls import reverse

    from apps.audit.models import AuditEvent

    from .test_credential_hosts_admin import FORM

    client.force_login(admin_user_role)
    assert (
        client.post(
            reverse("admin:fleet_cluster_add"),
            {**FORM, "name": "by-hand", "writer_hostgroup": "10", "reader_hostgroup": "11"},
        ).status_code
        == 302
    )
    cluster = Cluster.objects.get(name="by-hand")
    version = config.latest(cluster)
    assert (version.number, version.source, version.content["roles"]["writer"]) == (1, "admin", 10)
    assert AuditEvent.objects.filter(action="configuration version recorded", cluster_id=cluster.pk).count() == 1
