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
