"""Fleet fixtures: ProxySQL doubles configured like the seeds' Galera layout (lab/demo.py), in front of
the Galera lab's ports.

admin_sql(double, ...)  plain admin SQL on a double, as an operator would type it
seed_layout(double)     the seeds' mysql_servers (writer 100, reader 101, backup writer 102), loaded
lab_pair                two such doubles: the two ProxySQL nodes of one cluster
"""
import pytest

from lab import demo


def admin_sql(double, *statements):
    return demo.admin_sql(double.port, *statements, user=double.user, password=double.password)


def seed_layout(double):
    admin_sql(double, *demo.seed_statements())
    return double


@pytest.fixture
def lab_pair(proxysql_double_pair):
    """Two ProxySQL doubles fronting the Galera lab's ports with the seeds' hostgroups."""
    return [seed_layout(d) for d in proxysql_double_pair]
