"""Rate limits per token (per user for the browser's session): reads and writes counted apart, over a
sliding window, in Django's cache "api-throttle" (Redis, so every web process shares the count).

When Redis does not answer, the counts go to this process's memory ("api-throttle-local") rather than
failing the request, and Redis is left alone for a few seconds before it is tried again (a dead Redis must
not add a connect timeout to every request). A request over the limit gets 429 with Retry-After.
"""

import logging
import time

import redis
from django.conf import settings
from django.core.cache import caches
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger(__name__)
RETRY_REDIS_AFTER_S = 5.0
SAFE = ("GET", "HEAD", "OPTIONS")


class FallbackCache:
    """get/set on the Redis cache, or on local memory while Redis is down."""

    def __init__(self):
        self.down_until = 0.0

    def _call(self, name, *args):
        if time.monotonic() >= self.down_until:
            try:
                return getattr(caches["api-throttle"], name)(*args)
            except redis.RedisError as exc:
                self.down_until = time.monotonic() + RETRY_REDIS_AFTER_S
                log.warning(
                    "API rate limits count in local memory for %s s: Redis does not answer (%s)",
                    RETRY_REDIS_AFTER_S,
                    exc,
                )
        return getattr(caches["api-throttle-local"], name)(*args)

    def get(self, key, default=None):
        return self._call("get", key, default)

    def set(self, key, value, timeout=None):
        return self._call("set", key, value, timeout)


class PerTokenThrottle(SimpleRateThrottle):
    cache = FallbackCache()

    def __init__(self):
        pass  # the scope, hence the rate, depends on the request (read or write): see allow_request

    def allow_request(self, request, view):
        self.scope = "read" if request.method in SAFE else "write"
        self.rate = settings.API_THROTTLE_RATES[self.scope]  # read per request: tests and operators may change it
        self.num_requests, self.duration = self.parse_rate(self.rate)
        return super().allow_request(request, view)

    def get_cache_key(self, request, view):
        token = getattr(request, "auth", None)
        if token is not None and getattr(token, "pk", None):
            ident = f"token-{token.pk}"
        elif request.user and request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = f"address-{self.get_ident(request)}"
        return f"throttle-{self.scope}-{ident}"
