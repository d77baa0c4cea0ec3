"""Building, archiving and delivering reports; running the schedules. Each write is audited.

build_report()  reads the history (content.py), draws the charts (charts.py), renders the e-mail HTML and
                stores all of it as one Report with its ReportChart rows (one short transaction).
send_report()   e-mails an archived report: HTML with the charts inline (cid:), a plain-text part.
report_pdf()    renders the archived HTML to PDF (WeasyPrint), charts embedded.
run_due()       what beat calls: claims each due schedule with a conditional UPDATE, builds, sends.
No database transaction is held while mailing.
"""

import hashlib
import logging
import time
from collections.abc import Iterable
from datetime import datetime
from email.mime.image import MIMEImage
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.db.models import Q
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from apps.audit.actor import Actor
from apps.audit.services import record
from apps.fleet.models import Cluster
from apps.rollouts import report as rollouts_report
from controlplane.converters import parse_id

from . import content, fmt, periods
from .choices import Scope
from .forms import ScheduleForm
from .models import Report, ReportChart, ReportSchedule
from .periods import Span

log = logging.getLogger(__name__)
for _noisy in ("weasyprint", "weasyprint.progress", "fontTools"):  # page-by-page progress at INFO: not ours to log
    logging.getLogger(_noisy).setLevel(logging.WARNING)
CSS_PATH = settings.BASE_DIR / "apps" / "reports" / "static" / "reports" / "report.css"


def bucket_for(seconds: float) -> int:
    return 3600 if seconds <= 2 * 86400 else 6 * 3600


def build_data(cluster: Cluster | None, period: str, span: Span, rolling: bool = False) -> dict[str, Any]:
    """The report's content as JSON-ready data (no writes)."""
    prev = span.previous()
    start, end = span.start.timestamp(), span.end.timestamp()
    bucket = bucket_for(end - start)
    clusters = [cluster] if cluster is not None else list(Cluster.objects.order_by("name"))
    before = fmt.before_words(period, rolling)
    rollouts = rollouts_report.sections([c.pk for c in clusters], start, end)  # every cluster's at once

    def section(c: Cluster, hourly_only: bool = False) -> dict[str, Any]:
        return content.ClusterSection(
            c,
            start,
            end,
            prev.start.timestamp(),
            prev.end.timestamp(),
            bucket,
            before_words=before,
            hourly_only=hourly_only,
            rollouts=rollouts,
        ).build()

    if cluster is None and len(clusters) > content.FLEET_TABLE_ROWS:
        # A big fleet: every cluster from its hourly rollups first (they can only make it look worse), then
        # the worst, which the report lists and details, again at the finest resolution kept.
        sections = [section(c, hourly_only=True) for c in clusters]
        ranked = content.fleet_section(
            sections, start, end, prev.start.timestamp(), prev.end.timestamp(), before, digests=False
        )["clusters"]
        worst = {r["id"] for r in ranked[: content.FLEET_TABLE_ROWS]}
        sections = [section(c) if c.pk in worst else s for c, s in zip(clusters, sections)]
    else:
        sections = [section(c) for c in clusters]
    label = fmt.period_label(span.start, span.end, period, rolling)
    scope_name = cluster.name if cluster is not None else "the fleet"
    data: dict[str, Any] = {
        "version": 1,
        "scope": Scope.CLUSTER if cluster is not None else Scope.FLEET,
        "scope_name": scope_name,
        "period": period,
        "rolling": rolling,
        "period_label": label,
        "title": f"{'The fleet' if cluster is None else scope_name}: {period} health report, {label}",
        "start": start,
        "end": end,
        "previous": [prev.start.timestamp(), prev.end.timestamp()],
        "bucket_s": bucket,
        "tz": settings.TIME_ZONE,
        "clusters": sections,
        "lab_data": any(s["lab_data"] for s in sections),
    }
    if cluster is None:
        data["fleet"] = content.fleet_section(
            sections, start, end, prev.start.timestamp(), prev.end.timestamp(), before
        )
        data["summary"] = data["fleet"]["summary"]
        rank = {r["id"]: i for i, r in enumerate(data["fleet"]["clusters"])}
        # The sections of the clusters the table lists (the others are a row each in data["fleet"]["clusters"]).
        data["clusters"] = sorted(sections, key=lambda s: rank[s["id"]])[: data["fleet"]["listed"]]
    else:
        data["summary"] = sections[0]["summary"] if sections else {"headline": "", "points": []}
    return data


def render_html(report: Report, data: dict[str, Any], charts_meta: list[dict[str, Any]], mode: str) -> str:
    """The report as a full HTML document: mode "email" (charts as cid:), "pdf" (cid: resolved by the PDF
    renderer) or "page" (charts from the console's URLs; the body only, inside the console's layout)."""
    base = "" if mode == "page" else settings.REPORTS_BASE_URL.rstrip("/")
    if mode == "page":
        src = {c["key"]: reverse("reports:chart", args=[report.pk, c["key"]]) for c in charts_meta}
    else:
        src = {c["key"]: f"cid:{c['key']}" for c in charts_meta}
    by_key = {c["key"]: {**c, "src": src[c["key"]]} for c in charts_meta}
    section_charts: dict[int, dict[str, dict[str, Any]]] = {}
    for key, chart in by_key.items():
        if key.startswith("c") and "-" in key and parse_id(key[1 : key.index("-")]) is not None:
            section_charts.setdefault(int(key[1 : key.index("-")]), {})[key[key.index("-") + 1 :]] = chart
    day_style = "time" if data["period"] == "daily" and not data.get("rolling") else "day"
    ctx = {
        "report": report,
        "data": data,
        "day_style": day_style,
        "before": fmt.before_words(data["period"], data.get("rolling")),
        "charts": by_key,
        "section_charts": section_charts,
        "base": base,
        "mode": mode,
        "css": CSS_PATH.read_text() if mode != "page" else "",
    }
    template = "reports/_body.html" if mode == "page" else "reports/document.html"
    return render_to_string(template, ctx)


def build_report(
    cluster: Cluster | None,
    period: str,
    span: Span,
    *,
    actor: Actor | None = None,
    rolling: bool = False,
    schedule: ReportSchedule | None = None,
) -> Report:
    """Build and archive one report for `actor` (apps/audit/actor.py; by default its schedule, else the system).
    Returns the Report."""
    actor = actor or _schedule_actor(schedule)
    started = time.monotonic()
    data = build_data(cluster, period, span, rolling)
    # matplotlib and numpy are ~56 MiB a process, and every worker process imports this module (its tasks):
    # why: only the process that builds a report loads them, when it draws
    from . import charts

    drawn = charts.render_all(data)
    charts_meta = [{"key": k, "title": t, "width": w, "height": h} for k, t, _, w, h in drawn]
    report = Report(
        scope=data["scope"],
        cluster=cluster,
        scope_name=cluster.name if cluster else "fleet",
        period=period,
        start=span.start,
        end=span.end,
        schedule=schedule,
        built_at=timezone.now(),
        built_by=actor.name,
        headline=data["summary"]["headline"][:500],
        data=data,
        html="",
    )
    with transaction.atomic():
        report.save()
        ReportChart.objects.bulk_create(
            [ReportChart(report=report, key=k, title=t[:200], png=png, width=w, height=h) for k, t, png, w, h in drawn]
        )
        report.html = render_html(report, data, charts_meta, "email")
        report.build_ms = round((time.monotonic() - started) * 1000, 1)
        Report.objects.filter(pk=report.pk).update(html=report.html, build_ms=report.build_ms)
        record(
            "report built",
            actor=actor,
            cluster=cluster,
            target=report.title,
            details={
                "report": report.pk,
                "period": period,
                "start": span.start,
                "end": span.end,
                "headline": report.headline,
                "charts": len(drawn),
            },
            duration_ms=report.build_ms,
        )
    return report


def _schedule_actor(schedule: ReportSchedule | None) -> Actor:
    return Actor.schedule(f"report schedule #{schedule.pk}") if schedule else Actor.system()


def charts_meta(report: Report) -> list[dict[str, Any]]:
    return [
        {"key": k, "title": t, "width": w, "height": h}
        for k, t, w, h in report.charts.values_list("key", "title", "width", "height")
    ]


# -- delivery ---------------------------------------------------------------------------------------------
def subject_of(report: Report) -> str:
    return f"[ProxySQL fleet] {report.headline}"[:250]


def text_of(report: Report) -> str:
    data = report.data
    lines = [data.get("title", report.title), "", data["summary"]["headline"], ""]
    lines += [f"- {p['text']}" for p in data["summary"]["points"]]
    lines += [
        "",
        f"The full report, with charts: {settings.REPORTS_BASE_URL.rstrip('/')}{report.get_absolute_url()}",
        f"PDF: {settings.REPORTS_BASE_URL.rstrip('/')}{report.get_absolute_url()}pdf/",
    ]
    if data.get("lab_data"):
        lines.insert(0, "LAB DATA: this report was built from synthetic lab history.\n")
    return "\n".join(lines)


def email_message(report: Report, recipients: list[str]) -> EmailMultiAlternatives:
    """A multipart/related message: text, the HTML report, and each chart as an inline PNG (Content-ID)."""
    msg = EmailMultiAlternatives(subject_of(report), text_of(report), settings.DEFAULT_FROM_EMAIL, recipients)
    msg.attach_alternative(report.html, "text/html")
    msg.mixed_subtype = "related"
    for key, png in report.charts.values_list("key", "png"):
        image = MIMEImage(bytes(png), _subtype="png")
        image.add_header("Content-ID", f"<{key}>")
        image.add_header("Content-Disposition", "inline", filename=f"{key}.png")
        msg.attach(image)
    return msg


def send_report(
    report: Report, recipients: Iterable[str], *, actor: Actor | None = None, schedule: ReportSchedule | None = None
) -> tuple[bool, str]:
    """Mail the report (a network call: no transaction is held) for `actor` (by default its schedule, else the
    system). Returns (ok, error)."""
    actor = actor or _schedule_actor(schedule)
    recipients = list(recipients)
    if not recipients:
        return False, "no recipients"
    started = time.monotonic()
    error = ""
    try:
        email_message(report, recipients).send(fail_silently=False)
    except Exception as exc:  # SMTP errors, refused connections, timeouts: recorded, never raised to beat
        error = f"{type(exc).__name__}: {exc}"[:1000]
        log.warning("report %s not mailed: %s", report.pk, error)
    ms = round((time.monotonic() - started) * 1000, 1)
    with transaction.atomic():  # what the report says of its mail and the audit row together
        Report.objects.filter(pk=report.pk).update(
            emailed_to=", ".join(recipients)[:5000],
            email_error=error,
            **({"emailed_at": timezone.now()} if not error else {}),
        )
        record(
            "report e-mailed",
            actor=actor,
            cluster=report.cluster,
            target=report.title,
            outcome="failure" if error else "success",
            details={"report": report.pk, "recipients": recipients, "error": error},
            duration_ms=ms,
        )
    return not error, error


def report_pdf(report: Report) -> bytes:
    """The archived report as PDF bytes: the e-mailed HTML, its cid: charts fed from the archive. Nothing
    else is fetched (no network, no file). A render costs about a second of CPU (WeasyPrint's layout), so the bytes
    are kept in the report-pdf cache under a digest of what they are made of (the HTML and every chart): the same
    report downloaded again, or by a page reloaded in a loop, is rendered once, and a change to the report, its
    charts or the template renders anew."""
    html, pngs, cache_key = pdf_source(report)
    pdf = caches["report-pdf"].get(cache_key)
    if pdf is None:
        pdf = _render_pdf(html, pngs)
        caches["report-pdf"].set(cache_key, pdf)
    return pdf


def pdf_source(report: Report) -> tuple[str, dict[str, bytes], str]:
    """What a report's PDF is made of, its HTML and its charts' PNGs by key, and the report-pdf cache key they
    digest to."""
    pngs = {k: bytes(v) for k, v in report.charts.values_list("key", "png")}
    html = render_html(report, report.data, charts_meta(report), "pdf")
    made_of = hashlib.sha256(html.encode())
    for key in sorted(pngs):
        made_of.update(f"\0{key}\0{len(pngs[key])}\0".encode())
        made_of.update(pngs[key])
    return html, pngs, f"report-pdf:{made_of.hexdigest()}"


def _render_pdf(html: str, pngs: dict[str, bytes]) -> bytes:
    # why: WeasyPrint (Pango, fonts) loads only when a PDF is rendered
    from weasyprint import HTML
    from weasyprint.urls import URLFetcher, URLFetcherResponse

    class ArchiveFetcher(URLFetcher):
        def fetch(self, url: str, headers: Any = None) -> URLFetcherResponse:
            if url.startswith("cid:") and url[4:] in pngs:
                return URLFetcherResponse(url, pngs[url[4:]], {"Content-Type": "image/png"})
            raise ValueError(f"the PDF fetches nothing but its own charts ({url[:80]})")

    return HTML(string=html, url_fetcher=ArchiveFetcher(), base_url=settings.REPORTS_BASE_URL).write_pdf()


# -- schedules --------------------------------------------------------------------------------------------
def claim(schedule: ReportSchedule, span: Span) -> bool:
    """Take the schedule's period with a conditional UPDATE; False when another run got there first."""
    return bool(
        ReportSchedule.objects.filter(pk=schedule.pk)
        .filter(Q(last_period_end__isnull=True) | Q(last_period_end__lt=span.end))
        .update(last_period_end=span.end, last_run_at=timezone.now(), last_error="")
    )


def run_schedule(schedule: ReportSchedule, span: Span) -> int | None:
    try:
        report = build_report(schedule.cluster, schedule.period, span, schedule=schedule)
    except Exception as exc:
        # The period stays claimed (no rebuild every minute of a report that fails the same way): the error
        # shows on the schedules page, and "build now" there retries.
        log.exception("report schedule %s failed", schedule.pk)
        with transaction.atomic():
            ReportSchedule.objects.filter(pk=schedule.pk).update(last_error=f"{type(exc).__name__}: {exc}"[:2000])
            record(
                "report built",
                actor=_schedule_actor(schedule),
                cluster=schedule.cluster,
                outcome="failure",
                target=str(schedule),
                details={"error": str(exc)[:1000]},
            )
        return None
    if schedule.recipient_list:
        ok, error = send_report(report, schedule.recipient_list, schedule=schedule)
        if not ok:
            ReportSchedule.objects.filter(pk=schedule.pk).update(last_error=f"built report #{report.pk}; mail: {error}")
    return report.pk


def run_due(now: datetime | None = None, limit: int = 20) -> list[int]:
    """Build (and mail) every due schedule's report, at most `limit` per call. Returns the report ids."""
    now = now or timezone.now()
    built: list[int] = []
    for schedule in ReportSchedule.objects.filter(enabled=True).select_related("cluster").order_by("pk"):
        if len(built) >= limit:
            break
        span = periods.is_due(schedule, now)
        if span is None or not claim(schedule, span):
            continue
        pk = run_schedule(schedule, span)
        if pk:
            built.append(pk)
    return built


def on_demand(cluster: Cluster | None, period: str, when: str, *, actor: Actor) -> Report:
    """An operator's report: 'last' complete period, or 'rolling' (up to now)."""
    if when == "rolling":
        span = periods.rolling(period)
    else:
        span = periods.last_complete(period)
    return build_report(cluster, period, span, rolling=when == "rolling", actor=actor)


def save_schedule(form: ScheduleForm, *, actor: Actor) -> ReportSchedule:
    """Create or change a schedule from a valid form; audited with the changed fields."""
    creating = form.instance.pk is None
    before = {} if creating else {f: form.initial.get(f) for f in form.changed_data}
    with transaction.atomic():
        schedule = form.save()
        record(
            "report schedule " + ("added" if creating else "changed"),
            actor=actor,
            cluster=schedule.cluster,
            target=str(schedule),
            details={
                "schedule": schedule.pk,
                "changed": form.changed_data,
                "before": {k: str(v) for k, v in before.items()},
                "after": {f: str(form.cleaned_data.get(f)) for f in form.changed_data},
            },
        )
    return schedule


def delete_schedule(schedule: ReportSchedule, *, actor: Actor) -> None:
    with transaction.atomic():
        record(
            "report schedule deleted",
            actor=actor,
            cluster=schedule.cluster,
            target=str(schedule),
            details={"schedule": schedule.pk, "recipients": schedule.recipient_list},
        )
        schedule.delete()
