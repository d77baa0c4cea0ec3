"""DR channels: list and read them (latest state, history, moves); plan a planned move of either end. The move
is an operation like every other: confirm and follow it with the operation endpoints."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.response import Response

from apps.accounts.roles import VIEWER
from apps.dr import moves, selectors
from apps.dr.models import ChannelSample
from apps.fleet.models import Server
from apps.operations.models import Operation

from .. import serializers as s
from ..base import ApiView, body, list_schema, paged, query
from .operations import PLAN_DOC, _Plan, operation_rows


def _answer(row):
    channel = row["channel"]
    return {
        **{
            f: getattr(channel, f)
            for f in (
                "id",
                "name",
                "replication_user",
                "max_lag_s",
                "auto_failover_enabled",
                "failover_after_polls",
                "failback_enabled",
                "failback_after_s",
                "updated_at",
            )
        },
        **{
            f: getattr(channel, f"{f}_id")
            for f in ("source_cluster", "replica_cluster", "source_server", "replica_server", "preferred_source")
        },
        "candidates": [{"side": c.side, "server": c.server_id, "weight": c.weight} for c in channel.candidates.all()],
        "latest": selectors.latest(row),
    }


class ChannelList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(
        s.ChannelSerializer,
        s.ChannelFilter,
        operation_id="channels_list",
        tags=["dr"],
        summary="DR channels with their latest state",
    )
    def get(self, request):
        f = query(s.ChannelFilter, request)
        channels = selectors.channels(f.get("cluster"))
        return paged(self, request, channels, rows=lambda page: [_answer(r) for r in selectors.rows(page)])


class ChannelDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses=s.ChannelDetailSerializer,
        tags=["dr"],
        summary="One DR channel: its latest state, its recent polls and its moves",
    )
    def get(self, request, pk):
        channel = get_object_or_404(selectors.channels(), pk=pk)
        out = _answer(selectors.rows([channel])[0])
        history = ChannelSample.objects.filter(channel=channel, resolution=0).order_by("-ts")[:100]
        out["history"] = s.ChannelSampleSerializer(history, many=True).data
        fields = s.values_of(s.OperationSerializer, ["planned_by", "confirmed_by", "finished", "duration_ms"])
        out["moves"] = operation_rows(
            Operation.objects.filter(pk__in=[op.pk for op in selectors.moves(channel)])
            .order_by("-id")
            .values(*fields, "actor", "confirmer")
        )
        return Response(out)


class ChannelMovePlan(_Plan):
    @extend_schema(
        request=s.ChannelMoveInput,
        responses={201: s.OperationDetailSerializer},
        tags=["plan"],
        summary=f"A planned move of a DR channel's source and/or replica. {PLAN_DOC}",
    )
    def post(self, request, pk):
        channel = get_object_or_404(selectors.channels(), pk=pk)
        data = body(s.ChannelMoveInput, request)
        ends = {}
        for field, cluster in (("new_source", channel.source_cluster), ("new_replica", channel.replica_cluster)):
            if data[field] is not None:
                ends[field] = Server.objects.select_related("cluster").filter(pk=data[field], cluster=cluster).first()
                if ends[field] is None:
                    raise exceptions.ValidationError({field: [f"No backend #{data[field]} in cluster {cluster.name}."]})
        return self.saved(request, moves.plan_move(channel, reason="planned move", **ends))
