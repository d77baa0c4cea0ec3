from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from apps.accounts.roles import VIEWER, require_role
from apps.monitoring import charts as monitoring_charts

from . import charts, selectors
from .models import ChannelSample, ReplicationChannel


def _channel(pk):
    return get_object_or_404(ReplicationChannel.objects.select_related(
        "source_cluster", "replica_cluster", "source_server", "replica_server"), pk=pk)


@require_role(VIEWER)
def channel_detail(request, pk):
    channel = _channel(pk)
    return TemplateResponse(request, "dr/channel.html", {
        "channel": channel, "row": selectors.rows([channel])[0],
        "source_candidates": channel.candidates_for("source"), "replica_candidates": channel.candidates_for("replica"),
        "recent": ChannelSample.objects.filter(channel=channel).order_by("-ts")[:20],
    })


@require_role(VIEWER)
def channel_live(request, pk):
    """htmx partial: the channel's state, refreshed every poll."""
    channel = _channel(pk)
    return TemplateResponse(request, "dr/channel.html#live", {"channel": channel, "row": selectors.rows([channel])[0]})


@require_role(VIEWER)
@require_GET
def channel_chart(request, pk, name):
    try:
        data = charts.chart(name, _channel(pk), request.GET.get("range", monitoring_charts.DEFAULT_RANGE))
    except monitoring_charts.UnknownChart:
        raise Http404(f"no chart named {name!r}") from None
    return JsonResponse(data)
