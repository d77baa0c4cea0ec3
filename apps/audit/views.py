"""Audit pages: the review list with its filters and exports, an event, and the chain verification (admin). Reads
need the viewer role; verifying needs admin. The incident view (/audit/incident/) mixes every app: apps/pages."""

import csv
import json
import time
from datetime import timedelta
from urllib.parse import urlencode

from django.core import signing
from django.core.serializers.json import DjangoJSONEncoder
from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from apps.accounts.roles import ADMIN, VIEWER, require_role
from apps.fleet.validators import whole_number

from . import selectors
from .forms import QUICK_RANGES, FilterForm
from .models import AuditArchive, AuditEvent
from .services import Progress, chain_start, record, verify_archive, verify_some

VERIFY_BUDGET_S = 2.0  # one verification request works this long, then the page asks for the next stretch
VERIFY_SALT = "audit.verify"


def _qs(params, **extra):
    merged = {**params, **{k: v for k, v in extra.items() if v is not None}}
    return "?" + urlencode(merged) if merged else "?"


def _form(request):
    form = FilterForm(request.GET or None)
    form.is_valid()  # invalid fields are shown and left out; the valid ones still filter
    return form


@require_role(VIEWER)
def event_list(request):
    """The review page: filters, free-text search, keyset paging, exports."""
    form = _form(request)
    applied = form.applied()
    page = selectors.page(
        selectors.filtered(form),
        before=whole_number(request.GET.get("before")),
        after=whole_number(request.GET.get("after")),
    )
    without_time = {k: v for k, v in applied.items() if k not in ("range", "start", "end")}
    return TemplateResponse(
        request,
        "audit/event_list.html",
        {
            "form": form,
            "page": page,
            "applied": applied,
            "older_url": _qs(applied, before=page.older) if page.older else None,
            "newer_url": _qs(applied, after=page.newer) if page.newer else None,
            "quick_ranges": [(k, _qs(without_time, range=k), applied.get("range") == k) for k in QUICK_RANGES]
            + [("any time", _qs(without_time), not any(k in applied for k in ("range", "start", "end")))],
            "export_csv": _qs(applied),
            "export_json": _qs(applied),
            "suggestions": selectors.suggestions(),
            "incident_url": _incident_link(form),
        },
    )


def _incident_link(form):
    data = getattr(form, "cleaned_data", {})
    if not data.get("cluster"):
        return None
    start, end = form.window()
    params = {"cluster": data["cluster"].pk}
    if start:
        params["start"] = start.strftime("%Y-%m-%dT%H:%M:%S")
    if end:
        params["end"] = end.strftime("%Y-%m-%dT%H:%M:%S")
    return "?" + urlencode(params)


def _export(request, fmt):
    form = _form(request)
    applied = form.applied()
    # The log as it stands now: events appended while the file streams (this export's own event
    # first) are not in it.
    upto = AuditEvent.objects.order_by("-id").values_list("id", flat=True).first() or 0
    record("export audit log", request=request, details={"format": fmt, "filters": applied, "up_to_event": upto})
    rows = selectors.export_rows(selectors.filtered(form).filter(id__lte=upto))
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    if fmt == "csv":
        response = StreamingHttpResponse(_csv_lines(rows), content_type="text/csv; charset=utf-8")
    else:
        response = StreamingHttpResponse(_json_chunks(rows, applied), content_type="application/json")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.{fmt}"'
    return response


class _Echo:
    def write(self, value):
        return value


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP, "CSV injection"); the
# log holds what users typed (targets, names, details), so such a cell is written with a leading quote.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """A value as a CSV cell that no spreadsheet evaluates: text starting like a formula gets a leading
    ' (numbers stay numbers)."""
    if value is None:
        return ""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _csv_lines(rows):
    writer = csv.writer(_Echo())
    yield writer.writerow(selectors.EXPORT_FIELDS)
    for item in rows:
        item["created_at"] = item["created_at"].isoformat()
        item["details"] = json.dumps(item["details"], sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder)
        yield writer.writerow([csv_cell(item[f]) for f in selectors.EXPORT_FIELDS])


def _json_chunks(rows, applied):
    head = {"exported_at": timezone.now().isoformat(), "filters": applied}
    yield json.dumps(head, cls=DjangoJSONEncoder)[:-1] + ', "events": [\n'
    first = True
    for item in rows:
        yield ("" if first else ",\n") + json.dumps(item, cls=DjangoJSONEncoder, ensure_ascii=False)
        first = False
    yield "\n]}\n"


@require_role(VIEWER)
def export_csv(request):
    return _export(request, "csv")


@require_role(VIEWER)
def export_json(request):
    return _export(request, "json")


@require_role(VIEWER)
def event_detail(request, pk):
    event = selectors.shown(get_object_or_404(AuditEvent, pk=pk))
    details_json = json.dumps(event.details, indent=2, sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder)
    incident_url = None
    if event.cluster_id:
        fmt = "%Y-%m-%dT%H:%M:%S"
        incident_url = "?" + urlencode(
            {
                "cluster": event.cluster_id,
                "start": (event.created_at - timedelta(minutes=30)).strftime(fmt),
                "end": (event.created_at + timedelta(minutes=30)).strftime(fmt),
                "event": event.pk,
            }
        )
    return TemplateResponse(
        request, "audit/event_detail.html", {"event": event, "details_json": details_json, "incident_url": incident_url}
    )


@require_role(ADMIN)
@require_http_methods(["GET", "POST"])
def verify(request):
    """Verify the hash chain from the archived head to the newest event and name the first broken link.
    A long chain is verified in stretches of VERIFY_BUDGET_S: each answer carries a signed
    continuation that the page posts back (htmx does it by itself; without JavaScript, a button)."""
    context = {"archives": AuditArchive.objects.all()[:50]}
    if request.method == "POST":
        state = None
        if request.POST.get("continuation"):
            try:
                state = signing.loads(request.POST["continuation"], salt=VERIFY_SALT, max_age=3600)
            except signing.BadSignature:
                state = None
        if state is None:
            after_id, prev = chain_start()
            state = {
                "after": after_id,
                "prev": prev,
                "checked": 0,
                "archives": bool(request.POST.get("archives")),
                "t0": time.time(),
            }
        progress = Progress(state["after"], state["prev"], state["checked"], state.get("scheme"))
        verify_some(progress, deadline=time.monotonic() + VERIFY_BUDGET_S)
        context["progress"] = progress
        if progress.done:
            context["archive_results"] = (
                [(a, *verify_archive(a)) for a in AuditArchive.objects.order_by("last_id")] if state["archives"] else []
            )
            bad_archives = [a.pk for a, ok, _ in context["archive_results"] if not ok]
            context["elapsed_s"] = round(time.time() - state["t0"], 2)
            record(
                "verify audit chain",
                request=request,
                outcome="failure" if progress.broken is not None or bad_archives else "success",
                details={
                    "checked": progress.checked,
                    "broken_event": getattr(progress.broken, "pk", None),
                    "reason": progress.reason,
                    "archives_checked": len(context["archive_results"]),
                    "bad_archives": bad_archives,
                },
            )
        else:
            context["continuation"] = signing.dumps(
                {
                    **state,
                    "after": progress.last_id,
                    "prev": progress.last_hash,
                    "checked": progress.checked,
                    "scheme": progress.last_scheme,
                },
                salt=VERIFY_SALT,
            )
        if request.htmx:
            return TemplateResponse(request, "audit/verify.html#result", context)
    return TemplateResponse(request, "audit/verify.html", context)
