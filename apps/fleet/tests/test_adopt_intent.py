"""Issue 21 §4: adoption writes the inventory rows and the cluster's version 1 in one transaction (the version is the
only record of intent; the rows are its copy): no cluster adopted without its version, no version without rows."""
import pytest

from apps.configuration import services as config
from apps.configuration.models import ConfigVersion
from apps.fleet.models import Cluster, HostgroupMembership
from apps.operations.tests.test_intent import AuditDown, audit_down
from conftest import adopt_double

pytestmark = pytest.mark.django_db


def test_adoption_records_version_1_with_its_rows_in_one_transaction(lab_pair, monkeypatch):
    first, second = lab_pair
    audit_up = audit_down(monkeypatch)
    with pytest.raises(AuditDown):
        adopt_double(first, "galera-lab", "proxysql-1")
    assert not Cluster.objects.exists() and not HostgroupMembership.objects.exists()
    assert not ConfigVersion.objects.exists()

    audit_up()
    cluster, _ = adopt_double(first, "galera-lab", "proxysql-1")
    adopt_double(second, "galera-lab", "proxysql-2")  # the same rows: nothing new to record
    version = config.latest(cluster)
    assert (version.number, version.source, version.reason) == (1, "adopt", "adopted from proxysql-1")
    cluster.refresh_from_db()
    assert config.inventory_content(cluster, base=version.content) == config.C.sort(version.content)
    assert {r["port"] for r in version.content["mysql_servers"] if r["hostgroup_id"] == 100} == {3311}
