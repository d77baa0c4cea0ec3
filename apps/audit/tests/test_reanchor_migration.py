"""Migration 0003 on a log written before it: a user deleted under the old link had broken the chain; after
the migration the chain verifies, every legacy hash unchanged, and the re-anchor says what it did."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from apps.audit.models import LEGACY_SCHEME, REANCHOR_ACTION, AuditEvent, hash_content, hashed_content
from apps.audit.services import GENESIS, verify_chain

BEFORE = [("audit", "0002_search_index_and_archives")]
REANCHOR = [("audit", "0003_reanchor_actor_as_written")]  # the lead may renumber it at merge time


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets + executor.loader.graph.leaf_nodes("auth")).apps


@pytest.mark.django_db(transaction=True)
def test_the_migration_reanchors_a_log_that_a_user_deletion_had_broken():
    old = migrate(BEFORE)
    try:
        users, events = old.get_model("auth", "User"), old.get_model("audit", "AuditEvent")
        bob = users.objects.create(username="bob", password="!")
        bob_id, prev, written = bob.pk, GENESIS, []
        start = timezone.now() - timedelta(minutes=5)
        for i, user in enumerate([bob, None, bob]):
            values = {
                "created_at": start + timedelta(seconds=i),
                "actor": user.username if user else "system",
                "actor_kind": "user" if user else "system",
                "actor_user_id": user.pk if user else None,
                "source_address": "10.0.0.7" if user else None,
                "cluster_id": None,
                "cluster_name": "",
                "target": "",
                "action": f"legacy {i}",
                "outcome": "success",
                "details": {"i": i},
                "duration_ms": None,
                "prev_hash": prev,
            }
            prev = hash_content(
                hashed_content({**values, "created_at": values["created_at"].isoformat()}, LEGACY_SCHEME)
            )
            written.append(
                events.objects.create(
                    **{k: v for k, v in values.items() if k != "actor_user_id"}, actor_user=user, hash=prev
                ).pk
            )
        old.get_model("audit", "AuditChainHead").objects.create(id=1, last_hash=prev)
        bob.delete()  # the old link: Django nulls it, and the chain breaks at bob's first event
        assert events.objects.filter(actor_user__isnull=True).count() == 3
    finally:
        migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())

    checked, broken, reason = verify_chain()
    assert (checked, broken, reason) == (4, None, "")
    assert list(AuditEvent.objects.filter(pk__in=written).values_list("scheme", "actor_user_id")) == [
        (LEGACY_SCHEME, bob_id),
        (LEGACY_SCHEME, None),
        (LEGACY_SCHEME, bob_id),
    ]
    anchor = AuditEvent.objects.get(action=REANCHOR_ACTION)
    assert anchor.prev_hash == anchor.details["old_head"] == prev
    assert anchor.details["restored_user_links"] == [
        {"actor": "bob", "actor_user_id": bob_id, "events": 2, "first_event": written[0], "last_event": written[2]}
    ]
