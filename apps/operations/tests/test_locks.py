"""The cluster lock's holder label fits its column on every database."""

import pytest

from apps.fleet.models import Cluster
from apps.operations import locks
from apps.operations.models import ClusterLock, Operation

pytestmark = pytest.mark.django_db


def test_a_long_operation_title_still_takes_the_lock_with_a_readable_holder():
    """A read-pool rule's title carries the backend's own error (up to 300 characters): MariaDB refused the
    lock's holder ("Data too long"), so the rule crashed exactly when a backend was unreachable."""
    cluster = Cluster.objects.create(name="c", writer_hostgroup=100, reader_hostgroup=101)
    title = "Read pool of c: 127.0.0.1:3313 hg 101 → OFFLINE_SOFT (unreachable: " + "x" * 300
    op = Operation.objects.create(
        cluster=cluster, kind="read_pool", title=title[:300], actor="read-pool rules", plan={}
    )
    locks.acquire(op, ttl_s=60)
    holder = ClusterLock.objects.get(cluster=cluster).holder
    assert len(holder) <= ClusterLock._meta.get_field("holder").max_length
    assert holder.startswith(f"#{op.pk} Read pool of c: 127.0.0.1:3313") and holder.endswith("… (by read-pool rules)")
    assert locks.current_holder(cluster) == holder
