"""Automatic moves, after each poll of a channel with auto_failover_enabled:

- the replica end failed `failover_after_polls` polls in a row (unreachable, or not Synced in a Primary
  component): the channel moves to the best replica candidate that is Synced now (and, if the source failed
  too, to the best source candidate at the same time);
- else the source end failed as many polls (unreachable, not Synced/Primary, or the replica's IO thread
  failing to read from it): the replica is re-pointed at the best source candidate.

Like the writer failover, a move is a plan (guards read now, statements per node, lock, audit) confirmed by
the rule and run here and now. No failback unless the channel's policy asks for it: then, once the channel
runs and its preferred source has stayed Synced in a Primary component for failback_after_s, a planned
source move brings it back (the preferred source is the one the first automatic failover left, if unset).
"""

import logging
import time

from django.db import transaction

from apps.audit.services import record
from apps.monitoring import live
from apps.operations import rules

from .choices import ChannelState
from .models import REPLICA, SOURCE, ReplicationChannel
from .moves import best_candidate, plan_move, probe_synced

log = logging.getLogger(__name__)
RULE = "DR channel failover"


def _once(channel, decision):
    """True the first time a refusal is seen for these ends (refusals are audited once, not every poll)."""
    key = f"dr-refusal:{channel.pk}"
    value = f"{channel.source_server_id}:{channel.replica_server_id}:{decision}"
    r = live.client()
    if r.get(key) == value.encode():
        return False
    r.set(key, value, ex=3600)
    return True


def after_poll(channel, doc):
    failing = doc.get("failing_polls") or {}
    n = channel.failover_after_polls
    replica_down = failing.get("replica", 0) >= n
    source_down = failing.get("source", 0) >= n
    if not (replica_down or source_down):
        return failback(channel, doc)
    if source_down and not replica_down and (doc.get("replica") or {}).get("native_failover"):
        # A MySQL 8.0.22+ replica fails its source over by itself, from the source list its moves configured.
        if _once(channel, "native"):
            record(
                "channel_move refused",
                rule=RULE,
                cluster=channel.replica_cluster,
                target=channel.name,
                outcome="refused",
                details={
                    "reason": "left to the replica's own asynchronous connection failover "
                    "(MySQL 8.0.22+, SOURCE_CONNECTION_AUTO_FAILOVER)",
                    "failing_polls": failing,
                },
            )
        return None
    new_replica = best_candidate(channel, REPLICA, exclude=channel.replica_server) if replica_down else None
    new_source = best_candidate(channel, SOURCE, exclude=channel.source_server) if source_down else None
    if (replica_down and new_replica is None) or (source_down and not replica_down and new_source is None):
        side = "replica" if replica_down else "source"
        if _once(channel, f"no-{side}"):
            record(
                "channel_move refused",
                rule=RULE,
                cluster=channel.replica_cluster,
                target=channel.name,
                outcome="refused",
                details={
                    "reason": f"no {side} candidate answers Synced in a Primary component",
                    "failing_polls": failing,
                },
            )
        return None
    evidence = {
        "failing_polls": failing,
        "state": doc.get("state"),
        "source_error": (doc.get("source") or {}).get("error"),
        "replica_error": (doc.get("replica") or {}).get("error"),
        "io_error": (doc.get("replica") or {}).get("last_io_error"),
    }
    reason = "replica failover" if replica_down else "source failover"
    plan = plan_move(channel, new_source=new_source, new_replica=new_replica, reason=reason, evidence=evidence)
    # As the writer failover: failed guards audited once, else saved, confirmed by the rule and run here and now.
    op = rules._execute(channel.replica_cluster, plan, RULE)
    if op and new_source is not None and channel.preferred_source_id is None:  # where failback returns to
        ReplicationChannel.objects.filter(pk=channel.pk).update(preferred_source=channel.source_server)
    return op


def follow_native(channel, doc):
    """A MySQL 8.0.22+ replica that moved to another source of its list by itself: the inventory follows (audited),
    so the channel is not shown misdirected. Returns the new source, or None."""
    replica = doc.get("replica") or {}
    if doc.get("state") != "misdirected" or not replica.get("native_failover"):
        return None
    new = next(
        (
            s
            for s, _ in channel.candidates_for(SOURCE)
            if (s.hostname, s.port) == (replica.get("source_host"), replica.get("source_port"))
        ),
        None,
    )
    if new is None:
        return None
    with transaction.atomic():
        ReplicationChannel.objects.filter(pk=channel.pk).update(source_server=new)
        record(
            "channel source followed",
            rule=RULE,
            cluster=channel.replica_cluster,
            target=channel.name,
            details={
                "old_source": str(channel.source_server),
                "new_source": str(new),
                "why": "the replica's own asynchronous connection failover (MySQL 8.0.22+) moved it",
            },
        )
    return new


FAILBACK_RULE = "DR channel failback"


def failback(channel, doc, now=None):
    """Back to the preferred source, once the channel runs and the preferred source has been Synced and
    Primary for failback_after_s (timed across polls in Redis)."""
    preferred = channel.preferred_source
    if not (channel.failback_enabled and preferred) or preferred.pk == channel.source_server_id:
        return None
    healthy = doc.get("state") == ChannelState.RUNNING and probe_synced(preferred)
    synced_for = rules._since(live.client(), f"dr-failback:{channel.pk}:since", healthy, now or time.time())
    if not healthy or synced_for < channel.failback_after_s:
        return None
    plan = plan_move(
        channel,
        new_source=preferred,
        reason="failback",
        evidence={"synced_for_s": round(synced_for, 1), "required_s": channel.failback_after_s},
    )
    return rules._execute(channel.replica_cluster, plan, FAILBACK_RULE)
