"""A shard's lease without Redis: what it does before it was ever acquired (the rest: test_shards.py, on Redis)."""

import redis

from apps.monitoring import leases


def test_a_lease_never_acquired_claims_nothing_and_asks_nothing_of_redis():
    # Nothing listens on port 1: a call to Redis would raise ConnectionError (before: the claim sent its None value).
    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)
    lease = leases.ShardLease(unreachable, "proxysql", 0, holder="never acquired")

    assert lease.claim(7, 100.0, 99.0) is False
    assert not lease.lost.is_set()  # not lost: it was never ours
    assert lease.fence is None
