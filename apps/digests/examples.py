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

from apps.configuration.rule_tester import normalise

KEEP = 5
READ_LIMIT = 100
TEXT_MAX = 4000  # ProxySQL cuts long texts itself (mysql-query_digests_max_query_length); so do we
EXAMPLE_TTL_S = 86400


def key_of(text):
    """The Redis key of a query's or digest text's examples (the same for both)."""
    return "digest-examples:" + hashlib.sha1(normalise(text).lower().encode()).hexdigest()[:24]


def record(r, node, rows, ts, keeps=None):
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


def of_digest(r, digest_text, cluster_id=None):
    """The examples kept for a digest text, newest first: dicts with "text", "node", "cluster", "hostgroup", "user",
    "schema", "server" ([host, port] or None), "ts"."""
    out = []
    for member, score in r.zrevrange(key_of(digest_text), 0, KEEP - 1, withscores=True):
        try:
            example = json.loads(member)
        except ValueError:
            continue
        if cluster_id is not None and example.get("cluster") != cluster_id:
            continue
        out.append({**example, "ts": int(score)})
    return out
