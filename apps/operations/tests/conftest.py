"""Operations fixtures: the adopted lab (apps/monitoring/tests/conftest.py) and helpers to read what
the ProxySQL doubles hold at runtime."""
import pytest

from apps.monitoring.tests.conftest import adopt_double  # noqa: F401  (re-exported for tests)
from lab import demo


def runtime(double, hostgroup):
    rows = demo.admin_sql(double.port, f"SELECT hostname, port, status FROM runtime_mysql_servers WHERE hostgroup_id={hostgroup} ORDER BY port",
                          user=double.user, password=double.password)
    return [(h, int(p), s) for h, p, s in rows]


def variable(double, name):
    rows = demo.admin_sql(double.port, f"SELECT variable_value FROM runtime_global_variables WHERE variable_name='{name}'",
                          user=double.user, password=double.password)
    return rows[0][0]


@pytest.fixture
def adopted_lab(db, lab_pair, galera_lab):
    """As in apps/monitoring/tests: the lab cluster adopted, with writer sessions pinned by
    auto-increment tokens (ProxySQL 2.7's default) and readers, on both doubles."""
    from apps.fleet.models import Cluster

    first, second = lab_pair
    adopt_double(first, "galera-lab", "proxysql-1")
    adopt_double(second, "galera-lab", "proxysql-2")
    for double in lab_pair:
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
        double.traffic.set_sessions(hostgroup=101, count=8, kind="read")
    return Cluster.objects.get(name="galera-lab"), lab_pair
