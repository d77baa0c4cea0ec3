"""Pytest fixtures for the async-replication MariaDB lab (one primary, two GTID replicas; real servers,
see lab/replication.py).

Load it as a plugin: list ``"lab.fixtures_replication"`` in the root conftest's ``pytest_plugins``.

Fixtures:

* ``replication_lab`` (session): the ``ReplicationLab`` object, node 1 primary, nodes 2 and 3
  replicating from it by GTID, caught up.
* ``replication_healthy`` (function): the same object, guaranteed in that topology before the test and
  restored to it after -- use it in every test that promotes, kills, stops or re-points a node, or
  writes on a replica.

Tests that disrupt the topology affect everyone using it at that moment; under pytest-xdist keep them in
one worker (e.g. ``@pytest.mark.xdist_group("replication")`` with ``--dist loadgroup``).
"""

from __future__ import annotations

import pytest

from lab.replication import ReplicationLab
from lab.fixture_leases import leased

__all__ = ["replication_lab", "replication_healthy"]


@pytest.fixture(scope="session")
def replication_lab():
    """Session-scoped ``ReplicationLab``: node 1 primary (read_only OFF), nodes 2 and 3 its replicas
    (``MASTER_USE_GTID=slave_pos``, read_only ON), caught up.

    Setup: ``lab.up()`` -- reuses a healthy lab in a few milliseconds; from nothing ~2-6 s (one
    mariadb-install-db into a template, copied to the three datadirs). Nodes are at ``lab.node(n)``
    (host, port, socket); talk to them with ``lab.monitor_connection(n)``, ``lab.app_connection(n)``
    (schema ``app``) or ``lab.root_connection(n)``; ``lab.wait_caught_up(n)`` after a write.

    Teardown: stops the lab (``lab.down()``) only if a pytest session started it (no node was running
    when it came up) and no other pytest session still holds it. A lab that was already running is left
    running. ``LAB_KEEP=1`` always keeps it up (later sessions treat it as pre-existing).
    """
    with leased(ReplicationLab()) as lab:
        yield lab


@pytest.fixture
def replication_healthy(replication_lab):
    """Function-scoped: the session's ``ReplicationLab`` in its original topology before and after the
    test.

    Before and after the test it calls ``lab.heal()``: stopped nodes are restarted; after a switchover
    node 1 catches up with the current primary and is switched back to gracefully (nothing written on
    the other primary is lost); a replica whose history cannot follow node 1's (errant writes, split
    brain) is wiped and re-cloned (~0.5-2 s). When the lab already is healthy this costs a few
    milliseconds (one status read per node).
    """
    replication_lab.heal()
    yield replication_lab
    replication_lab.heal()
