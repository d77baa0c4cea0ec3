"""The one-time re-anchor of the audit chain (migration 0003): from the legacy hashing scheme, in which the
actor's user id was a link that deleting the user nulled, to the current one (see apps/audit/models.py).

No event is re-hashed: every legacy event keeps its hash, and verification checks it under the legacy
scheme for as long as the event exists. In one transaction:

1. Restore the user ids that deletions nulled. A user's event (actor_kind "user") whose id is now empty
   and whose legacy hash no longer matches is one such: the id that makes its hash match again is the
   one it was written with (SHA-256 admits no other in practice), so it is written back and listed.
   Candidates are tried from the user table's sequence down, the id found last for the same user name
   first. An event for which no id matches was changed some other way: it is left as it is, listed,
   and verification goes on reporting it.
2. Append the re-anchor event, the first in the current scheme: its prev_hash is the old chain head,
   and its details record that head, the legacy events (count and id range) and the links restored.

A log that is still empty (a new installation) needs no anchor: it starts in the current scheme.
Written against the historical models a migration is given (`apps`), so the tests run it as well.
"""

import json
from collections import defaultdict
from datetime import timezone as dt_timezone

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, transaction
from django.db.models import Count, Max, Min
from django.utils import timezone

from . import search
from .models import CURRENT_SCHEME, HASHED_FIELDS, LEGACY_SCHEME, REANCHOR_ACTION, hash_content, hashed_content

GENESIS = "0" * 64
CHUNK = 2000
ID_MARGIN = 1000  # ids tried beyond the highest known one (users created and deleted since)
MAX_UNRESTORABLE_SEARCHES = 1000  # past this many events that match no id, the rest are only listed
LISTED = 100  # event ids listed per unrestorable set in the anchor's details


def run(apps, connection, *, now=None):
    """Re-anchor the chain once; returns the re-anchor event, or None when there is nothing to anchor."""
    events = apps.get_model("audit", "AuditEvent")
    heads = apps.get_model("audit", "AuditChainHead")
    tokens = apps.get_model("audit", "AuditSearchToken")
    users = apps.get_model(settings.AUTH_USER_MODEL)
    with transaction.atomic(using=connection.alias):
        head = heads.objects.select_for_update().filter(id=1).first()
        if head is None or head.last_hash == GENESIS or events.objects.filter(scheme=CURRENT_SCHEME).exists():
            return None  # a new log, or one anchored already
        restored, unrestorable = restore_user_links(events, _user_id_ceiling(users, events, connection))
        legacy = events.objects.filter(scheme=LEGACY_SCHEME).aggregate(
            count=Count("id"), first=Min("id"), last=Max("id")
        )
        details = json.loads(
            json.dumps(
                {
                    "old_head": head.last_hash,
                    "scheme": {"from": LEGACY_SCHEME, "to": CURRENT_SCHEME},
                    "why": "the legacy scheme hashed a link to the user that deleting the user nulled; the current one "
                    "hashes the user name and id as written, which nothing changes",
                    "legacy_events": legacy["count"],
                    "first_legacy_event": legacy["first"],
                    "last_legacy_event": legacy["last"],
                    "restored_user_links": restored,
                    "unrestorable_events": unrestorable,
                },
                cls=DjangoJSONEncoder,
            )
        )
        values = {
            "created_at": (now or timezone.now()).astimezone(dt_timezone.utc),
            "actor": "system",
            "actor_kind": "system",
            "actor_user_id": None,
            "source_address": None,
            "cluster_id": None,
            "cluster_name": "",
            "target": "",
            "action": REANCHOR_ACTION,
            "outcome": "success",
            "details": details,
            "duration_ms": None,
            "prev_hash": head.last_hash,
        }
        digest = hash_content(
            hashed_content({**values, "created_at": values["created_at"].isoformat()}, CURRENT_SCHEME)
        )
        text = search.search_text(
            action=REANCHOR_ACTION,
            actor="system",
            cluster_name="",
            target="",
            outcome="success",
            source_address=None,
            details=details,
        )
        event = events.objects.create(**values, scheme=CURRENT_SCHEME, hash=digest, search_text=text)
        tokens.objects.bulk_create([tokens(token=t, event_id=event.pk) for t in search.tokens_for(text)])
        heads.objects.filter(id=1).update(last_hash=digest)
    return event


def restore_user_links(events, ceiling):
    """Write back the user ids that deletions nulled in legacy events, where the hash proves them.
    Returns (restored, unrestorable) as the anchor lists them."""
    found = defaultdict(list)  # (user name, id) -> event ids
    last_id_of = {}  # user name -> the id found for it last
    unrestorable, searched_in_vain = [], 0
    suspects = (
        events.objects.filter(scheme=LEGACY_SCHEME, actor_kind="user", actor_user_id__isnull=True)
        .order_by("id")
        .values("id", "hash", *[f for f in HASHED_FIELDS if f != "actor_user_id"])
    )
    after = 0
    while True:
        rows = list(suspects.filter(id__gt=after)[:CHUNK])
        for row in rows:
            content = hashed_content(
                {**row, "created_at": row["created_at"].isoformat(), "actor_user_id": None}, LEGACY_SCHEME
            )
            if hash_content(content) == row["hash"]:
                continue  # written without a user (anonymous): nothing was nulled
            user_id = None
            if searched_in_vain < MAX_UNRESTORABLE_SEARCHES:
                user_id = _id_matching(content, row["hash"], last_id_of.get(row["actor"]), ceiling)
                searched_in_vain += user_id is None
            if user_id is None:
                unrestorable.append(row["id"])
            else:
                last_id_of[row["actor"]] = user_id
                found[(row["actor"], user_id)].append(row["id"])
        if len(rows) < CHUNK:
            break
        after = rows[-1]["id"]
    restored = []
    for (actor, user_id), ids in sorted(found.items(), key=lambda item: item[1][0]):
        for start in range(0, len(ids), CHUNK):
            events._base_manager.filter(id__in=ids[start : start + CHUNK]).update(actor_user_id=user_id)
        restored.append(
            {"actor": actor, "actor_user_id": user_id, "events": len(ids), "first_event": ids[0], "last_event": ids[-1]}
        )
    return restored, {"count": len(unrestorable), "events": unrestorable[:LISTED]}


def _id_matching(content, stored_hash, likely, ceiling):
    candidates = ([likely] if likely else []) + list(range(ceiling, 0, -1))
    for user_id in candidates:
        if hash_content({**content, "actor_user_id": user_id}) == stored_hash:
            return user_id
    return None


def _user_id_ceiling(users, events, connection):
    """Above every user id ever given out, as far as the database tells: the user table's sequence (it
    counts deleted users too), the highest id in use, the highest in the log; plus a margin."""
    highest = max(
        users._base_manager.aggregate(m=Max("id"))["m"] or 0,
        events._base_manager.aggregate(m=Max("actor_user_id"))["m"] or 0,
    )
    table = users._meta.db_table
    sql = {
        "sqlite": ("SELECT seq FROM sqlite_sequence WHERE name = %s", [table]),
        "mysql": (
            "SELECT AUTO_INCREMENT FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = %s",
            [table],
        ),
    }.get(connection.vendor)
    if sql:
        try:
            with transaction.atomic(using=connection.alias), connection.cursor() as cur:
                cur.execute(*sql)
                row = cur.fetchone()
            highest = max(highest, int(row[0] or 0) if row else 0)
        except DatabaseError:  # no sequence table yet: the other figures stand
            pass
    return highest + ID_MARGIN
