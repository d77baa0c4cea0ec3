"""The audit log: the review page's filters (its own form checks them) and keyset pages as cursors: `next`
is the older page (?before=<id>), `previous` the newer one (?after=<id>). No OFFSET, no COUNT."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from apps.accounts.roles import VIEWER
from apps.audit import selectors
from apps.audit.forms import FilterForm
from apps.audit.models import AuditEvent

from .. import serializers as s
from ..base import ApiView


class AuditEventList(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        parameters=[s.AuditFilter],
        responses=s.AuditPageSerializer,
        tags=["audit"],
        operation_id="audit_events_list",
        summary="Audit events, newest first, filtered; follow `next` for older ones",
    )
    def get(self, request):
        cursor, form = s.AuditCursor(data=request.query_params), FilterForm(request.query_params)
        if not (cursor.is_valid() & form.is_valid()):  # both checked: every bad parameter is named at once
            errors = {k: [e["message"] for e in v] for k, v in form.errors.get_json_data().items()}
            raise exceptions.ValidationError({**errors, **cursor.errors})
        cursor = cursor.validated_data
        page = selectors.page(
            selectors.filtered(form), before=cursor.get("before"), after=cursor.get("after"), size=cursor["page_size"]
        )
        url = remove_query_param(remove_query_param(request.build_absolute_uri(), "before"), "after")
        return Response(
            {
                "next": replace_query_param(url, "before", page.older) if page.older else None,
                "previous": replace_query_param(url, "after", page.newer) if page.newer else None,
                "results": s.AuditEventSerializer(page.events, many=True).data,
            }
        )


class AuditEventDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.AuditEventSerializer, tags=["audit"], summary="One audit event")
    def get(self, request, pk):
        event = selectors.shown(get_object_or_404(AuditEvent.objects.defer("search_text"), pk=pk))
        return Response(s.AuditEventSerializer(event).data)
