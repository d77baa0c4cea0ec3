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

import os
from pathlib import Path

import psutil
import pytest

from lab.galera import GaleraLab

__all__ = ["galera_lab", "galera_healthy"]


def _started_marker(lab: GaleraLab) -> Path:
    return lab.base_dir / "started-by-pytest"


def _lease_dir(lab: GaleraLab) -> Path:
    return lab.base_dir / "pytest-sessions"


def _live_leases(lab: GaleraLab) -> list[int]:
    pids = []
    for f in _lease_dir(lab).glob("*"):
        try:
            pid = int(f.name)
        except ValueError:
            continue
        if pid == os.getpid():
            continue
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
        if alive:
            pids.append(pid)
        else:
            f.unlink(missing_ok=True)  # a session that died without its teardown
    return pids


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
    lab = GaleraLab()
    with lab._lock():
        result = lab.up()
        if not result["was_running"]:
            _started_marker(lab).write_text(f"{os.getpid()}\n")
        _lease_dir(lab).mkdir(parents=True, exist_ok=True)
        lease = _lease_dir(lab) / str(os.getpid())
        lease.write_text("")
    try:
        yield lab
    finally:
        with lab._lock():
            lease.unlink(missing_ok=True)
            if os.environ.get("LAB_KEEP") == "1":
                _started_marker(lab).unlink(missing_ok=True)
            elif _started_marker(lab).exists() and not _live_leases(lab):
                lab.down()
                _started_marker(lab).unlink(missing_ok=True)


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
