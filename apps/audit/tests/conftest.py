"""Audit fixtures.

at(minutes_ago, action, ...)  appends one event at a chosen time through the chain's own append
                              (services.append_event), as record() would have written it then
legacy_event(action, user)    appends one event as the legacy hashing scheme wrote it (before the re-anchor)
old_style_deletion(user)      deletes a user the way it touched the log before: nulling its events' link
clusters                      two inventory clusters, "alpha" and "beta", each with a node and a server
admin_client                  a client logged in as the admin persona
incident                      an hour of alpha's history: samples, a drain with its steps, audit events
adopted_lab, live_redis       from the root conftest (the lab cluster adopted, a clean Redis)
"""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.audit.models import LEGACY_SCHEME, AuditChainHead, AuditEvent
from apps.audit.services import GENESIS, append_event
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.monitoring.models import BackendSample, ProxySQLSample
from apps.operations.models import Operation, OperationStep


TABLE = AuditEvent._meta.db_table


def tamper(sql, params):
    """Change the table behind the ORM's back, as someone with database access would: `{table}` in sql."""
    with connection.cursor() as cur:
        cur.execute(sql.format(table=TABLE), params)


def legacy_event(action, user=None, created_at=None):
    """An event as the legacy scheme wrote it before migration 0003: its hash covers the user's id."""
    head, _ = AuditChainHead.objects.get_or_create(id=1, defaults={"last_hash": GENESIS})
    event = AuditEvent(
        created_at=created_at or timezone.now(),
        actor=user.username if user else "system",
        actor_kind="user" if user else "system",
        actor_user_id=user.pk if user else None,
        action=action,
        outcome="success",
        details={"n": action},
        prev_hash=head.last_hash,
        scheme=LEGACY_SCHEME,
    )
    event.hash = event.compute_hash()
    event.save()
    AuditChainHead.objects.filter(id=1).update(last_hash=event.hash)
    return event


def old_style_deletion(user):
    """What deleting a user did to the log before: Django nulled the link (on_delete=SET_NULL)."""
    tamper("UPDATE {table} SET actor_user_id = NULL WHERE actor_user_id = %s", [user.pk])
    user.delete()


@pytest.fixture(autouse=True)
def archive_dir(settings, tmp_path):
    """Archives of these tests go to a temporary directory."""
    settings.AUDIT_ARCHIVE_DIR = tmp_path / "audit-archive"
    return settings.AUDIT_ARCHIVE_DIR


@pytest.fixture
def at(db):
    now = timezone.now()

    def append(
        minutes_ago,
        action,
        *,
        actor="vera",
        kind="user",
        cluster=None,
        target="",
        outcome="success",
        details=None,
        duration_ms=None,
        source="10.0.0.7",
    ):
        return append_event(
            created_at=now - timedelta(minutes=minutes_ago),
            actor=actor,
            actor_kind=kind,
            source_address=source if kind == "user" else None,
            cluster_id=getattr(cluster, "pk", None),
            cluster_name=getattr(cluster, "name", ""),
            target=target,
            action=action,
            outcome=outcome,
            details=details,
            duration_ms=duration_ms,
        )

    append.now = now
    return append


@pytest.fixture
def clusters(db):
    out = []
    for i, name in enumerate(("alpha", "beta")):
        cluster = Cluster.objects.create(name=name, writer_hostgroup=10, reader_hostgroup=11)
        ProxySQLNode.objects.create(
            cluster=cluster, name=f"px-{name}", admin_host="127.0.0.1", admin_port=17000 + i, admin_user="admin"
        )
        Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=23300 + i)
        out.append(cluster)
    return out


@pytest.fixture
def admin_client(client, admin_user_role):
    client.force_login(admin_user_role)
    return client


@pytest.fixture
def incident(clusters, at):
    """alpha between 02:00 and 03:00 (in minutes from the window's start): a reader desyncs (recv queue
    250 over the limit of 100) at 10, becomes unreachable at 20 and is back at 30; ProxySQL px-alpha is
    unreachable from 40 to 45; otto drains it from 12 to 13 (three steps); ada changes a weight at 50."""
    alpha, beta = clusters
    start = (at.now - timedelta(hours=2)).replace(microsecond=0)
    server = Server.objects.get(cluster=alpha)
    other = Server.objects.create(cluster=alpha, hostname="127.0.0.1", port=23399)
    node = ProxySQLNode.objects.get(cluster=alpha)
    samples, px = [], []
    for s in range(0, 3600, 2):
        minute = s / 60
        state, queue, reachable = 4, 0, True
        if 10 <= minute < 20:
            state, queue = 2, 250
        elif 20 <= minute < 30:
            reachable, state, queue = False, None, None
        samples.append(
            BackendSample(
                server=server, ts=start + timedelta(seconds=s), reachable=reachable, local_state=state, recv_queue=queue
            )
        )
        samples.append(BackendSample(server=other, ts=start + timedelta(seconds=s), local_state=4, recv_queue=0))
        px.append(ProxySQLSample(node=node, ts=start + timedelta(seconds=s), reachable=not 40 <= minute < 45))
    BackendSample.objects.bulk_create(samples)
    ProxySQLSample.objects.bulk_create(px)
    op = Operation.objects.create(
        cluster=alpha,
        kind="drain",
        state="done",
        title="Drain 127.0.0.1:23300",
        actor="otto",
        plan={},
        started_at=start + timedelta(minutes=12),
        finished_at=start + timedelta(minutes=13),
    )
    Operation.objects.filter(pk=op.pk).update(created_at=start + timedelta(minutes=11))
    t = start + timedelta(minutes=12)
    for i, (key, ms) in enumerate((("preflight", 4.5), ("drain", 41200.0), ("verify", 9.25))):
        OperationStep.objects.create(
            operation=op,
            index=i,
            key=key,
            title=key,
            state="done",
            started_at=t,
            finished_at=t + timedelta(milliseconds=ms),
            duration_ms=ms,
        )
        t += timedelta(milliseconds=ms)
    minutes_ago = lambda m: (at.now - start).total_seconds() / 60 - m  # noqa: E731
    at(minutes_ago(11), "drain planned", actor="otto", cluster=alpha, target=op.title, details={"operation": op.pk})
    at(minutes_ago(13), "drain done", actor="otto", cluster=alpha, target=op.title, duration_ms=60000.0)
    at(
        minutes_ago(50),
        "change hostgroupmembership",
        actor="ada",
        cluster=alpha,
        target=str(server),
        details={"changed": {"weight": [1000, 1]}},
    )
    at(minutes_ago(50), "change cluster", actor="ada", cluster=beta)  # another cluster: not shown
    at(minutes_ago(70), "too late", actor="ada", cluster=alpha)  # after the window: not shown
    return alpha, start, start + timedelta(hours=1), op, server
