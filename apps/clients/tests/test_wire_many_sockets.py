"""A worker polling a fleet holds thousands of sockets: a query must still be awaited when the connection's
descriptor is numbered above select()'s FD_SETSIZE (1024)."""

import os
import resource

import pytest

from apps.clients.proxysql import ProxySQLAdmin
from apps.clients.wire import Timeout


@pytest.fixture
def high_descriptors():
    """Hold descriptors up to ~1100 so that the next socket is numbered above 1024."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < 1200")
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    held = []
    try:
        while not held or held[-1] < 1100:
            held.append(os.open(os.devnull, os.O_RDONLY))
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_query_on_a_descriptor_above_1024(proxysql_double, high_descriptors):
    with ProxySQLAdmin("127.0.0.1", proxysql_double.port, "admin", "admin") as admin:
        assert admin.version()
        assert admin.wire._conn.fileno() > 1024
        assert {"Questions"} <= set(admin.stats_global())


def test_a_timeout_on_a_descriptor_above_1024(proxysql_double, high_descriptors):
    with ProxySQLAdmin("127.0.0.1", proxysql_double.port, "admin", "admin", read_timeout=0.3) as admin:
        admin.ping()
        proxysql_double.set_mode("hang")
        with pytest.raises(Timeout):
            admin.ping()
