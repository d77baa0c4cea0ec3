"""The one way to write the audit log: record(). Every mutation, refusal and automatic decision calls it."""

import functools
import gzip
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.ipv6 import clean_ipv6_address

from . import search
from .actor import Actor
from .models import (
    CURRENT_SCHEME,
    HASHED_FIELDS,
    LEGACY_SCHEME,
    REANCHOR_ACTION,
    SCHEMES,
    ActorKind,
    AuditArchive,
    AuditChainHead,
    AuditEvent,
    AuditSearchToken,
    Outcome,
    RefusalBurst,
    hash_content,
    hashed_content,
)

GENESIS = "0" * 64
_SECRET_KEYS = ("password", "passwd", "secret", "token")


@functools.lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    return any(s in key.lower() for s in _SECRET_KEYS)


def _scrub(value: Any) -> Any:
    """Drop anything that looks like a credential from details before it is stored."""
    if isinstance(value, dict):
        return {k: ("(hidden)" if _secret_key(str(k)) else _scrub(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    return value


def _actor_of(request: HttpRequest | None, user: Any, rule: str | None) -> Actor:
    """The Actor the older keywords name: a rule first; a user given outright acts at the page (with the request's
    address when there is one); else the request's own user and door; else the system."""
    if rule:
        return Actor.rule(rule)
    if request is None:
        return Actor(ActorKind.USER, user=user) if user is not None else Actor.system()
    actor = Actor.of_request(request)
    return Actor(ActorKind.USER, user=user, address=actor.address) if user is not None else actor


def _as_stored(address: str | None) -> str | None:
    """An address as the column stores it (an IPv6 address in its short form), so that the hash covers
    what the database hands back."""
    if address and ":" in address:
        try:
            return clean_ipv6_address(address)
        except ValidationError:
            pass
    return address


def record(
    action: str,
    *,
    outcome: str = "success",
    actor: Actor | None = None,
    request: HttpRequest | None = None,
    user: Any = None,
    rule: str | None = None,
    cluster: Any = None,
    target: Any = "",
    details: dict[str, Any] | None = None,
    duration_ms: float | None = None,
) -> AuditEvent | None:
    """Append one audit event. Who acted: `actor` (apps/audit/actor.py); the older keywords still say it the old
    way (a named automatic `rule`, `user`, the request's user) and become an Actor here.

    Runs in its own short transaction (or joins the caller's, so a mutation and its audit row commit
    together). Returns the event, or None for a repeated refusal that was counted into a summary
    instead of written (see "repeated refusals" below).
    """
    actor = actor or _actor_of(request, user, rule)
    fields = {
        "actor": actor.name,
        "actor_kind": actor.kind,
        "actor_user_id": getattr(actor.user, "pk", None),
        "source_address": actor.address,
        "cluster_id": getattr(cluster, "pk", None),
        "cluster_name": getattr(cluster, "name", ""),
        "target": target,
        "action": action,
        "outcome": outcome,
        "details": details,
        "duration_ms": duration_ms,
    }
    if outcome in FOLDED_OUTCOMES:
        return _record_refusal(fields)
    return append_event(**fields)


def append_event(*, created_at: datetime | None = None, **fields: Any) -> AuditEvent:
    """The chain's one append, under the head's row lock: record() resolves the actor and calls this.
    `created_at` defaults to now; tests and imports of older logs pass their own."""
    _ensure_head()
    with transaction.atomic():
        return _append(_locked_head(), created_at=created_at, **fields)


def _locked_head() -> AuditChainHead:
    """The chain head's row, locked until the transaction ends: every append waits for it in turn."""
    _ensure_head()
    return AuditChainHead.objects.select_for_update().get(id=1)


def _ensure_head() -> None:
    """The head of an empty chain, made by a plain INSERT in a transaction of its own, before the append's
    (outside one, it commits at once): concurrent first appends then wait on an existing row. Locking the
    missing row (SELECT ... FOR UPDATE, then INSERT), or an INSERT inside the append's transaction, left InnoDB
    gap or shared locks held by both: a deadlock, a 500 for concurrent logins on a fresh MariaDB."""
    if AuditChainHead.objects.filter(id=1).exists():
        return
    try:
        with transaction.atomic():
            AuditChainHead.objects.get_or_create(id=1, defaults={"last_hash": GENESIS})
    except IntegrityError:
        pass  # created by another append at the same moment


def _append(
    head: AuditChainHead,
    *,
    created_at: datetime | None = None,
    actor: str,
    actor_kind: str,
    actor_user_id: int | None = None,
    source_address: str | None = None,
    cluster_id: int | None = None,
    cluster_name: str | None = "",
    target: Any = "",
    action: str,
    outcome: str = "success",
    details: dict[str, Any] | None = None,
    duration_ms: float | None = None,
) -> AuditEvent:
    # Round-trip through JSON now so the hash is computed over exactly what the database will return.
    details = json.loads(json.dumps(_scrub(details or {}), cls=DjangoJSONEncoder))
    # In UTC, as the database hands it back: the hash covers its isoformat().
    created_at = created_at.astimezone(dt_timezone.utc) if created_at else timezone.now()
    event = AuditEvent(
        created_at=created_at,
        actor=actor[:150],
        actor_kind=actor_kind,
        actor_user_id=actor_user_id,
        source_address=_as_stored(source_address),
        cluster_id=cluster_id,
        cluster_name=(cluster_name or "")[:200],
        target=str(target)[:300],
        action=action[:100],
        outcome=outcome,
        details=details,
        duration_ms=duration_ms,
        prev_hash=head.last_hash,
    )
    event.hash = event.compute_hash()
    event.search_text = search_text_of(event)
    event.save()
    AuditSearchToken.objects.bulk_create(
        [AuditSearchToken(token=t, event_id=event.pk) for t in search.tokens_for(event.search_text)]
    )
    AuditChainHead.objects.filter(id=1).update(last_hash=event.hash)
    head.last_hash = event.hash
    return event


# -- repeated refusals -----------------------------------------------------------------------------
# A flood of identical refusals (same actor, action, target, cluster and outcome: a script retrying a
# confirm, a password guesser, a form posted in a loop) must not flood the log. Per such key, the
# first AUDIT_REFUSAL_BURST refusals of a window of AUDIT_REFUSAL_WINDOW_S are written one by one;
# the rest are counted in a RefusalBurst row (with a sample of who and what) and written as one
# summary event, with the same actor, action, target, cluster and outcome and the count in its details
# ("repeated"), when the window ends: by the next refusal of that key, or by the beat task
# flush_refusal_bursts() soon after. While the flood goes on, each window writes only its summary;
# a key that stays quiet for a window gets its allowance back. So a flood writes at most
# AUDIT_REFUSAL_BURST rows, then one row per window, and every refusal is in the chain, written or
# counted. The counting happens under the chain head's lock, like every append.
FOLDED_OUTCOMES = (Outcome.REFUSED, Outcome.INVALID)
SAMPLE_SIZE = 10  # distinct (source address, details) kept per summary
SAMPLE_CHARS = 1000  # details longer than this are kept as their first characters


def _burst_key(fields: dict[str, Any]) -> str:
    parts = [
        fields["actor"][:150],
        fields["action"][:100],
        str(fields["target"])[:300],
        fields["cluster_id"],
        fields["outcome"],
    ]
    return hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()


def _record_refusal(fields: dict[str, Any]) -> AuditEvent | None:
    window = timedelta(seconds=settings.AUDIT_REFUSAL_WINDOW_S)
    key = _burst_key(fields)
    _ensure_head()
    with transaction.atomic():
        head = _locked_head()
        now = timezone.now()
        burst = RefusalBurst.objects.filter(key=key).first()
        if burst is None:
            burst = RefusalBurst(
                key=key,
                window_start=now,
                last_at=now,
                actor=fields["actor"][:150],
                actor_kind=fields["actor_kind"],
                actor_user_id=fields["actor_user_id"],
                cluster_id=fields["cluster_id"],
                cluster_name=(fields["cluster_name"] or "")[:200],
                target=str(fields["target"])[:300],
                action=fields["action"][:100],
                outcome=fields["outcome"],
            )
        else:
            quiet = now - burst.last_at >= window
            if now - burst.window_start >= window:
                _close_window(head, burst, now)
            if quiet:
                burst.written = 0
        burst.last_at = now
        if burst.written < settings.AUDIT_REFUSAL_BURST:
            burst.written += 1
            event = _append(head, **fields)
        else:
            burst.folded += 1
            burst.first_folded_at = burst.first_folded_at or now
            _add_to_sample(burst, fields)
            event = None
        burst.save()
    return event


def _add_to_sample(burst: RefusalBurst, fields: dict[str, Any]) -> None:
    details = json.loads(json.dumps(_scrub(fields["details"] or {}), cls=DjangoJSONEncoder))
    if len(json.dumps(details)) > SAMPLE_CHARS:
        details = json.dumps(details)[:SAMPLE_CHARS] + "…"
    entry = {"source_address": _as_stored(fields["source_address"]), "details": details}
    if entry in burst.sample:
        return
    if len(burst.sample) < SAMPLE_SIZE:
        burst.sample = burst.sample + [entry]
    else:
        burst.sample_complete = False


def _close_window(head: AuditChainHead, burst: RefusalBurst, now: datetime) -> None:
    """End the burst's window: the summary of what it counted (then no new allowance: the flood goes
    on), or a new allowance when it counted nothing."""
    if burst.folded:
        _append(
            head,
            actor=burst.actor,
            actor_kind=burst.actor_kind,
            actor_user_id=burst.actor_user_id,
            cluster_id=burst.cluster_id,
            cluster_name=burst.cluster_name,
            target=burst.target,
            action=burst.action,
            outcome=burst.outcome,
            details={
                "repeated": burst.folded,
                "first_at": burst.first_folded_at,
                "last_at": burst.last_at,
                "note": f"identical to the {burst.written} written before them within "
                f"{settings.AUDIT_REFUSAL_WINDOW_S:g} s, so counted here instead of written one by one",
                "sample": burst.sample,
                "sample_complete": burst.sample_complete,
            },
        )
    else:
        burst.written = 0
    burst.folded, burst.first_folded_at, burst.sample, burst.sample_complete = 0, None, [], True
    burst.window_start = now


def flush_refusal_bursts(now: datetime | None = None) -> int:
    """Beat: write the summary of every window that has ended with refusals counted, and forget the
    keys that stayed quiet for a window. Returns the number of summaries written."""
    now = now or timezone.now()
    window = timedelta(seconds=settings.AUDIT_REFUSAL_WINDOW_S)
    with transaction.atomic():
        head = _locked_head()
        ended = list(RefusalBurst.objects.filter(folded__gt=0, window_start__lte=now - window).order_by("id"))
        for burst in ended:
            _close_window(head, burst, now)
            burst.save()
        RefusalBurst.objects.filter(folded=0, last_at__lte=now - window).delete()
    return len(ended)


def count_with_repeats(events: QuerySet[AuditEvent]) -> int:
    """How many refusals `events` stands for: a summary of repeated refusals counts as its repeats."""
    summaries = [
        d.get("repeated") for d in events.filter(details__has_key="repeated").values_list("details", flat=True)
    ]
    return events.count() - len(summaries) + sum(int(n or 0) for n in summaries)


def search_text_of(event: AuditEvent) -> str:
    return search.search_text(
        action=event.action,
        actor=event.actor,
        cluster_name=event.cluster_name,
        target=event.target,
        outcome=event.outcome,
        source_address=event.source_address,
        details=event.details,
    )


@contextmanager
def timed() -> Iterator[Any]:
    """`with timed() as t: ...; t.ms` -- the duration to pass to record()."""

    class Timer:
        ms: float | None = None

    timer = Timer()
    start = time.monotonic()
    try:
        yield timer
    finally:
        timer.ms = round((time.monotonic() - start) * 1000, 3)


VERIFY_CHUNK = 5000


class Progress:
    """Where a verification stands: `checked` events verified after `after_id`, the chain's hash and
    hashing scheme at `last_id` (scheme None: not known, at the start or after an archive); `broken` (an
    AuditEvent) and `reason` once a bad link is found; `done` at the end."""

    def __init__(self, after_id: int, prev_hash: str, checked: int = 0, scheme: int | None = None) -> None:
        self.last_id, self.last_hash, self.checked, self.last_scheme = after_id, prev_hash, checked, scheme
        self.broken: AuditEvent | None = None
        self.reason, self.done = "", False

    def why_broken(self, stored_hash: str, content: dict[str, Any]) -> str:
        """Why the next event does not continue the chain, or "" when it does: its link to the event
        before it, its hash under its own scheme, and the schemes' order (legacy, then the re-anchor
        event, then the current scheme only)."""
        scheme = content.get("scheme", LEGACY_SCHEME)
        if content["prev_hash"] != self.last_hash:
            return "its prev_hash does not match the event before it (an event was removed or reordered)"
        if scheme not in SCHEMES:
            return f"its hashing scheme {scheme!r} is unknown"
        if hash_content(content) != stored_hash:
            return "its content does not match its hash (the event was edited)"
        if self.last_scheme == CURRENT_SCHEME and scheme == LEGACY_SCHEME:
            return "it is in the legacy hashing scheme, after the re-anchor"
        if self.last_scheme == LEGACY_SCHEME and scheme != LEGACY_SCHEME and not is_reanchor(content):
            return "the hashing scheme changes here without a re-anchor event"
        return ""

    def advance(self, pk: int, stored_hash: str, content: dict[str, Any]) -> None:
        self.last_id, self.last_hash = pk, stored_hash
        self.last_scheme = content.get("scheme", LEGACY_SCHEME)
        self.checked += 1


def is_reanchor(content: dict[str, Any]) -> bool:
    """The event that ends the legacy scheme: written by the system, naming the head it continues."""
    details = content["details"] if isinstance(content["details"], dict) else {}
    return (
        content["action"] == REANCHOR_ACTION
        and content["actor_kind"] == ActorKind.SYSTEM
        and details.get("old_head") == content["prev_hash"]
    )


def chain_start() -> tuple[int, str]:
    """(after_id, prev_hash) where the chain in the table begins: after the newest archive's head,
    or at the genesis hash."""
    archive = AuditArchive.objects.order_by("-last_id").first()
    return (archive.last_id, archive.head_hash) if archive else (0, GENESIS)


_SQLITE_DATETIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d{6})?")


def _isoformat(value: str | datetime) -> str:
    """created_at as content() renders it, from the raw column value: SQLite gives Django's stored
    text (UTC, "YYYY-MM-DD HH:MM:SS[.ffffff]"), MariaDB a naive UTC datetime."""
    if isinstance(value, str):
        if _SQLITE_DATETIME.fullmatch(value):
            return value.replace(" ", "T", 1) + "+00:00"
        parsed = parse_datetime(value)
        if parsed is None:  # the column holds what Django wrote: no other text is expected
            raise ValueError(f"created_at {value!r} is not a date and time")
        value = parsed
    if value.tzinfo is None:
        value = value.replace(tzinfo=dt_timezone.utc)
    return value.isoformat()


def _rows(
    after_id: int, upto_id: int | None = None, chunk: int = VERIFY_CHUNK
) -> Iterator[tuple[int, str, dict[str, Any]]]:
    """(id, hash, content) oldest first, read in keyset chunks: bounded memory on any database
    (mysqlclient buffers a whole result set, so one query over a million rows is not an option).
    Raw SQL with two conversions of our own (created_at, details): the ORM's per-row converters
    would double the time of a verification. The content is what the row's scheme hashes."""
    meta = AuditEvent._meta
    qn = connection.ops.quote_name
    column_of = {f.name: f.column for f in meta.concrete_fields}
    columns = ", ".join(qn(column_of[f]) for f in ("id", "hash", "scheme") + HASHED_FIELDS)
    upto = " AND id <= %s" if upto_id is not None else ""
    sql = f"SELECT {columns} FROM {qn(meta.db_table)} WHERE id > %s{upto} ORDER BY id LIMIT {int(chunk)}"
    while True:
        with connection.cursor() as cur:
            cur.execute(sql, [after_id] + ([upto_id] if upto_id is not None else []))
            rows = cur.fetchall()
        for row in rows:
            values = dict(zip(HASHED_FIELDS, row[3:]))
            values["created_at"] = _isoformat(values["created_at"])
            if isinstance(values["details"], (str, bytes)):
                values["details"] = json.loads(values["details"])
            yield row[0], row[1], hashed_content(values, row[2])
        if len(rows) < chunk:
            return
        after_id = rows[-1][0]


def verify_some(
    progress: Progress,
    *,
    deadline: float | None = None,
    upto_id: int | None = None,
    on_row: Callable[[int, str, dict[str, Any]], None] | None = None,
) -> Progress:
    """Advance `progress` over the events after progress.last_id (up to upto_id), stopping at the
    first broken link, at the end, or once time.monotonic() passes `deadline` (then done is False:
    call again to go on). `on_row(id, hash, content)` sees each verified event (retention writes it)."""
    n = 0
    for pk, stored_hash, content in _rows(progress.last_id, upto_id):
        reason = progress.why_broken(stored_hash, content)
        if reason:
            progress.broken, progress.reason, progress.done = AuditEvent.objects.get(pk=pk), reason, True
            return progress
        if on_row is not None:
            on_row(pk, stored_hash, content)
        progress.advance(pk, stored_hash, content)
        n += 1
        if deadline is not None and n % 1000 == 0 and time.monotonic() > deadline:
            return progress
    progress.done = True
    return progress


def verify_chain() -> tuple[int, AuditEvent | None, str]:
    """Walk the log oldest first, from the archived head if retention ran.
    Returns (checked_count, first_broken_event_or_None, reason)."""
    progress = verify_some(Progress(*chain_start()))
    return progress.checked, progress.broken, progress.reason


# -- retention -------------------------------------------------------------------------------------


class ArchiveRefused(Exception):
    pass


def _archive_dir() -> Path:
    path = Path(settings.AUDIT_ARCHIVE_DIR)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_old_events(
    days: int | None = None, *, now: datetime | None = None, user: Any = None, delete_chunk: int = 20000
) -> AuditArchive | None:
    """Retention, the only path that removes audit events. The events created more than `days`
    (AUDIT_RETENTION_DAYS) ago are verified, written to a gzip JSONL file under AUDIT_ARCHIVE_DIR
    (one event per line, then a line {"archive": {...}} with the chain head at the cut), recorded in
    AuditArchive and audited; only then are they deleted, in chunks, by raw SQL that deliberately
    goes around the append-only QuerySet. Returns the AuditArchive, or None when nothing is due.
    A broken chain in the range is never archived: ArchiveRefused, and the refusal is audited."""
    _finish_removals()
    days = settings.AUDIT_RETENTION_DAYS if days is None else days
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    after_id, prev_hash = chain_start()
    cut = (
        AuditEvent.objects.filter(created_at__lt=cutoff, id__gt=after_id)
        .order_by("-created_at", "-id")
        .values_list("id", flat=True)
        .first()
    )
    if cut is None:
        return None
    final = _archive_dir() / f"audit-{after_id + 1:012d}-{cut:012d}.jsonl.gz"
    tmp = final.with_suffix(".tmp")
    progress = Progress(after_id, prev_hash)
    first: dict[str, int] = {}
    with open(tmp, "xb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as gz:

        def write(pk: int, stored_hash: str, content: dict[str, Any]) -> None:
            first.setdefault("id", pk)
            line = {"id": pk, **content, "hash": stored_hash}
            gz.write(json.dumps(line, sort_keys=True, cls=DjangoJSONEncoder, separators=(",", ":")).encode() + b"\n")

        verify_some(progress, upto_id=cut, on_row=write)
        head: dict[str, Any] = {
            "first_id": first.get("id"),
            "last_id": progress.last_id,
            "count": progress.checked,
            "first_prev_hash": prev_hash,
            "head_hash": progress.last_hash,
            "cutoff": cutoff.isoformat(),
            "created_at": now.isoformat(),
        }
        gz.write(json.dumps({"archive": head}, sort_keys=True).encode() + b"\n")
        gz.flush()
        raw.flush()
        os.fsync(raw.fileno())
    if progress.broken is not None or not progress.checked:
        tmp.unlink()
        if progress.broken is not None:
            record(
                "archive audit events",
                user=user,
                outcome="refused",
                details={
                    "reason": f"chain broken at event {progress.broken.pk}: {progress.reason}",
                    "cutoff": cutoff,
                    "retention_days": days,
                },
            )
            raise ArchiveRefused(
                f"the chain is broken at event {progress.broken.pk} ({progress.reason}); nothing was archived"
            )
        return None
    if final.exists():  # a concurrent run got here first with the same range
        tmp.unlink()
        raise ArchiveRefused(f"{final} exists already")
    os.replace(tmp, final)
    sha = _sha256_of(final)
    with transaction.atomic():
        _locked_head()
        if AuditArchive.objects.filter(last_id__gte=head["first_id"]).exists():
            raise ArchiveRefused("another retention run archived these events first")
        archive = AuditArchive.objects.create(
            created_at=now,
            cutoff=cutoff,
            path=str(final),
            sha256=sha,
            first_id=head["first_id"],
            last_id=head["last_id"],
            count=head["count"],
            first_prev_hash=prev_hash,
            head_hash=head["head_hash"],
        )
        record(
            "archive audit events",
            user=user,
            details={
                "archive": archive.pk,
                "path": str(final),
                "sha256": sha,
                "first_id": archive.first_id,
                "last_id": archive.last_id,
                "count": archive.count,
                "head_hash": archive.head_hash,
                "cutoff": cutoff,
                "retention_days": days,
            },
        )
    _finish_removals(delete_chunk)
    archive.refresh_from_db()
    return archive


def _finish_removals(chunk: int = 20000) -> None:
    """Delete the events (and their search tokens) that an archive holds but the table still has:
    right after archiving, or after a run that died half-way. Raw SQL on purpose: the append-only
    QuerySet refuses deletes, and this is the one path allowed to do them."""
    events, tokens = AuditEvent._meta.db_table, AuditSearchToken._meta.db_table
    for archive in AuditArchive.objects.filter(removed=False).order_by("last_id"):
        low = archive.first_id - 1
        while low < archive.last_id:
            high = min(low + chunk, archive.last_id)
            with transaction.atomic(), connection.cursor() as cur:
                cur.execute(f"DELETE FROM {tokens} WHERE event_id > %s AND event_id <= %s", [low, high])
                cur.execute(f"DELETE FROM {events} WHERE id > %s AND id <= %s", [low, high])
            low = high
        AuditArchive.objects.filter(pk=archive.pk).update(removed=True)


def read_archive(path: Path | str) -> Iterator[dict[str, Any]]:
    """Yield the event dicts of an archive file, then its head dict as {"archive": {...}}."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def verify_archive(archive: AuditArchive) -> tuple[bool, str]:
    """Check an archive file against its AuditArchive row: the file's sha256, every event's hash and
    link from first_prev_hash, the count and the head. Returns (ok, message)."""
    path = Path(archive.path)
    if not path.exists():
        return False, f"{path} is missing"
    if _sha256_of(path) != archive.sha256:
        return False, f"{path} changed since it was written (sha256 differs)"
    progress, head = Progress(archive.first_id - 1, archive.first_prev_hash), None
    for item in read_archive(path):
        if "archive" in item:
            head = item["archive"]
            break
        stored = item.pop("hash")
        pk = item.pop("id")
        if progress.why_broken(stored, item):
            return False, f"event {pk} in {path.name} does not verify"
        progress.advance(pk, stored, item)
    if head is None or progress.last_hash != archive.head_hash or progress.checked != archive.count:
        return False, f"{path.name} does not end at the recorded head ({progress.checked} events read)"
    return True, f"{progress.checked} events verified, head {progress.last_hash[:16]}…"
