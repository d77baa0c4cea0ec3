"""The API's test helpers: a client that sends a token, and the URL arguments of every endpoint."""

import json

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from apps.accounts import tokens
from apps.accounts.tests.test_url_permissions import objects  # noqa: F401  (a fixture: one of everything)


def error_of(response, status):
    """The API's one error shape, checked: {"error": {"code", "message"[, "fields"]}} with this status."""
    assert response.status_code == status, response.content
    assert response["Content-Type"] == "application/json"
    error = response.json()["error"]
    assert set(error) <= {"code", "message", "fields"} and error["message"]
    return error


class ApiClient:
    """Django's test client speaking JSON with `Authorization: Bearer <token>` (or none)."""

    def __init__(self, raw=None):
        self.client = Client()
        self.client.raise_request_exception = False  # a 500 is an answer to assert on, not an exception here
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"} if raw else {}

    def request(self, method, url, data=None, **extra):
        headers = {**self.headers, **extra}
        if method in ("get", "head", "delete", "options"):
            return getattr(self.client, method)(url, data, **headers)
        payload = data if isinstance(data, (str, bytes)) else json.dumps({} if data is None else data)
        return getattr(self.client, method)(
            url, payload, content_type=headers.pop("content_type", "application/json"), **headers
        )

    def get(self, url, data=None, **extra):
        return self.request("get", url, data, **extra)

    def post(self, url, data=None, **extra):
        return self.request("post", url, data, **extra)

    def put(self, url, data=None, **extra):
        return self.request("put", url, data, **extra)


def token_client(user, name="tests"):
    return ApiClient(tokens.create(user, name)[1])


@pytest.fixture
def api_for():
    """api_for(user) -> an ApiClient with a fresh token of that user."""
    return token_client


def api_patterns():
    """(name, pattern) of every URL under the api namespace."""

    def walk(patterns, namespace=None):
        for p in patterns:
            if isinstance(p, URLResolver):
                yield from walk(p.url_patterns, p.namespace or namespace)
            elif isinstance(p, URLPattern) and namespace == "api":
                yield f"api:{p.name}", p

    return list(walk(get_resolver().url_patterns))


def view_class(pattern):
    return getattr(pattern.callback, "view_class", None)


# URL name -> which object of the `objects` fixture its <pk> is; the chart name for history URLs.
OWNER = {
    "cluster": "cluster",
    "cluster_hostgroups": "cluster",
    "cluster_state": "cluster",
    "cluster_drift": "cluster",
    "switchover": "cluster",
    "failover": "cluster",
    "repair": "cluster",
    "record_nodes": "cluster",
    "config_versions": "cluster",
    "config_diff": "cluster",
    "change_sets": "cluster",
    "config_write_back": "cluster",
    "server": "server",
    "server_state": "server",
    "server_history": "server",
    "drain": "server",
    "restore": "server",
    "node": "node",
    "node_state": "node",
    "node_history": "node",
    "digest": "digest",
    "digest_history": "digest",
    "operation": "operation",
    "operation_confirm": "operation",
    "operation_cancel": "operation",
    "operation_rollback_now": "operation",
    "audit_event": "event",
    "report": "report",
    "config_version": "version",
    "config_export": "version",
    "config_revert": "version",
    "change_set": "change_set",
    "change_set_plan": "change_set",
    "change_set_confirm": "change_set",
    "alert": "alert",
    "alert_acknowledge": "alert",
    "silence_end": "silence",
    "channel": "dr_channel",
    "channel_move": "dr_channel",
    "alert_channel": "channel",
    "report_schedule": "schedule",
    "rule_settings": "cluster",
    "cluster_tags": "cluster",
    "rollout": "rollout",
    "rollout_start": "rollout",
    "rollout_abort": "rollout",
    "rollout_pause": "rollout",
    "rollout_resume": "rollout",
    "rollout_halt": "rollout",
    "cluster_connections": "cluster",
    "cluster_native_manager": "cluster",
}
CHART = {"node_history": "queries", "server_history": "wsrep_state"}


def kwargs_for(name, pattern, objects):
    converters = pattern.pattern.converters
    if not converters:
        return {}
    short = name.split(":", 1)[1]
    if short not in OWNER:
        pytest.fail(f"{name} ({pattern.pattern}) takes arguments: teach apps/api/tests/conftest.py OWNER which object")
    out = {"pk": objects[OWNER[short]]}
    if "name" in converters:
        out["name"] = CHART[short]
    return out


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    """Each test counts its own requests (ids repeat between tests: the same token id would share a count)."""
    from django.core.cache import caches

    from apps.api.throttling import PerTokenThrottle

    caches["api-throttle-local"].clear()
    PerTokenThrottle.cache.down_until = 0
    yield
    caches["api-throttle-local"].clear()
