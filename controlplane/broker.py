"""The Redis broker transport: kombu's, with one fix for a worker whose Redis was lost (issue 39).

kombu 5.7.0 (the newest; same pattern as celery/kombu#582): on a lost connection Celery's consumer first
collect()s the connection, which closes its channels ignoring connection errors and then drops the transport's
client (None), and then close()s it. A channel whose first close failed half-way (its BRPOP read raised the
ConnectionError: the worker was waiting on Redis) closes again, and restoring the messages the worker holds
unacknowledged builds a new connection pool from that client: AttributeError ('NoneType' object has no attribute
'hostname'), which neither close nor Celery ignores, and the worker exits ("Unrecoverable error") instead of
reconnecting. Here a channel whose transport has no client left raises the connection error instead, which every
close path ignores: nothing can be restored through a connection that is gone (the messages stay in Redis's unacked
set, which kombu restores after the visibility timeout, or were lost with an empty Redis: our tasks are beat's ticks,
which the next tick replaces, and operations, which the reaper resolves from the database)."""

from kombu.transport import TRANSPORT_ALIASES, redis
from redis.exceptions import ConnectionError as RedisConnectionError


class Channel(redis.Channel):
    def _connparams(self, asynchronous=False):
        if self.connection.client is None:
            raise RedisConnectionError("the broker connection was closed after it was lost")
        return super()._connparams(asynchronous=asynchronous)


class Transport(redis.Transport):
    Channel = Channel


def use():
    """redis:// and rediss:// URLs (CELERY_BROKER_URL) name this transport; the URL is parsed as before (TLS for
    rediss)."""
    for scheme in ("redis", "rediss"):
        TRANSPORT_ALIASES[scheme] = f"{__name__}:Transport"
