from django.http import Http404, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET

from apps.accounts.roles import OPERATOR, VIEWER, require_role
from apps.audit.actor import Actor
from apps.audit.services import record
from apps.monitoring import charts as monitoring_charts
from apps.operations import services

from . import charts, moves, selectors
from .forms import MoveForm
from .models import ChannelSample, ReplicationChannel


def _channel(pk):
    return get_object_or_404(
        ReplicationChannel.objects.select_related(
            "source_cluster", "replica_cluster", "source_server", "replica_server"
        ),
        pk=pk,
    )


@require_role(VIEWER)
def channel_detail(request, pk):
    channel = _channel(pk)
    return TemplateResponse(
        request,
        "dr/channel.html",
        {
            "channel": channel,
            "row": selectors.rows([channel])[0],
            "source_candidates": channel.candidates_for("source"),
            "replica_candidates": channel.candidates_for("replica"),
            "recent": ChannelSample.objects.filter(channel=channel).order_by("-ts")[:20],
            "move_form": MoveForm(channel=channel),
            "operations": selectors.moves(channel, limit=8),
        },
    )


@require_role(OPERATOR)
def channel_move(request, pk):
    """A planned move of either end: the form, then the plan (shown, confirmed and run like every operation)."""
    channel = _channel(pk)
    form = MoveForm(request.POST if request.method == "POST" else None, channel=channel)
    if request.method == "POST" and form.is_valid():
        plan = moves.plan_move(
            channel,
            new_source=form.cleaned_data["source_server"],
            new_replica=form.cleaned_data["replica_server"],
            reason="planned move",
        )
        return redirect(services.save_plan(plan, actor=Actor.of_request(request)))
    if request.method == "POST":
        record(
            "channel_move planned",
            request=request,
            cluster=channel.replica_cluster,
            target=channel.name,
            outcome="invalid",
            details={"errors": form.errors.get_json_data()},
        )
    return TemplateResponse(
        request, "dr/move_form.html", {"channel": channel, "form": form}, status=400 if form.errors else 200
    )


@require_role(VIEWER)
def channel_live(request, pk):
    """htmx partial: the channel's state, refreshed every poll."""
    channel = _channel(pk)
    return TemplateResponse(
        request,
        "dr/channel.html#live",
        {"channel": channel, "row": selectors.rows([channel])[0], "operations": selectors.moves(channel, limit=1)},
    )


@require_role(VIEWER)
@require_GET
def channel_chart(request, pk, name):
    try:
        data = charts.chart(name, _channel(pk), request.GET.get("range", monitoring_charts.DEFAULT_RANGE))
    except monitoring_charts.UnknownChart:
        raise Http404(f"no chart named {name!r}") from None
    return JsonResponse(data)
