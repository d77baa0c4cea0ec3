"""Helpers for the alert tests: poll the adopted lab as the poll tasks do and judge what the rounds wrote,
a local HTTP receiver that records what it got (and can be down), and rule overrides."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from apps.alerts import context, evaluate, services
from apps.alerts.models import Alert, AlertState
from apps.audit.actor import Actor
from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import live, pollers


@pytest.fixture(autouse=True)
def fresh_caches(settings, monkeypatch):
    """The evaluation keeps the inventory, the rule settings and running operations per process: tests change
    them under it, so every judgement here reads them afresh. Every cluster is swept at every call, as if the
    rounds ran for a long time."""
    settings.ALERTS_SWEEP_S = 0
    monkeypatch.setattr(context, "INVENTORY_CACHE_S", 0)
    monkeypatch.setattr(context, "SITUATION_CACHE_S", 0)
    evaluate.forget_caches()
    pollers._connections.clear()
    yield
    evaluate.forget_caches()
    for _, client in list(pollers._connections.values()):
        client.close()
    pollers._connections.clear()


def tick(kinds=("proxysql", "backend")):
    """One poll round of every node of the given kinds, each followed by the alert evaluation (shard 0 of 1:
    it owns every cluster), as workers/monitoring.py runs them. Returns the evaluation's counts."""
    counts = {}
    for kind in kinds:
        if kind == live.PROXYSQL:
            summary = pollers.proxysql_round(list(ProxySQLNode.objects.select_related("cluster")), threads=4)
        else:
            summary = pollers.backend_round(list(Server.objects.select_related("cluster")), threads=4)
        for k, v in evaluate.after_poll_round(kind, summary.pop("docs"), 0, 1).items():
            counts[k] = counts.get(k, 0) + v
    return counts


def open_alerts(rule=None):
    qs = Alert.objects.filter(active_key__isnull=False)
    if rule:
        qs = qs.filter(rule=rule)
    return list(qs.order_by("id"))


def firing(rule):
    return [a for a in open_alerts(rule) if a.state == AlertState.FIRING]


def firing_all():
    return firing(None)


def until(predicate, timeout, step=0.3, kinds=("proxysql", "backend")):
    """Tick until predicate() is true; returns its last value (falsy on timeout)."""
    deadline = time.monotonic() + timeout
    while True:
        tick(kinds)
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(step)


def set_rule(rule, cluster=None, **kw):
    """A rule override (as the rules page saves it), e.g. set_rule("writer_none", for_s=0)."""
    params = {k[2:]: v for k, v in kw.items() if k.startswith("p_")}
    services.save_rule_setting(
        cluster,
        rule,
        enabled=kw.get("enabled"),
        severity=kw.get("severity", ""),
        for_s=kw.get("for_s"),
        params=params,
        actor=Actor.command(_system_user()),
    )


def _system_user():
    from django.contrib.auth import get_user_model

    user, _ = get_user_model().objects.get_or_create(username="alert-tests")
    return user


# -- a local receiver --------------------------------------------------------------------------------
class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST (path, headers, JSON body). `down()` closes its
    socket (connections refused), `up()` listens again on the same port; `status` is what it answers."""

    def __init__(self):
        self.got, self.status, self.lock = [], 200, threading.Lock()
        self.answer = b"{}"
        self.server = None
        self.port = None
        self.up()

    def up(self):
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver.lock:
                    receiver.got.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "at": time.time(),
                            "json": json.loads(body or b"null"),
                        }
                    )
                self.send_response(receiver.status)
                self.end_headers()
                self.wfile.write(receiver.answer)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port or 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def down(self):
        self.server.shutdown()
        self.server.server_close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}/hook"

    def messages(self):
        with self.lock:
            return [g["json"] for g in self.got]


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    try:
        r.down()
    except Exception:
        pass
