"""Latest state per node in Redis: one JSON document per node, with its timestamp and last error.

Pages read it; pollers write it. When Redis is down, read_many() raises LiveUnavailable so a page can
say "live data unavailable" and fall back to history from the database.
"""
import json
import time

import redis
from django.conf import settings

PROXYSQL, BACKEND = "proxysql", "backend"
DRIFT = "drift"  # per ProxySQL node: the drift watcher's last result (apps/configuration/drift.py)
_clients = {}


class LiveUnavailable(Exception):
    pass


def client():
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(url, socket_connect_timeout=0.3, socket_timeout=0.5,
                                             health_check_interval=30)
    return _clients[url]


def key(kind, pk):
    return f"latest:{kind}:{pk}"


def write_many(kind, docs):
    """docs: {pk: dict}. One round trip."""
    if not docs:
        return
    try:
        pipe = client().pipeline(transaction=False)
        for pk, doc in docs.items():
            pipe.set(key(kind, pk), json.dumps(doc, separators=(",", ":")))
        pipe.execute()
    except redis.RedisError as exc:
        raise LiveUnavailable(str(exc)) from None


def read_many(kind, pks):
    """{pk: doc or None}. One round trip."""
    pks = list(pks)
    if not pks:
        return {}
    try:
        values = client().mget([key(kind, pk) for pk in pks])
    except redis.RedisError as exc:
        raise LiveUnavailable(str(exc)) from None
    return {pk: (json.loads(v) if v else None) for pk, v in zip(pks, values)}


def read_one(kind, pk):
    return read_many(kind, [pk])[pk]


def age_seconds(doc, now=None):
    if not doc or "ts" not in doc:
        return None
    return max(0.0, (now or time.time()) - doc["ts"])
