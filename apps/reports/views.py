from django.conf import settings
from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.utils.text import slugify
from django.views.decorators.http import require_POST
from urllib.parse import urlencode

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER, has_role, require_role
from apps.audit.actor import Actor
from apps.audit.services import record
from apps.fleet.models import Cluster
from controlplane.converters import parse_id

from . import periods, selectors, services
from .choices import Period
from .forms import BuildForm, ScheduleForm, SendForm
from .models import Report, ReportChart, ReportSchedule


@require_role(VIEWER)
def report_list(request, build_form=None, status=200):
    # the API's filter (GET /api/v1/reports/): a value the page does not understand is ignored
    chosen = {"cluster": parse_id(request.GET.get("cluster", "")), "period": request.GET.get("period", "")}
    reports = selectors.reports(
        cluster=chosen["cluster"], period=chosen["period"] if chosen["period"] in Period.values else ""
    )
    page = Paginator(reports.select_related("cluster"), 50).get_page(request.GET.get("page"))
    kept = urlencode({k: v for k, v in chosen.items() if v not in (None, "")})
    return TemplateResponse(
        request,
        "reports/list.html",
        {
            "page": page,
            "chosen": chosen,
            "kept": kept,
            "clusters": Cluster.objects.order_by("name"),
            "periods": Period.choices,
            "build_form": build_form or BuildForm(),
            "schedules": ReportSchedule.objects.select_related("cluster").filter(enabled=True)[:20],
        },
        status=status,
    )


@require_role(OPERATOR)
@require_POST
def report_build(request):
    form = BuildForm(request.POST)
    if not form.is_valid():
        record("report built", request=request, outcome="invalid", details={"errors": form.errors.get_json_data()})
        return report_list(request, build_form=form, status=400)
    data = form.cleaned_data
    report = services.on_demand(data["cluster"], data["period"], data["when"], actor=Actor.of_request(request))
    messages.success(request, f"Report built in {report.build_ms:.0f} ms.")
    return redirect(report)


@require_role(VIEWER)
def report_detail(request, pk):
    report = get_object_or_404(Report.objects.select_related("cluster", "schedule"), pk=pk)
    body = services.render_html(report, report.data, services.charts_meta(report), "page")
    return TemplateResponse(
        request,
        "reports/detail.html",
        {
            "report": report,
            "body": body,
            "send_form": SendForm(
                initial={"recipients": ", ".join(report.schedule.recipient_list) if report.schedule else ""}
            ),
            "can_send": has_role(request.user, OPERATOR),
        },
    )


@require_role(VIEWER)
def report_chart(request, pk, key):
    chart = ReportChart.objects.filter(report_id=pk, key=key).values_list("png", flat=True).first()
    if chart is None:
        raise Http404("no such chart")
    response = HttpResponse(bytes(chart), content_type="image/png")
    response["Cache-Control"] = "private, max-age=86400"  # an archived chart never changes
    return response


@require_role(VIEWER)
def report_pdf(request, pk):
    report = get_object_or_404(Report, pk=pk)
    pdf = services.report_pdf(report)
    response = HttpResponse(pdf, content_type="application/pdf")
    name = slugify(f"{report.scope_name}-{report.period}-{report.start:%Y-%m-%d}") or f"report-{report.pk}"
    response["Content-Disposition"] = f'attachment; filename="{name}.pdf"'
    return response


@require_role(OPERATOR)
@require_POST
def report_send(request, pk):
    report = get_object_or_404(Report, pk=pk)
    form = SendForm(request.POST)
    if not form.is_valid():
        record(
            "report e-mailed",
            request=request,
            outcome="invalid",
            target=report.title,
            details={"errors": form.errors.get_json_data()},
        )
        messages.error(request, "Not sent: " + "; ".join(e for errs in form.errors.values() for e in errs))
        return redirect(report)
    ok, error = services.send_report(report, form.cleaned_data["recipients"], actor=Actor.of_request(request))
    if ok:
        messages.success(request, f"Sent to {', '.join(form.cleaned_data['recipients'])}.")
    else:
        messages.error(request, f"Not sent: {error}")
    return redirect(report)


# -- schedules ----------------------------------------------------------------------------------------------
@require_role(VIEWER)
def schedule_list(request):
    schedules = list(selectors.schedules())
    for s in schedules:
        s.next_send, s.next_span = periods.due_slot(s)
    return TemplateResponse(request, "reports/schedules.html", {"schedules": schedules, "tz": settings.TIME_ZONE})


@require_role(ADMIN)
def schedule_edit(request, pk=None):
    schedule = get_object_or_404(ReportSchedule, pk=pk) if pk else None
    form = ScheduleForm(request.POST or None, instance=schedule)
    if request.method == "POST":
        if form.is_valid():
            saved = services.save_schedule(form, actor=Actor.of_request(request))
            messages.success(request, f"Saved: {saved} ({saved.when_text()}).")
            return redirect("reports:schedules")
        record(
            "report schedule " + ("changed" if schedule else "added"),
            request=request,
            outcome="invalid",
            details={"errors": form.errors.get_json_data()},
        )
    return TemplateResponse(
        request, "reports/schedule_form.html", {"form": form, "schedule": schedule}, status=400 if form.errors else 200
    )


@require_role(ADMIN)
@require_POST
def schedule_delete(request, pk):
    schedule = get_object_or_404(ReportSchedule, pk=pk)
    services.delete_schedule(schedule, actor=Actor.of_request(request))
    messages.success(request, f"Deleted: {schedule}.")
    return redirect("reports:schedules")


@require_role(OPERATOR)
@require_POST
def schedule_run(request, pk):
    """Build (and mail) the schedule's latest period now, whatever it already did."""
    schedule = get_object_or_404(ReportSchedule.objects.select_related("cluster"), pk=pk)
    _, span = periods.due_slot(schedule)
    report = services.build_report(
        schedule.cluster, schedule.period, span, schedule=schedule, actor=Actor.of_request(request)
    )
    if schedule.recipient_list:
        ok, error = services.send_report(report, schedule.recipient_list, actor=Actor.of_request(request))
        messages.info(request, "Mailed to the schedule's recipients." if ok else f"Not mailed: {error}")
    return redirect(report)
