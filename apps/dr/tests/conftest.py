"""The DR lab (lab/dr.py) in the inventory: clusters dc1 and dc2, their servers, and the channel
dc1 -> dc2 as the lab runs it now (wherever a previous test left it), with every node a candidate."""

import pytest

from lab.dr import register_in_inventory


@pytest.fixture
def dr_inventory(db, dr_healthy):
    """(channel, dc1 servers, dc2 servers) with the channel's ends where the lab's channel runs."""
    return register_in_inventory(dr_healthy)
