"""Alerts (list with the page's filters, one alert, acknowledge) and silences (list, create, end early),
through apps/alerts/services.py: the same checks and audit as the pages."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER
from apps.alerts import selectors, services
from apps.alerts.forms import ChannelForm
from apps.alerts.models import Alert, Channel, Silence
from apps.audit.actor import Actor

from .. import serializers as s
from ..base import ApiView, body, form_errors, list_schema, page_form, paged, query


class AlertList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(
        s.AlertSerializer,
        s.AlertFilter,
        operation_id="alerts_list",
        tags=["alerts"],
        summary="Alerts, newest first (state: open = pending or firing, held = held by planned work)",
    )
    def get(self, request):
        f = query(s.AlertFilter, request)
        alerts = selectors.matching(
            cluster=f.get("cluster"),
            severity=f.get("severity") or "",
            rule=f.get("rule") or "",
            state=f.get("state") or "all",
        ).order_by("-since", "-pk")

        # The page is found on the ids alone (an index walk, even 500 pages deep in the history), then its rows read.
        def rows(ids):
            found = Alert.objects.select_related("cluster").in_bulk(ids)
            return s.AlertSerializer([found[pk] for pk in ids if pk in found], many=True).data

        return paged(self, request, alerts.values_list("pk", flat=True), rows=rows)


class AlertDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.AlertDetailSerializer, tags=["alerts"], summary="One alert with its figures")
    def get(self, request, pk):
        return Response(s.AlertDetailSerializer(get_object_or_404(Alert.objects.select_related("cluster"), pk=pk)).data)


class AlertAcknowledge(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.AcknowledgeInput,
        responses=s.AlertDetailSerializer,
        tags=["alerts"],
        summary="Acknowledge an alert with a note (audited)",
    )
    def post(self, request, pk):
        alert = get_object_or_404(Alert.objects.select_related("cluster"), pk=pk)
        data = body(s.AcknowledgeInput, request)
        return Response(
            s.AlertDetailSerializer(services.acknowledge(alert, data["note"], actor=Actor.of_request(request))).data
        )


class SilenceList(ApiView):
    roles = {"get": VIEWER, "post": OPERATOR}

    @list_schema(
        s.SilenceSerializer,
        s.SilenceFilter,
        operation_id="silences_list",
        tags=["alerts"],
        summary="Silences, latest end first (active=true: only those in force; false: only those ended)",
    )
    def get(self, request):
        f = query(s.SilenceFilter, request)
        return paged(self, request, selectors.silence_list(active=f.get("active")), s.SilenceSerializer)

    @extend_schema(
        request=s.SilenceInput,
        responses={201: s.SilenceSerializer},
        tags=["alerts"],
        summary="Silence the notifications of matching alerts for a while (audited)",
    )
    def post(self, request):
        d = body(s.SilenceInput, request)
        silence = services.silence(
            cluster=d.get("cluster"),
            rule=d.get("rule", ""),
            subject=d.get("subject", ""),
            subject_label=d.get("subject", ""),
            minutes=d["minutes"],
            reason=d["reason"],
            actor=Actor.of_request(request),
        )
        return Response(s.SilenceSerializer(silence).data, status=status.HTTP_201_CREATED)


class SilenceEnd(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=None,
        responses=s.SilenceSerializer,
        tags=["alerts"],
        summary="End a silence now (its alerts still firing are sent at once)",
    )
    def post(self, request, pk):
        silence = get_object_or_404(Silence.objects.select_related("cluster"), pk=pk)
        return Response(s.SilenceSerializer(services.end_silence(silence, actor=Actor.of_request(request))).data)


# -- alert channels: the channels page's form and services (admins change them, everyone reads them) ----------
def _channel_form(request, instance=None):
    data = body(s.AlertChannelInput, request)
    if "secret" in data:
        data["new_secret"] = data.pop("secret")
    return page_form(
        ChannelForm,
        data,
        request=request,
        instance=instance,
        action="change alert channel" if instance else "add alert channel",
    )


def _saved_channel(form, request):
    channel = services.save_channel(form, actor=Actor.of_request(request))
    if channel is None:  # refused at save (a name taken meanwhile): the form says why
        raise form_errors(form)
    return channel


class AlertChannelList(ApiView):
    roles = {"get": VIEWER, "post": ADMIN}

    @list_schema(
        s.AlertChannelSerializer,
        operation_id="alert_channels_list",
        tags=["alerts"],
        summary="Alert channels (where notifications go); secrets and URLs are never answered",
    )
    def get(self, request):
        return paged(self, request, selectors.channel_list(), s.AlertChannelSerializer)

    @extend_schema(
        request=s.AlertChannelInput,
        responses={201: s.AlertChannelSerializer},
        tags=["alerts"],
        summary="Add an alert channel (the page's rules: ALERT_CHANNEL_DESTINATIONS, a URL or e-mail "
        "addresses by kind, PagerDuty's routing key; audited)",
    )
    def post(self, request):
        channel = _saved_channel(_channel_form(request), request)
        return Response(s.AlertChannelSerializer(channel).data, status=status.HTTP_201_CREATED)


class AlertChannelDetail(ApiView):
    roles = {"get": VIEWER, "patch": ADMIN, "delete": ADMIN}

    @extend_schema(responses=s.AlertChannelSerializer, tags=["alerts"], summary="One alert channel")
    def get(self, request, pk):
        return Response(s.AlertChannelSerializer(get_object_or_404(Channel, pk=pk)).data)

    @extend_schema(
        request=s.AlertChannelInput,
        responses=s.AlertChannelSerializer,
        tags=["alerts"],
        summary="Change an alert channel: the fields named, checked as the page does (audited, with before and after)",
    )
    def patch(self, request, pk):
        channel = get_object_or_404(Channel, pk=pk)
        return Response(s.AlertChannelSerializer(_saved_channel(_channel_form(request, channel), request)).data)

    @extend_schema(responses={204: None}, tags=["alerts"], summary="Delete an alert channel (audited)")
    def delete(self, request, pk):
        services.delete_channel(get_object_or_404(Channel, pk=pk), actor=Actor.of_request(request))
        return Response(status=status.HTTP_204_NO_CONTENT)
