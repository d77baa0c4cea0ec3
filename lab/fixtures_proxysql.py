"""pytest fixtures for the ProxySQL admin LAB DOUBLE (lab.proxysql_double).

Listed in the root conftest's `pytest_plugins`. Every double listens on a free 127.0.0.1 port, with
user/password admin/admin, and speaks the real MySQL wire protocol: connect with MySQLdb using
`double.connect_kwargs()`. Drive its traffic model with `double.traffic` (Python) or `LAB ...`
statements over the wire; read what the product sent with `double.statements()`.
"""
import pytest


@pytest.fixture
def proxysql_double():
    """A fresh ProxySQL admin double (one independent ProxySQL 2.7.1 admin endpoint) on a free port.

    Function-scoped: new empty config (defaults of a fresh ProxySQL), memory-only disk layer, its own
    background server thread; stopped after the test. Yields a `ProxySQLDouble`: `.port`, `.host`,
    `.user`, `.password`, `.connect_kwargs()`, `.traffic`, `.statements()`, `.set_mode()`.
    """
    from lab.proxysql_double import ProxySQLDouble

    double = ProxySQLDouble(port=0, user="admin", password="admin").start()
    try:
        yield double
    finally:
        double.stop()


@pytest.fixture
def proxysql_double_factory():
    """Factory for N doubles served by ONE background server (one event loop thread).

    `make(n=1, **kwargs)` returns a list of n started `ProxySQLDouble` (kwargs as for
    ProxySQLDouble: user, password, datadir, variables, seed...). All are stopped after the test.
    Use it for fleets (several ProxySQL nodes, many endpoints) without a thread per endpoint.
    """
    from lab.proxysql_double import DoubleServer, ProxySQLDouble

    server = DoubleServer().start_background()
    made = []

    def make(n=1, **kwargs):
        out = []
        for _ in range(n):
            d = ProxySQLDouble(port=kwargs.pop("port", 0), server=server, **kwargs).start()
            made.append(d)
            out.append(d)
        return out

    try:
        yield make
    finally:
        for d in made:
            try:
                d.stop()
            except Exception:
                pass
        server.stop()


@pytest.fixture
def proxysql_double_pair(proxysql_double_factory):
    """Two doubles standing for two ProxySQL nodes of one cluster, as a tuple (a, b).

    Each lists both nodes in proxysql_servers (runtime too) and has admin-cluster_username /
    admin-cluster_password set to admin/admin (accepted by the other): their
    stats_proxysql_servers_checksums show each other's real runtime_checksums_values, so a product
    can compare the nodes' configurations. They do NOT sync configuration between themselves (the
    product applies each operation to every node).
    """
    a, b = proxysql_double_factory(2)
    for d in (a, b):
        d.query("DELETE FROM proxysql_servers")
        for peer in (a, b):
            d.query(f"INSERT INTO proxysql_servers (hostname, port, weight, comment) "
                    f"VALUES ('127.0.0.1', {peer.port}, 0, 'node-{peer.port}')")
        d.query("SET admin-cluster_username='admin'")
        d.query("SET admin-cluster_password='admin'")
        d.query("LOAD ADMIN VARIABLES TO RUNTIME")
        d.query("LOAD PROXYSQL SERVERS TO RUNTIME")
        d.query("SAVE ADMIN VARIABLES TO DISK")  # as an operator sets a node up: a restart keeps it
        d.query("SAVE PROXYSQL SERVERS TO DISK")
        d.clear_statements()
    return a, b
