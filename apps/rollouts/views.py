"""The rollout pages: the list, and a rollout's page (its waves, each cluster's state, the gates' figures, the halt
reason) whose live part refreshes while it runs; an operator's halt, pause, resume and abort, each confirmed by a
tick (nothing happens without it), through the services (audited there)."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from apps.accounts.roles import OPERATOR, VIEWER, require_role
from apps.audit.actor import Actor

from . import selectors, services
from .models import ENDED, Rollout, RolloutState

ACTIONS = {
    "halt": "Halted: the wave baking now fails its gate and is rolled back (between waves, it stops before the next).",
    "pause": "Paused: the wave under way ends its apply and its bake first.",
    "resume": "Resumed: it goes on with its next wave.",
    "abort": "Abort requested: every wave it applied is rolled back, newest first.",
}


@require_role(VIEWER)
def rollout_list(request):
    return TemplateResponse(request, "rollouts/list.html", {"rows": selectors.latest()})


def _context(rollout):
    doc = services.describe(rollout)
    return {
        "rollout": rollout,
        "doc": doc,
        "live": rollout.state not in ENDED,
        "can": {
            "halt": rollout.state == RolloutState.RUNNING
            and not rollout.abort_requested
            and not services.halt_requested(rollout),
            "pause": rollout.state == RolloutState.RUNNING and not rollout.abort_requested,
            "resume": rollout.state == RolloutState.PAUSED,
            "abort": rollout.state not in ENDED or rollout.state == RolloutState.HALTED,
        },
    }


@require_role(VIEWER)
def rollout_detail(request, pk):
    rollout = get_object_or_404(Rollout, pk=pk)
    return TemplateResponse(request, "rollouts/detail.html", _context(rollout))


@require_role(VIEWER)
def rollout_live(request, pk):
    """htmx partial polled while the rollout may still change; 286 (stop polling) once it has ended."""
    rollout = get_object_or_404(Rollout, pk=pk)
    context = _context(rollout)
    response = TemplateResponse(request, "rollouts/detail.html#live", context)
    if not context["live"] and request.htmx:
        response.render()
        return HttpResponseStopPolling(response.content)
    return response


@require_role(OPERATOR)
@require_POST
def rollout_action(request, pk, action):
    rollout = get_object_or_404(Rollout, pk=pk)
    if action not in ACTIONS:
        messages.error(request, f"No such action: {action}.")
        return redirect("rollouts:detail", pk=rollout.pk)
    if request.POST.get("confirm") != "yes":
        messages.error(request, f"Tick the confirmation to {action} {rollout}: nothing was done.")
        return redirect("rollouts:detail", pk=rollout.pk)
    actor = Actor.of_request(request)
    try:
        if action == "halt":
            services.halt(rollout, actor=actor, reason=request.POST.get("reason", ""))
        else:
            getattr(services, action)(rollout, actor=actor)
        messages.success(request, ACTIONS[action])
    except services.Refused as exc:
        messages.error(request, str(exc))
    return redirect("rollouts:detail", pk=rollout.pk)
