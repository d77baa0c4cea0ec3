"""A realistic audit log at scale, for the benchmark (manage.py bench_audit, bin/bench-audit) and scale tests.

generate(n) appends n events spread evenly over the past `days`, as the product would have written
them (same actors, actions, targets and details shapes as record()'s callers), with a valid hash chain
continuing from the current head, their search_text and their search tokens. Rows go in by raw
executemany in batches (the ORM's per-object cost would dominate at a million rows).
"""

import json
import random
import time
from datetime import datetime, timedelta, timezone

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction

from apps.audit import search
from apps.audit.models import (
    CURRENT_SCHEME,
    HASHED_FIELDS,
    AuditChainHead,
    AuditEvent,
    AuditSearchToken,
    hash_content,
    hashed_content,
)
from apps.audit.services import GENESIS

USERS = [
    "alice",
    "bruno",
    "chen",
    "dalia",
    "emeka",
    "farah",
    "goran",
    "hana",
    "ivo",
    "jun",
    "kofi",
    "lena",
    "mateo",
    "nadia",
    "omar",
    "priya",
    "quinn",
    "rosa",
    "sven",
    "tariq",
    "uma",
    "viktor",
    "wen",
    "yara",
    "zoe",
]
RULES = ["read-pool rules", "failover"]
MARKER_EVERY = 50_000  # one event in this many carries a rare incident ticket (what a reviewer searches for)


def _cluster(i):
    return i + 1, f"prod-{['eu', 'us', 'ap'][i % 3]}-{i:02d}"


def _event(rng, i, n_clusters):
    cid, cname = _cluster(rng.randrange(n_clusters))
    c = cid - 1
    srv = rng.randrange(1, 7)
    server = f"10.2.{c}.{srv}:3306"
    node = f"px-{c:02d}-{rng.randrange(2)} (10.1.{c}.{rng.randrange(20, 22)}:6032)"
    user = rng.choice(USERS)
    ip = f"10.9.{rng.randrange(4)}.{rng.randrange(2, 250)}"
    op = 1000 + i // 7
    roll = rng.random()
    actor, kind, source, outcome, target, duration = user, "user", ip, "success", "", None
    if roll < 0.22:
        actor, kind, source = RULES[0], "rule", None
        action, outcome = "read-pool rules (dry run)", "dry_run"
        details = {
            "actions": [
                {
                    "server": server,
                    "from": "ONLINE",
                    "to": "OFFLINE_SOFT",
                    "hostgroup": 101,
                    "why": f"wsrep_local_recv_queue {rng.randrange(120, 900)} > 100",
                }
            ]
        }
    elif roll < 0.30:
        actor, kind, source = RULES[0], "rule", None
        action, outcome = "read-pool alert", "failure"
        details = {
            "alerts": [f"only {rng.randrange(0, 2)} reader(s) left in hostgroup 101, minimum 1"],
            "figures": {"readers_online": rng.randrange(0, 2), "recv_queue": rng.randrange(0, 2000)},
        }
    elif roll < 0.45:
        action, details = "login", {}
    elif roll < 0.48:
        action, outcome, details = "login failed", "refused", {"username": rng.choice(USERS + ["root", "admin"])}
    elif roll < 0.60:
        step = rng.choice(["planned", "confirmed", "done", "done", "rolled back", "refused"])
        kind_op = rng.choice(["switchover", "drain", "restore"])
        action = f"{kind_op} {step}"
        outcome = {"rolled back": "failure", "refused": "refused"}.get(step, "success")
        target = f"{kind_op.capitalize()} {cname}: {server}"
        details = {
            "operation": op,
            "guards": [
                {
                    "key": "writer_reachable",
                    "label": "the new writer is reachable and Synced",
                    "ok": True,
                    "value": "4 Synced",
                },
                {
                    "key": "readers_left",
                    "label": "readers left after the move",
                    "ok": step != "refused",
                    "value": str(rng.randrange(0, 4)),
                },
            ],
            "statements": {
                node: [
                    f"UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostname='{server.split(':')[0]}' "
                    "AND port=3306",
                    "LOAD MYSQL SERVERS TO RUNTIME",
                ]
            },
        }
        if step == "done":
            duration = round(rng.uniform(40, 400), 1)
    elif roll < 0.75:
        model = rng.choice(["hostgroupmembership", "cluster", "server", "proxysqlnode"])
        action, target = f"change {model}", server if model != "proxysqlnode" else node
        field = rng.choice(["weight", "max_connections", "status", "comment", "max_replication_lag"])
        details = {"changed": {field: [rng.randrange(1, 1000), rng.randrange(1, 1000)]}}
    elif roll < 0.80:
        action, target = "adopt proxysql node", node
        details = {"hostgroups": [100, 101, 102], "servers": 6, "admin_password": "(hidden)"}
    elif roll < 0.92:
        view = rng.choice(["switchover_form", "drain_confirm", "cluster_edit", "verify_chain"])
        action, outcome = f"refused {view}", "refused"
        details = {"needed_role": rng.choice(["operator", "admin"]), "path": f"/operations/{op}/", "method": "POST"}
    else:
        actor, kind, source = RULES[1], "rule", None
        action, outcome = "failover refused", "refused"
        details = {"writer": server, "bad_polls": rng.randrange(1, 3), "reason": "no Synced candidate"}
    if i % MARKER_EVERY == 17:
        details = {**details, "ticket": f"INC-{48000 + i // MARKER_EVERY}"}
    if kind == "rule":
        target = target or cname
    return {
        "actor": actor,
        "actor_kind": kind,
        "actor_user_id": None,
        "source_address": source,
        "cluster_id": cid,
        "cluster_name": cname,
        "target": target,
        "action": action,
        "outcome": outcome,
        "details": details,
        "duration_ms": duration,
    }


def generate(n, *, days=400, clusters=40, seed=7, batch=5000, progress=None):
    """Append n events; returns (seconds, token rows written)."""
    rng = random.Random(seed)
    started = time.monotonic()
    head = AuditChainHead.objects.filter(id=1).values_list("last_hash", flat=True).first() or GENESIS
    end = datetime.now(timezone.utc).replace(microsecond=0)
    start = end - timedelta(days=days)
    step = (end - start) / max(n, 1)
    cols = ("id",) + HASHED_FIELDS + ("hash", "search_text", "scheme")
    ev_table, tok_table = AuditEvent._meta.db_table, AuditSearchToken._meta.db_table
    qn = connection.ops.quote_name
    ev_sql = f"INSERT INTO {ev_table} ({', '.join(qn(c) for c in cols)}) VALUES ({', '.join(['%s'] * len(cols))})"
    tok_sql = f"INSERT INTO {tok_table} (token, event_id) VALUES (%s, %s)"
    next_id = (AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0) + 1
    tokens_written = 0
    for offset in range(0, n, batch):
        ev_rows, tok_rows = [], []
        for i in range(offset, min(n, offset + batch)):
            e = _event(rng, i, clusters)
            pk = next_id + i
            jitter_us = rng.randrange(0, 999_999) % max(1, int(step.total_seconds() * 1e6))  # stays in order
            created = start + step * i + timedelta(microseconds=jitter_us)
            e["details"] = json.loads(json.dumps(e["details"], cls=DjangoJSONEncoder))
            content = hashed_content({"created_at": created.isoformat(), **e, "prev_hash": head}, CURRENT_SCHEME)
            digest = hash_content(content)
            text = search.search_text(
                action=e["action"],
                actor=e["actor"],
                cluster_name=e["cluster_name"],
                target=e["target"],
                outcome=e["outcome"],
                source_address=e["source_address"],
                details=e["details"],
            )
            ev_rows.append(
                [
                    pk,
                    connection.ops.adapt_datetimefield_value(created),
                    e["actor"],
                    e["actor_kind"],
                    None,
                    e["source_address"],
                    e["cluster_id"],
                    e["cluster_name"],
                    e["target"],
                    e["action"],
                    e["outcome"],
                    json.dumps(e["details"], cls=DjangoJSONEncoder),
                    e["duration_ms"],
                    head,
                    digest,
                    text,
                    CURRENT_SCHEME,
                ]
            )
            tok_rows += [(t, pk) for t in search.tokens_for(text)]
            head = digest
        with transaction.atomic(), connection.cursor() as cur:
            cur.executemany(ev_sql, ev_rows)
            cur.executemany(tok_sql, tok_rows)
            AuditChainHead.objects.update_or_create(id=1, defaults={"last_hash": head})
        tokens_written += len(tok_rows)
        if progress:
            progress(min(n, offset + batch), time.monotonic() - started)
    return time.monotonic() - started, tokens_written
