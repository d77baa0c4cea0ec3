"""Reads of the audit log: the review page's filtered set, its keyset pages, and exports.

Order is newest first by (created_at, id); every filter has an index ending in created_at (see the
model), so a page is one index walk that stops after PAGE_SIZE + 1 rows. Pages are keyset pages
("older" = before the last event shown, "newer" = after the first): no OFFSET and no COUNT(*), whose
cost grows with the table.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth import get_user_model
from django.db.models import QuerySet

from . import search
from .forms import FilterForm
from .models import AuditEvent
from .redaction import shown_details
from .services import _scrub

PAGE_SIZE = 50
EXPORT_CHUNK = 2000
EXPORT_FIELDS = (
    "id",
    "created_at",
    "actor",
    "actor_kind",
    "source_address",
    "cluster_id",
    "cluster_name",
    "target",
    "action",
    "outcome",
    "duration_ms",
    "details",
    "prev_hash",
    "hash",
)


def filtered(form: FilterForm, now: datetime | None = None) -> QuerySet[AuditEvent]:
    """The events matching the form's valid filters (unordered)."""
    data = form.cleaned_data if form.is_bound and hasattr(form, "cleaned_data") else {}
    events: QuerySet[AuditEvent] = AuditEvent.objects.all()
    start, end = form.window(now)
    if start:
        events = events.filter(created_at__gte=start)
    if end:
        events = events.filter(created_at__lt=end)
    if data.get("actor"):
        events = events.filter(actor=data["actor"])
    if data.get("cluster"):
        events = events.filter(cluster_id=data["cluster"].pk)
    if data.get("outcome"):
        events = events.filter(outcome=data["outcome"])
    if data.get("action"):
        events = events.filter(action=data["action"])
    if data.get("target"):
        events = search.filter_by_target(events, data["target"])
    if data.get("q"):
        events = search.filter_by_terms(events, data["q"])
    return events


@dataclass
class Page:
    events: list[AuditEvent] = field(default_factory=list)
    older: int | None = None  # pass as ?before= for the next older page
    newer: int | None = None  # pass as ?after= for the next newer page


def _boundary(pk: int) -> tuple[datetime, int] | None:
    return AuditEvent.objects.filter(pk=pk).values_list("created_at", "id").first()


def _rows(events: QuerySet[AuditEvent], order: Sequence[str], size: int) -> list[AuditEvent]:
    """The page's events in two steps: the ids in order (a narrow sort: MariaDB would otherwise put the
    wide rows, details and search_text, into an on-disk temporary table to sort them), then the rows."""
    ids = list(events.order_by(*order).values_list("id", flat=True)[:size])
    found = AuditEvent.objects.defer("search_text").in_bulk(ids)
    return [shown(found[pk]) for pk in ids if pk in found]


def shown(event: AuditEvent) -> AuditEvent:
    """The event with its details as anyone may read them (redaction.py); nothing is saved."""
    event.details = shown_details(event.action, event.details)
    return event


def page(
    events: QuerySet[AuditEvent], *, before: int | None = None, after: int | None = None, size: int = PAGE_SIZE
) -> Page:
    """One keyset page of `events`, newest first."""
    if after is not None and (mark := _boundary(after)):
        created, pk = mark
        rows = _rows(
            events.filter(created_at__gte=created).exclude(created_at=created, id__lte=pk),
            ("created_at", "id"),
            size + 1,
        )
        more_newer = len(rows) > size
        rows = rows[:size][::-1]
        return Page(rows, older=rows[-1].pk if rows else None, newer=rows[0].pk if rows and more_newer else None)
    if before is not None and (mark := _boundary(before)):
        created, pk = mark
        events = events.filter(created_at__lte=created).exclude(created_at=created, id__gte=pk)
        first_page = False
    else:
        first_page = True
    rows = _rows(events, ("-created_at", "-id"), size + 1)
    more_older = len(rows) > size
    rows = rows[:size]
    return Page(
        rows, older=rows[-1].pk if rows and more_older else None, newer=rows[0].pk if rows and not first_page else None
    )


def suggestions(limit: int = 2000) -> dict[str, list[str]]:
    """Values for the filters' datalists: user names and the actors, actions and targets of the
    newest `limit` events (one primary-key range read; the log's full distinct sets would cost a scan)."""
    recent = list(AuditEvent.objects.order_by("-id").values_list("actor", "action", "target")[:limit])
    users = get_user_model().objects.order_by("username").values_list("username", flat=True)[:500]
    return {
        "actors": sorted(set(users) | {r[0] for r in recent}),
        "actions": sorted({r[1] for r in recent}),
        "targets": sorted({r[2] for r in recent if r[2]})[:300],
    }


def export_rows(events: QuerySet[AuditEvent]) -> Iterator[dict[str, Any]]:
    """Dicts of EXPORT_FIELDS, newest first, read in keyset chunks: constant memory on any database
    (mysqlclient would buffer one big result set whole). Details are scrubbed once more on the way out."""
    events = events.order_by("-created_at", "-id")
    mark: tuple[datetime, int] | None = None
    while True:
        chunk = events
        if mark is not None:
            chunk = chunk.filter(created_at__lte=mark[0]).exclude(created_at=mark[0], id__gte=mark[1])
        rows = list(chunk.values_list(*EXPORT_FIELDS)[:EXPORT_CHUNK])
        for row in rows:
            item = dict(zip(EXPORT_FIELDS, row))
            item["details"] = _scrub(shown_details(item["action"], item["details"]))
            yield item
        if len(rows) < EXPORT_CHUNK:
            return
        mark = (rows[-1][1], rows[-1][0])
