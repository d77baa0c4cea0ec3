"""Fleet fixtures: ProxySQL doubles configured like the seeds' Galera layout (lab/demo.py), in front of
the Galera lab's ports.

admin_sql(double, ...)  plain admin SQL on a double, as an operator would type it
seed_layout(double)     the seeds' mysql_servers (writer 100, reader 101, backup writer 102), loaded
unused_ports            three loopback ports bound but not listening: connections to them are refused
(the lab_pair fixture, two such doubles, is in the root conftest.py)
"""

import socket

import pytest

from lab import demo


def admin_sql(double, *statements):
    return demo.admin_sql(double.port, *statements, user=double.user, password=double.password)


def seed_layout(double):
    admin_sql(double, *demo.seed_statements())
    return double


@pytest.fixture
def unused_ports():
    sockets = [socket.socket() for _ in range(3)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    yield [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
