"""The incident view: for one cluster and one time window, what people and rules did (audit events),
what ran (operations and their steps, with timings) and what the cluster did meanwhile (backend wsrep
state and receive queue, ProxySQL reachability), on one time axis.

build() returns a server-rendered SVG timeline as data (lanes of rectangles, ticks, lines; the
template draws them, no JavaScript, so the page holds under the CSP and prints) and the same story as
one chronological list. Monitoring history is read at the resolution the window calls for (raw polls
up to 6 h, 1-minute rollups up to 7 days, 1-hour rollups beyond), the not-yet-rolled-up tail from the
finer resolution, and folded into COLUMNS columns: a column shows the worst the lane saw in it.

A composite page's context (it reads audit, fleet, monitoring and operations), so it lives in apps/pages; the
page's URL stays /audit/incident/ (pages:incident), linked from the audit log, an event and an alert.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from urllib.parse import urlencode

from django import forms
from django.urls import reverse
from django.utils import timezone

from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.monitoring import status
from apps.monitoring.chunks import samples as chunked_samples
from apps.monitoring.formatting import milliseconds
from apps.monitoring.models import HOUR, MINUTE, RAW, BackendSample, ProxySQLSample
from apps.operations.choices import OperationState, StepState
from apps.operations.models import Operation

from apps.audit.forms import UTCDateTimeField
from apps.audit.models import AuditEvent, Outcome

COLUMNS = 600
MAX_EVENTS = 1000
MAX_LIST = 1500
MAX_WINDOW = timedelta(days=31)
DEFAULT_WINDOW = timedelta(hours=1)
FINER = {HOUR: MINUTE, MINUTE: RAW}
# geometry of the SVG (user units; the SVG scales to the page's width)
WIDTH, LABEL_W, RIGHT_PAD, TOP = 1200, 190, 12, 26
PLOT_W = WIDTH - LABEL_W - RIGHT_PAD
LANE_H, BAND_H, QUEUE_H, SECTION_GAP = 22, 12, 26, 16
TICK_STEPS = [60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800]
WSREP = {1: "Joining", 2: "Donor/Desynced", 3: "Joined", 4: "Synced"}
STATE_CLASS = {
    "Synced": "ok",
    "reachable": "ok",
    "Donor/Desynced": "warn",
    "Joining": "info",
    "Joined": "info",
    "unreachable": "bad",
}
FMT = "%Y-%m-%dT%H:%M:%S"


def default_window(now=None):
    end = ((now or timezone.now()) + timedelta(seconds=1)).replace(microsecond=0)  # this second included
    return end - DEFAULT_WINDOW, end


class IncidentForm(forms.Form):
    cluster = forms.ModelChoiceField(
        required=False, queryset=Cluster.objects.order_by("name"), empty_label="choose a cluster"
    )
    start = UTCDateTimeField(label="From (UTC)")
    end = UTCDateTimeField(label="To (UTC)")
    event = forms.IntegerField(required=False, widget=forms.HiddenInput)

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end:
            if start >= end:
                self.add_error("end", "must be after from")
            elif end - start > MAX_WINDOW:
                self.add_error("end", f"the window is at most {MAX_WINDOW.days} days")
        return data

    def showing_window(self):
        """This form with From/To filled with the window it shows (the default one when none was typed)."""
        if self.is_bound and not self.is_valid():
            return self
        start, end = self.window() if self.is_bound else default_window()
        data = self.data.copy() if self.is_bound else {}
        data["start"], data["end"] = start.strftime("%Y-%m-%d %H:%M:%S"), end.strftime("%Y-%m-%d %H:%M:%S")
        filled = IncidentForm(data)
        filled.is_valid()
        return filled

    def window(self, now=None):
        data = self.cleaned_data
        start, end = data.get("start"), data.get("end")
        if start and not end:
            end = start + DEFAULT_WINDOW
        elif end and not start:
            start = end - DEFAULT_WINDOW
        elif not start:
            start, end = default_window(now)
        return start, end

    def shift_links(self):
        """Query strings for earlier / later / zoom out / zoom in, keeping the cluster."""
        start, end = self.window()
        span = end - start
        cluster = self.cleaned_data["cluster"].pk

        def link(s, e):
            return "?" + urlencode({"cluster": cluster, "start": s.strftime(FMT), "end": e.strftime(FMT)})

        centre = start + span / 2
        out = {
            "earlier": link(start - span / 2, end - span / 2),
            "later": link(start + span / 2, end + span / 2),
            "zoom_in": link(centre - span / 4, centre + span / 4),
        }
        if span * 2 <= MAX_WINDOW:
            out["zoom_out"] = link(centre - span, centre + span)
        return out


@dataclass
class Lane:
    label: str
    y: int
    height: int = LANE_H
    href: str = ""
    rects: list = field(default_factory=list)  # dicts: x, w, cls, title, href
    marks: list = field(default_factory=list)  # dicts: x, cls, title, href (audit events)
    polylines: list = field(default_factory=list)  # "x,y x,y ..." strings
    threshold_y: float | None = None
    note: str = ""


@dataclass
class Section:
    title: str
    y: int
    lanes: list = field(default_factory=list)
    empty: str = ""


class Axis:
    def __init__(self, start, end):
        self.start, self.end = start.timestamp(), end.timestamp()
        self.span = self.end - self.start

    def x(self, ts):
        ts = min(max(ts, self.start), self.end)
        return round(LABEL_W + (ts - self.start) / self.span * PLOT_W, 1)

    def col(self, ts):
        return int((ts - self.start) / self.span * COLUMNS)

    def col_x(self, col):
        return round(LABEL_W + col / COLUMNS * PLOT_W, 1)

    def ticks(self):
        step = next((s for s in TICK_STEPS if self.span / s <= 10), TICK_STEPS[-1])
        first = (int(self.start) // step + 1) * step
        fmt = "%H:%M" if self.span <= 2 * 86400 else "%m-%d %H:%M"
        out = []
        t = first
        while t < self.end:
            out.append({"x": self.x(t), "label": datetime.fromtimestamp(t, dt_timezone.utc).strftime(fmt)})
            t += step
        return out


def _hms(ts):
    return datetime.fromtimestamp(ts, dt_timezone.utc).strftime("%H:%M:%S")


def resolution_for(span_s):
    if span_s <= 6 * 3600:
        return RAW
    if span_s <= 7 * 86400:
        return MINUTE
    return HOUR


def _samples(model, owner, owner_ids, fields, start, end, resolution):
    """Rows (owner_id, epoch, width_s, reachable, *fields) in time order; the tail the rollups have not
    reached yet comes from the finer resolution."""
    where = {f"{owner}__in": owner_ids, "resolution": resolution, "ts__gte": start, "ts__lt": end}
    rows = [
        (r[0], r[1].timestamp(), resolution, *r[3:])  # rows and history chunks alike (monitoring/chunks.py)
        for r in chunked_samples(where, ["reachable", *fields], model)
    ]
    if resolution in FINER:
        tail = datetime.fromtimestamp(rows[-1][1] + resolution, dt_timezone.utc) if rows else start
        rows += _samples(model, owner, owner_ids, fields, max(tail, start), end, FINER[resolution])
    return rows


def _label_of(reachable, local_state):
    if not reachable:
        return "unreachable"
    return WSREP.get(local_state, "reachable")


_SEVERITY = {"unreachable": 4, "Donor/Desynced": 3, "Joining": 2, "Joined": 2, "Synced": 1, "reachable": 1}


def _fold(axis, rows, poll_s):
    """{owner: {column: {"state": worst label, "queue": max recv queue}}} from sample rows."""
    cols = defaultdict(dict)
    for owner, ts, width, reachable, *values in rows:
        label = _label_of(reachable, values[0] if values else None)
        queue = values[1] if len(values) > 1 else None
        first = max(axis.col(ts), 0)
        last = min(axis.col(ts + (width or poll_s)) - 1, COLUMNS - 1)
        for c in range(first, max(first, last) + 1):
            if c >= COLUMNS:
                break
            cell = cols[owner].setdefault(c, {"state": label, "queue": None})
            if _SEVERITY[label] > _SEVERITY[cell["state"]]:
                cell["state"] = label
            if queue is not None and (cell["queue"] is None or queue > cell["queue"]):
                cell["queue"] = queue
    return cols


def _runs(axis, cells, name):
    """Merge consecutive columns of one state into rectangles."""
    rects, run = [], None
    for c in sorted(cells):
        state = cells[c]["state"]
        if run and run["state"] == state and run["last"] == c - 1:
            run["last"] = c
            run["queue"] = max([q for q in (run["queue"], cells[c]["queue"]) if q is not None], default=None)
            continue
        if run:
            rects.append(run)
        run = {"state": state, "first": c, "last": c, "queue": cells[c]["queue"]}
    if run:
        rects.append(run)
    out = []
    for r in rects:
        t0 = axis.start + r["first"] / COLUMNS * axis.span
        t1 = axis.start + (r["last"] + 1) / COLUMNS * axis.span
        queue = f", recv queue up to {r['queue']}" if r["queue"] else ""
        out.append(
            {
                "x": axis.col_x(r["first"]),
                "w": max(round(axis.col_x(r["last"] + 1) - axis.col_x(r["first"]), 1), 0.8),
                "cls": STATE_CLASS.get(r["state"], "info"),
                "title": f"{name}: {r['state']} {_hms(t0)}–{_hms(t1)}{queue}",
            }
        )
    return out


def _queue_lines(axis, cells, y, height, top):
    """Polylines of the receive queue (max per column) scaled to `top`; a column without data breaks the line."""
    lines, current = [], []
    for c in range(COLUMNS):
        q = cells.get(c, {}).get("queue")
        if q is None:
            if len(current) > 1:
                lines.append(" ".join(current))
            current = []
            continue
        x = round(axis.col_x(c) + PLOT_W / COLUMNS / 2, 1)
        current.append(f"{x},{round(y + height - (q / top) * height, 1)}")
    if len(current) > 1:
        lines.append(" ".join(current))
    return lines


def _transitions(rows, names, kind, threshold=None):
    """State changes (and recv-queue threshold crossings) per owner, from rows in time order."""
    out, last_state, above = [], {}, {}
    for owner, ts, _width, reachable, *values in rows:
        label = _label_of(reachable, values[0] if values else None)
        previous = last_state.get(owner)
        if previous is not None and previous != label:
            out.append(
                {
                    "ts": ts,
                    "kind": kind,
                    "who": names.get(owner, owner),
                    "what": f"{previous} → {label}",
                    "cls": STATE_CLASS.get(label, "info"),
                }
            )
        last_state[owner] = label
        queue = values[1] if len(values) > 1 else None
        if threshold is not None and queue is not None:
            is_above = queue > threshold
            if is_above != above.get(owner, False):
                out.append(
                    {
                        "ts": ts,
                        "kind": kind,
                        "who": names.get(owner, owner),
                        "what": (
                            f"recv queue {queue} over max_replication_lag {threshold}"
                            if is_above
                            else f"recv queue back to {queue}"
                        ),
                        "cls": "warn" if is_above else "ok",
                    }
                )
            above[owner] = is_above
    return out


def build(cluster, start, end, *, highlight=None):
    axis = Axis(start, end)
    span = end - start
    resolution = resolution_for(span.total_seconds())
    poll_s = status.proxysql_interval(cluster)
    sections, story = [], []
    y = TOP

    # -- audit events ------------------------------------------------------------------------------
    events = list(
        AuditEvent.objects.filter(cluster_id=cluster.pk, created_at__gte=start, created_at__lt=end).order_by(
            "created_at", "id"
        )[: MAX_EVENTS + 1]
    )
    truncated = len(events) > MAX_EVENTS
    events = events[:MAX_EVENTS]
    section = Section("Audit events", y, empty="No audit event for this cluster in this window.")
    by_actor = defaultdict(list)
    detail = reverse("audit:detail", args=[0])[:-2]  # "/audit/": one reverse() instead of two per event
    outcomes = dict(Outcome.choices)
    for e in events:
        by_actor[e.actor].append(e)
        e.href, e.outcome_label = f"{detail}{e.pk}/", outcomes.get(e.outcome, e.outcome)
    actors = sorted(by_actor, key=lambda a: -len(by_actor[a]))
    if len(actors) > 8:  # the busiest seven get their own lane; the rest share one
        rest = [e for a in actors[7:] for e in by_actor[a]]
        actors = actors[:7] + ["(others)"]
        by_actor["(others)"] = sorted(rest, key=lambda e: (e.created_at, e.id))
    for actor in actors:
        y += LANE_H
        lane = Lane(actor, y)
        for e in by_actor[actor]:
            lane.marks.append(
                {
                    "x": axis.x(e.created_at.timestamp()),
                    "cls": e.outcome,
                    "href": e.href,
                    "title": f"{e.created_at:%H:%M:%S} {e.actor}: {e.action} ({e.outcome_label})"
                    f"{' on ' + e.target if e.target else ''}",
                    "highlight": e.pk == highlight,
                }
            )
        section.lanes.append(lane)
    for e in events:
        story.append(
            {
                "ts": e.created_at.timestamp(),
                "kind": "audit",
                "who": e.actor,
                "what": f"{e.action}{' — ' + e.target if e.target else ''}",
                "cls": e.outcome,
                "href": e.href,
                "outcome": e.outcome_label,
                "duration_ms": e.duration_ms,
                "highlight": e.pk == highlight,
            }
        )
    sections.append(section)
    y += SECTION_GAP + LANE_H

    # -- operations --------------------------------------------------------------------------------
    ops = list(
        Operation.objects.filter(cluster=cluster, created_at__lt=end)
        .exclude(finished_at__lt=start)
        .order_by("created_at")
        .prefetch_related("steps")[:20]
    )
    section = Section("Operations", y, empty="No operation ran on this cluster in this window.")
    now_ts = timezone.now().timestamp()
    for op in ops:
        y += LANE_H
        lane = Lane(f"#{op.pk} {op.get_kind_display()}", y, href=op.get_absolute_url(), note=op.title)
        begin = (op.started_at or op.created_at).timestamp()
        finish = op.finished_at.timestamp() if op.finished_at else min(now_ts, axis.end)
        lane.rects.append(
            {
                "x": axis.x(begin),
                "w": max(axis.x(finish) - axis.x(begin), 1.5),
                "cls": f"op-{op.state}",
                "title": f"#{op.pk} {op.title}: {op.get_state_display()} {_hms(begin)}–{_hms(finish)}"
                f"{f' ({milliseconds(op.duration_ms)})' if op.duration_ms is not None else ''}",
                "href": op.get_absolute_url(),
            }
        )
        story.append(
            {
                "ts": (op.started_at or op.created_at).timestamp(),
                "kind": "operation",
                "who": op.actor,
                "what": f"#{op.pk} {op.title} started",
                "cls": "info",
                "href": op.get_absolute_url(),
            }
        )
        for step in op.steps.all():
            if not step.started_at:
                continue
            s0 = step.started_at.timestamp()
            s1 = step.finished_at.timestamp() if step.finished_at else finish
            lane.rects.append(
                {
                    "x": axis.x(s0),
                    "w": max(axis.x(s1) - axis.x(s0), 0.8),
                    "cls": f"step step-{step.state}",
                    "title": f"step {step.index + 1} {step.title}: {step.get_state_display()}"
                    f"{f', {milliseconds(step.duration_ms)}' if step.duration_ms is not None else ''}",
                }
            )
            story.append(
                {
                    "ts": s0,
                    "kind": "step",
                    "who": f"#{op.pk}",
                    "what": f"step {step.index + 1} {step.title}: {step.get_state_display()}",
                    "duration_ms": step.duration_ms,
                    "cls": "failure" if step.state == StepState.FAILED else "info",
                    "href": op.get_absolute_url(),
                }
            )
        if op.finished_at:
            story.append(
                {
                    "ts": op.finished_at.timestamp(),
                    "kind": "operation",
                    "who": op.actor,
                    "what": f"#{op.pk} {op.title}: {op.get_state_display()}",
                    "duration_ms": op.duration_ms,
                    "cls": "success" if op.state == OperationState.DONE else "failure",
                    "href": op.get_absolute_url(),
                }
            )
        section.lanes.append(lane)
    sections.append(section)
    y += SECTION_GAP + LANE_H

    # -- ProxySQL reachability ---------------------------------------------------------------------
    nodes = list(ProxySQLNode.objects.filter(cluster=cluster).order_by("name"))
    names = {n.pk: n.name for n in nodes}
    rows = _samples(ProxySQLSample, "node_id", list(names), [], start, end, resolution)
    folded = _fold(axis, rows, poll_s)
    section = Section("ProxySQL nodes (reachable / unreachable)", y, empty="No ProxySQL node in the inventory.")
    for node in nodes:
        y += LANE_H
        lane = Lane(node.name, y, href=node.get_absolute_url())
        lane.rects = _runs(axis, folded.get(node.pk, {}), node.name)
        if not lane.rects:
            lane.note = "no poll in this window"
        section.lanes.append(lane)
    story += _transitions(rows, names, "proxysql")
    sections.append(section)
    y += SECTION_GAP + LANE_H

    # -- backends ----------------------------------------------------------------------------------
    servers = list(Server.objects.filter(cluster=cluster).order_by("hostname", "port"))
    names = {s.pk: str(s) for s in servers}
    rows = _samples(BackendSample, "server_id", list(names), ["local_state", "recv_queue"], start, end, resolution)
    folded = _fold(axis, rows, poll_s)
    threshold = cluster.max_replication_lag
    section = Section("Backends (wsrep state; receive queue below it)", y, empty="No backend in the inventory.")
    for server in servers:
        y += LANE_H
        cells = folded.get(server.pk, {})
        lane = Lane(str(server), y, height=BAND_H + QUEUE_H, href=server.get_absolute_url())
        lane.rects = _runs(axis, cells, str(server))
        peak = max((c["queue"] for c in cells.values() if c["queue"] is not None), default=None)
        top = max(peak or 0, threshold, 1)
        lane.polylines = _queue_lines(axis, cells, y + BAND_H + 2, QUEUE_H - 4, top)
        lane.threshold_y = round(y + BAND_H + 2 + (QUEUE_H - 4) - threshold / top * (QUEUE_H - 4), 1)
        lane.note = (f"recv queue peak {peak}" if peak else "recv queue 0") if cells else "no poll in this window"
        section.lanes.append(lane)
        y += BAND_H + QUEUE_H - LANE_H + 4
    story += _transitions(rows, names, "backend", threshold)
    sections.append(section)
    y += LANE_H

    story.sort(key=lambda r: r["ts"])
    story_truncated = len(story) > MAX_LIST
    for row in story[:MAX_LIST]:
        row["time"] = datetime.fromtimestamp(row["ts"], dt_timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        row["duration"] = "" if row.get("duration_ms") is None else milliseconds(row["duration_ms"])
    guides = [{"x": axis.x(e.created_at.timestamp())} for e in events] if len(events) <= 80 else []
    marker = next((m for s in sections[:1] for lane in s.lanes for m in lane.marks if m["highlight"]), None)
    return {
        "cluster": cluster,
        "start": start,
        "end": end,
        "resolution": resolution,
        "resolution_label": {RAW: "raw polls", MINUTE: "1-minute rollups", HOUR: "1-hour rollups"}[resolution],
        "width": WIDTH,
        "height": y + 8,
        "label_w": LABEL_W,
        "plot_right": WIDTH - RIGHT_PAD,
        "top": TOP,
        "ticks": axis.ticks(),
        "sections": sections,
        "guides": guides,
        "marker": marker,
        "story": story[:MAX_LIST],
        "story_truncated": story_truncated,
        "events_truncated": truncated,
        "counts": {
            "events": len(events),
            "operations": len(ops),
            "transitions": sum(r["kind"] in ("backend", "proxysql") for r in story),
        },
    }
