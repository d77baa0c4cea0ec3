"""Pytest fixtures for the three-node MariaDB Galera lab (real servers, see lab/galera.py).

Load it as a plugin: the root conftest lists ``"lab.fixtures_galera"`` in ``pytest_plugins``.

Fixtures:

* ``galera_lab`` (session): the ``GaleraLab`` object, all three nodes up and Synced.
* ``galera_healthy`` (function): the same object, guaranteed healthy before the test and restored to
  healthy after it -- use it in every test that kills, stops, desyncs or reconfigures a node.

Tests that disrupt the cluster affect everyone using it at that moment; under pytest-xdist keep them in
one worker (e.g. ``@pytest.mark.xdist_group("galera")`` with ``--dist loadgroup``).
"""

from __future__ import annotations

import pytest

from lab.galera import GaleraLab
from lab.fixture_leases import leased

__all__ = ["galera_lab", "galera_healthy"]


@pytest.fixture(scope="session")
def galera_lab():
    """Session-scoped ``GaleraLab`` with all three nodes up and Synced (cluster size 3).

    Setup: ``lab.up()`` -- reuses an already running, Synced lab in a few milliseconds, otherwise starts
    what is missing (from empty: ~10-15 s). Nodes are at ``lab.node(n)`` (host, port, socket); use
    ``lab.monitor_connection(n)``, ``lab.app_connection(n)`` or ``lab.root_connection(n)`` to talk to them.

    Teardown: stops the lab (``lab.down()``) only if a pytest session started it (no node was running
    when it came up) and no other pytest session -- e.g. another xdist worker -- still holds it.
    A lab that was already running before the session is left running. ``LAB_KEEP=1`` always keeps it up
    (and hands it over: later sessions treat it as pre-existing).
    """
    with leased(GaleraLab()) as lab:
        yield lab


@pytest.fixture
def galera_healthy(galera_lab):
    """Function-scoped: the session's ``GaleraLab``, healthy before and after the test.

    Before and after the test it calls ``lab.heal()``: dead or stopped nodes are restarted (rejoining by
    IST), ``wsrep_desync=OFF``, ``read_only=OFF``, ``wsrep_reject_queries=NONE`` on every node, and all
    three are waited for until Synced with cluster size 3. When the cluster already is healthy this costs
    a few milliseconds (one status read per node). Use it in tests that kill, stop or desync nodes.
    """
    galera_lab.heal()
    yield galera_lab
    galera_lab.heal()
