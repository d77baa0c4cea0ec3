"""Health reports as built: the list, and one report's data (everything its page and PDF show)."""

from django.db.models.fields.json import KeyTextTransform
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from apps.accounts.roles import ADMIN, VIEWER
from apps.audit.actor import Actor
from apps.reports import selectors, services
from apps.reports.forms import ScheduleForm
from apps.reports.models import Report, ReportSchedule

from .. import serializers as s
from ..base import ApiView, body, list_schema, page_form, paged, query


class ReportList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(
        s.ReportSerializer,
        s.ReportFilter,
        operation_id="reports_list",
        tags=["reports"],
        summary="Health reports, newest period first",
    )
    def get(self, request):
        f = query(s.ReportFilter, request)
        # The list leaves the data out (it can be large): the title is read from it in the query.
        reports = selectors.reports(cluster=f.get("cluster"), period=f.get("period") or "").annotate(
            data_title=KeyTextTransform("title", "data")
        )
        return paged(self, request, reports, s.ReportSerializer)


class ReportDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.ReportDetailSerializer, tags=["reports"], summary="One report with its data")
    def get(self, request, pk):
        return Response(s.ReportDetailSerializer(get_object_or_404(Report.objects.defer("html"), pk=pk)).data)


# -- report schedules: the schedules page's form and services (admins change them, everyone reads them) -------
def _schedule_form(request, instance=None):
    return page_form(
        ScheduleForm,
        body(s.ReportScheduleInput, request),
        request=request,
        instance=instance,
        action="report schedule changed" if instance else "report schedule added",
    )


class ReportScheduleList(ApiView):
    roles = {"get": VIEWER, "post": ADMIN}

    @list_schema(
        s.ReportScheduleSerializer,
        operation_id="report_schedules_list",
        tags=["reports"],
        summary="Report schedules: which report is built and mailed when",
    )
    def get(self, request):
        return paged(self, request, selectors.schedules(), s.ReportScheduleSerializer)

    @extend_schema(
        request=s.ReportScheduleInput,
        responses={201: s.ReportScheduleSerializer},
        tags=["reports"],
        summary="Add a report schedule (the page's rules: one per scope and period; audited)",
    )
    def post(self, request):
        schedule = services.save_schedule(_schedule_form(request), actor=Actor.of_request(request))
        return Response(s.ReportScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)


class ReportScheduleDetail(ApiView):
    roles = {"get": VIEWER, "patch": ADMIN, "delete": ADMIN}

    @extend_schema(responses=s.ReportScheduleSerializer, tags=["reports"], summary="One report schedule")
    def get(self, request, pk):
        return Response(s.ReportScheduleSerializer(get_object_or_404(ReportSchedule, pk=pk)).data)

    @extend_schema(
        request=s.ReportScheduleInput,
        responses=s.ReportScheduleSerializer,
        tags=["reports"],
        summary="Change a report schedule: the fields named (audited, with before and after)",
    )
    def patch(self, request, pk):
        schedule = get_object_or_404(ReportSchedule, pk=pk)
        return Response(
            s.ReportScheduleSerializer(
                services.save_schedule(_schedule_form(request, schedule), actor=Actor.of_request(request))
            ).data
        )

    @extend_schema(responses={204: None}, tags=["reports"], summary="Delete a report schedule (audited)")
    def delete(self, request, pk):
        services.delete_schedule(get_object_or_404(ReportSchedule, pk=pk), actor=Actor.of_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
