"""Example queries of a digest: the real text of a query of that digest, sampled from what ProxySQL exposes.

stats_mysql_query_digest keeps no example; the processlist's `info` is the text of a query while it runs. Each
digest poll reads the sessions running a query now (at most READ_LIMIT, the longest running first: one bounded
statement; a mirror rule's copies, sessions of their own, are not sampled) and keeps, per digest text, the KEEP most recent distinct texts in Redis (a sorted set by time, EXAMPLE_TTL_S
after its last sample): bounded whatever the traffic. A text is filed under its digest by ProxySQL's normaliser
(configuration.rule_tester.normalise, approximated): the digest page looks its own digest text up the same way.

An example holds literals (values, sometimes secrets): the pages show it to operators only; viewers read its
digest form.
"""

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any, TypedDict, cast

import redis

from apps.configuration.rule_tester import normalise
from apps.fleet.models import ProxySQLNode

KEEP = 5
READ_LIMIT = 100
TEXT_MAX = 4000  # ProxySQL cuts long texts itself (mysql-query_digests_max_query_length); so do we
EXAMPLE_TTL_S = 86400

# A running query as ProxySQLAdmin.running_queries reads it: (hostgroup, user, db, srv_host, srv_port, time_ms, info).
RunningQuery = tuple[int, str, str, str, int | None, int, str]


class Example(TypedDict):
    """One kept example as of_digest() returns it ("server": [host, port] or None)."""

    text: str
    node: int
    cluster: int
    hostgroup: int
    user: str
    schema: str
    server: list[Any] | None  # [host, port] as JSON gave it back
    ts: int


def key_of(text: str) -> str:
    """The Redis key of a query's or digest text's examples (the same for both)."""
    return "digest-examples:" + hashlib.sha1(normalise(text).lower().encode()).hexdigest()[:24]


def record(
    r: redis.Redis,
    node: ProxySQLNode,
    rows: Sequence[RunningQuery],
    ts: float,
    keeps: Callable[[int], bool] | None = None,
) -> int:
    """File the running queries `rows` (ProxySQLAdmin.running_queries) of a node under their digests. `keeps`:
    whether a hostgroup belongs to this node row's cluster (a ProxySQL serving several clusters)."""
    pipe = r.pipeline(transaction=False)
    filed = set()
    for hostgroup, user, db, srv_host, srv_port, time_ms, info in rows:
        text = info.strip()[:TEXT_MAX]
        if not text or (keeps is not None and not keeps(hostgroup)):
            continue
        key = key_of(text)
        member = json.dumps(
            {
                "text": text,
                "node": node.pk,
                "cluster": node.cluster_id,
                "hostgroup": hostgroup,
                "user": user,
                "schema": db,
                "server": [srv_host, srv_port] if srv_host else None,
            },
            sort_keys=True,
        )
        pipe.zadd(key, {member: ts})  # the same text again: its time moves, no duplicate
        filed.add(key)
    for key in filed:
        pipe.zremrangebyrank(key, 0, -KEEP - 1)
        pipe.expire(key, EXAMPLE_TTL_S)
    if filed:
        pipe.execute()
    return len(filed)


def of_digest(r: redis.Redis, digest_text: str, cluster_id: int | None = None) -> list[Example]:
    """The examples kept for a digest text, newest first: dicts with "text", "node", "cluster", "hostgroup", "user",
    "schema", "server" ([host, port] or None), "ts"."""
    out: list[Example] = []
    # redis' one return type covers its async client too: the sync client gives (member, score) pairs
    kept = cast("list[tuple[bytes, float]]", r.zrevrange(key_of(digest_text), 0, KEEP - 1, withscores=True))
    for member, score in kept:
        try:
            example = json.loads(member)
        except ValueError:
            continue
        if cluster_id is not None and example.get("cluster") != cluster_id:
            continue
        out.append(cast(Example, {**example, "ts": int(score)}))  # the fields record() wrote, and its time
    return out
