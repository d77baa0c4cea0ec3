"""Fleet rollouts: plan one (the exact clusters per wave, saved planned), start it (a worker runs it), follow it,
pause and resume it, halt it (the wave baking fails its gate with the operator's reason and is rolled back), abort it
(its waves rolled back newest first). Operators plan, start and abort; the service audits each and
refuses (409) what it must (the two-person rule, a change that does not apply, a bad selector or waves)."""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from apps.accounts.roles import OPERATOR, VIEWER
from apps.audit.actor import Actor
from apps.rollouts import selectors as rollout_selectors
from apps.rollouts import services
from apps.rollouts.models import Rollout

from .. import serializers as s
from ..base import ApiView, body


def shown(rollout, code=status.HTTP_200_OK):
    return Response(services.describe(rollout), status=code)


class RolloutList(ApiView):
    roles = {"get": VIEWER, "post": OPERATOR}

    @extend_schema(
        responses=s.RolloutSerializer(many=True),
        tags=["rollouts"],
        summary=f"The latest {rollout_selectors.LIST_LIMIT} rollouts, newest first, with their waves",
    )
    def get(self, request):
        return Response(rollout_selectors.latest())

    @extend_schema(
        request=s.RolloutInput,
        responses={201: s.RolloutSerializer},
        tags=["rollouts"],
        summary="Plan a rollout: the clusters the selector picks, per wave, each checked that the "
        "change applies; saved planned (start it to run it)",
    )
    def post(self, request):
        data = body(s.RolloutInput, request)
        change = {"file": data["file"]} if data.get("file") else {"edits": data["edits"]}
        selector = {
            "tags": [[k, v] for k, v in sorted(data["select"]["tags"].items())],
            "names": data["select"]["names"],
            "versions": data["select"]["versions"],
        }
        rollout = services.plan(
            change,
            selector,
            data["waves"],
            actor=Actor.of_request(request),
            reason=data["reason"],
            bake_canary_s=data["bake_canary_s"],
            bake_s=data["bake_s"],
            max_error_rate=data["max_error_rate"],
            when_busy=data["when_busy"],
            busy_wait_s=data["busy_wait_s"],
            max_latency_ratio=data["max_latency_ratio"],
            max_mirror_queue_share=data["max_mirror_queue_share"],
            roll_back_before=data["roll_back_before"],
        )
        return shown(rollout, status.HTTP_201_CREATED)


class RolloutDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses=s.RolloutSerializer,
        tags=["rollouts"],
        summary="One rollout: its state, each wave's clusters and gate figures, the halt reason",
    )
    def get(self, request, pk):
        return shown(get_object_or_404(Rollout, pk=pk))


class RolloutStart(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=None,
        responses={200: s.RolloutSerializer},
        tags=["rollouts"],
        summary="Start a planned rollout (a worker runs it; follow it with GET)",
    )
    def post(self, request, pk):
        return shown(services.start(get_object_or_404(Rollout, pk=pk), actor=Actor.of_request(request)))


class RolloutAbort(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=None,
        responses={200: s.RolloutSerializer},
        tags=["rollouts"],
        summary="Abort: a planned rollout ends; a running or halted one rolls back its waves, newest first",
    )
    def post(self, request, pk):
        return shown(services.abort(get_object_or_404(Rollout, pk=pk), actor=Actor.of_request(request)))


class RolloutHalt(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.RolloutHaltInput,
        responses={200: s.RolloutSerializer},
        tags=["rollouts"],
        summary="Halt a running rollout, saying why: the wave baking now fails its gate with that reason "
        "and is rolled back (as a gate's halt); between waves it stops before the next",
    )
    def post(self, request, pk):
        data = body(s.RolloutHaltInput, request)
        return shown(
            services.halt(get_object_or_404(Rollout, pk=pk), actor=Actor.of_request(request), reason=data["reason"])
        )


class RolloutPause(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=None,
        responses={200: s.RolloutSerializer},
        tags=["rollouts"],
        summary="Pause a running rollout: the wave under way ends its apply and bake, the next waits",
    )
    def post(self, request, pk):
        return shown(services.pause(get_object_or_404(Rollout, pk=pk), actor=Actor.of_request(request)))


class RolloutResume(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=None,
        responses={200: s.RolloutSerializer},
        tags=["rollouts"],
        summary="Resume a paused rollout (a worker goes on with its next wave)",
    )
    def post(self, request, pk):
        return shown(services.resume(get_object_or_404(Rollout, pk=pk), actor=Actor.of_request(request)))
