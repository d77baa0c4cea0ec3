"""Health reports as built: the list, and one report's data (everything its page and PDF show)."""
from django.db.models.fields.json import KeyTextTransform
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from apps.accounts.roles import VIEWER
from apps.reports.models import Report

from .. import serializers as s
from ..base import ApiView, list_schema, paged, query


class ReportList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(s.ReportSerializer, s.ReportFilter, operation_id="reports_list", tags=["reports"],
                   summary="Health reports, newest period first")
    def get(self, request):
        f = query(s.ReportFilter, request)
        # The list leaves the data out (it can be large): the title is read from it in the query.
        reports = (Report.objects.defer("html", "data").annotate(data_title=KeyTextTransform("title", "data"))
                   .order_by("-end", "-pk"))
        for name in ("cluster", "period"):
            if f.get(name) is not None:
                reports = reports.filter(**{name: f[name]})
        return paged(self, request, reports, s.ReportSerializer)


class ReportDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.ReportDetailSerializer, tags=["reports"], summary="One report with its data")
    def get(self, request, pk):
        return Response(s.ReportDetailSerializer(get_object_or_404(Report.objects.defer("html"), pk=pk)).data)
