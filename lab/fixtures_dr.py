"""Pytest fixtures for the disaster-recovery lab: two Galera clusters dc1 and dc2 and an asynchronous
channel dc1 -> dc2 (real servers, see lab/dr.py).

Fixtures:

* ``dr_lab`` (session): the ``DrLab`` object, both clusters Synced, the channel running.
* ``dr_healthy`` (function): the same object, healed before and after the test (dead nodes rejoined,
  the channel running where it is configured) -- use it in every test that kills nodes or moves the channel.

Tests that disrupt it affect everyone using it at that moment.
"""

from __future__ import annotations

import pytest

from lab.dr import DrLab
from lab.fixture_leases import leased

__all__ = ["dr_lab", "dr_healthy"]


@pytest.fixture(scope="session")
def dr_lab():
    """Session-scoped ``DrLab``. Setup: ``lab.up()`` -- reuses a running lab at once, from nothing ~35 s
    (six nodes, each joiner by SST). Teardown as the Galera lab's: stopped only if this session started
    it and no other session holds it; ``LAB_KEEP=1`` keeps it up."""
    with leased(DrLab()) as lab:
        yield lab


@pytest.fixture
def dr_healthy(dr_lab):
    dr_lab.heal()
    yield dr_lab
    dr_lab.heal()
