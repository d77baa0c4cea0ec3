"""pytest fixtures for REAL ProxySQL nodes (the real tier): processes started from ../shared/proxysql/<version>/proxysql
(lab.real_proxysql.RealProxySQL) on free 127.0.0.1 ports of the pass's own network namespace, each with its datadir
under the lab set's var/ directory, stopped at the end.

A missing binary FAILS the test (never a skip): CI has ../shared beside the checkout, and a real tier that silently
never runs would pass CI for ever.

`real_proxysql_factory`: make(version, name=...) starts a fresh node (empty datadir, `--initial`-like: the config file
is read) and returns it; every node a test started is stopped at the end of that test. A node is cheap to start (well
under a second), so a test that changes a node's configuration asks for its own fresh nodes. Stopped per test, not
per session: a real node left running keeps its Monitor checking the lab's backends (about 0.5 % of a core each, and
the backends' own share), and a pass had 52 of them running at once, 0.25 cores of the CI machine.
"""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
REAL_VERSIONS = ("2.7.1", "2.5.5")


def real_binary(version):
    """The path of a real ProxySQL binary beside the checkout; fails the test when it is not there."""
    path = REPO_ROOT.parent / "shared" / "proxysql" / version / "proxysql"
    if not path.is_file():
        pytest.fail(
            f"real ProxySQL {version} not found at {path}: the real tier needs ../shared/proxysql beside the "
            "checkout (shared/proxysql/README.md)",
            pytrace=False,
        )
    return path


@pytest.fixture
def real_proxysql_factory():
    from lab._mariadb_common import LAB_VAR
    from lab.bench_config import free_ports
    from lab.real_proxysql import RealProxySQL

    root = LAB_VAR / "real-proxysql"
    started = []

    def make(version, name=None, peers=None, ports=None):
        """ports: (admin, client) chosen by the caller (a ProxySQL Cluster's members name each other's admin ports
        in their config: bench_faults.RealFaultMatrix picks them first)."""
        admin_port, client_port = ports or free_ports(2)
        node = RealProxySQL(
            real_binary(version),
            root / f"{name or version}-{admin_port}",
            admin_port,
            client_port,
            peers=peers,
            name=name,
        )
        node.start()
        started.append(node)
        return node

    try:
        yield make
    finally:
        for node in started:
            node.stop()
