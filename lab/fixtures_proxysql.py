"""pytest fixtures for the ProxySQL admin LAB DOUBLE (lab.proxysql_double).

Listed in the root conftest's `pytest_plugins`. Every double listens on a free 127.0.0.1 port, with
user/password admin/admin, and speaks the real MySQL wire protocol: connect with MySQLdb using
`double.connect_kwargs()`. Drive its traffic model with `double.traffic` (Python) or `LAB ...`
statements over the wire; read what the product sent with `double.statements()`.

TEST_DOUBLES=process (the default): the fixtures' doubles are served by a process of their own
(lab.proxysql_double.host, one per pytest process) behind the same API, so that a busy test process never delays
their answers (sharded runs on a loaded machine: an in-process double past the product's 0.8 s read deadline failed
two tests of a full run at load 4-9). TEST_DOUBLES=thread: in this process, on a background thread (the old way).
"""

import os

import pytest


def doubles_in_a_process():
    """Whether TEST_DOUBLES asks for the doubles in a process of their own."""
    mode = os.environ.get("TEST_DOUBLES", "process") or "process"
    if mode not in ("thread", "process"):
        raise ValueError(f"TEST_DOUBLES must be thread or process, not {mode!r}")
    return mode == "process"


def new_double(**kwargs):
    """A double (not started) built as TEST_DOUBLES says: kwargs as for ProxySQLDouble, but `server`."""
    if doubles_in_a_process():
        from lab.proxysql_double.host import ProcessDouble

        return ProcessDouble(**kwargs)
    from lab.proxysql_double import ProxySQLDouble

    return ProxySQLDouble(**kwargs)


@pytest.fixture
def proxysql_double(request):
    """A fresh ProxySQL admin double (one independent ProxySQL 2.7.1 admin endpoint) on a free port.

    Another version: `@pytest.mark.parametrize("proxysql_double", ["2.5"], indirect=True)` (2.5, 2.6, 2.7, 3.0).

    Function-scoped: new empty config (defaults of a fresh ProxySQL), memory-only disk layer, its own
    background server thread; stopped after the test. Yields a `ProxySQLDouble`: `.port`, `.host`,
    `.user`, `.password`, `.connect_kwargs()`, `.traffic`, `.statements()`, `.set_mode()`.
    """
    double = new_double(port=0, user="admin", password="admin", version=getattr(request, "param", None)).start()
    try:
        yield double
    finally:
        double.stop()


@pytest.fixture
def proxysql_double_in_process():
    """A double in this process whatever TEST_DOUBLES says: for the tests of the double's own insides (its traffic
    model's lock and private state, the process-wide backend prober), which a host process keeps to itself."""
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
    ProxySQLDouble: user, password, datadir, variables, seed, version="2.5"...). All are stopped after the test.
    Use it for fleets (several ProxySQL nodes, many endpoints) without a thread per endpoint.
    With TEST_DOUBLES=process they are served by this process's host process instead.
    """
    from lab.proxysql_double import DoubleServer

    server = None if doubles_in_a_process() else DoubleServer().start_background()
    shared = {} if server is None else {"server": server}
    made = []

    def make(n=1, **kwargs):
        out = []
        for _ in range(n):
            d = new_double(port=kwargs.pop("port", 0), **shared, **kwargs).start()
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
        if server is not None:
            server.stop()


SYNC_MODULES = (
    "mysql_servers",
    "mysql_users",
    "mysql_query_rules",
    "mysql_variables",
    "admin_variables",
    "proxysql_servers",
)


def join_cluster(doubles, sync=True, variables=None):
    """Make these doubles one ProxySQL Cluster: each lists every node in proxysql_servers (runtime too), has
    admin-cluster_username / admin-cluster_password admin/admin (accepted by the others) and, with `sync`, the
    default admin-cluster_<module>_diffs_before_sync (3) for every module, else 0 (no module syncs). `variables`:
    more admin- variables (e.g. admin-cluster_check_interval_ms). Statements logged so far are cleared."""
    for d in doubles:
        d.query("DELETE FROM proxysql_servers")
        for peer in doubles:
            d.query(
                f"INSERT INTO proxysql_servers (hostname, port, weight, comment) "
                f"VALUES ('127.0.0.1', {peer.port}, 0, 'node-{peer.port}')"
            )
        d.query("SET admin-cluster_username='admin'")
        d.query("SET admin-cluster_password='admin'")
        for module in SYNC_MODULES:
            d.query(f"SET admin-cluster_{module}_diffs_before_sync={3 if sync else 0}")
        for name, value in (variables or {}).items():
            d.query(f"SET {name}='{value}'")
        d.query("LOAD ADMIN VARIABLES TO RUNTIME")
        d.query("LOAD PROXYSQL SERVERS TO RUNTIME")
        d.query("SAVE ADMIN VARIABLES TO DISK")  # as an operator sets a node up: a restart keeps it
        d.query("SAVE PROXYSQL SERVERS TO DISK")
        d.clear_statements()
    return doubles


@pytest.fixture
def proxysql_double_pair(proxysql_double_factory):
    """Two doubles standing for two ProxySQL nodes of one cluster, as a tuple (a, b).

    Each lists both nodes in proxysql_servers (runtime too) and has admin-cluster_username /
    admin-cluster_password set to admin/admin (accepted by the other): their
    stats_proxysql_servers_checksums show each other's real runtime_checksums_values, so a product
    can compare the nodes' configurations. They do NOT sync configuration between themselves
    (admin-cluster_<module>_diffs_before_sync=0: the product applies each operation to every node).
    """
    a, b = join_cluster(proxysql_double_factory(2), sync=False)
    return a, b


@pytest.fixture
def proxysql_cluster_pair(proxysql_double_factory):
    """Two doubles in a ProxySQL Cluster with native sync ON at ProxySQL's defaults, as a tuple (a, b):
    a LOAD on one is pulled by the other after 3 checks of 1 s (and saved to its disk), as real 2.7.1 nodes do
    (../shared/proxysql-reference/samples/cluster-sync.jsonl)."""
    a, b = join_cluster(proxysql_double_factory(2), sync=True)
    return a, b
