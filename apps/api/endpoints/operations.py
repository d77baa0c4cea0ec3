"""Operations: list and follow them; plan one (switchover, drain, restore, failover, repair) and get the
plan with its guards and SQL per node; confirm, cancel, run a pending rollback (or finish) now.

Planning saves the plan (services.save_plan) and answers 201 with the operation; confirming goes through
services.confirm exactly as the browser's button does (guards, an admin's override with a reason, the
two-person rule, the cluster lock, the configuration confirm role) and hands it to a worker; a refusal is
a 409 with the service's message, audited by the service.
"""

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER
from apps.audit.actor import Actor
from apps.fleet.models import Cluster, Server
from apps.configuration import content as C
from apps.operations import (
    drain,
    record_nodes,
    repair,
    rollbacks,
    rule_settings,
    rules,
    selectors,
    services,
    switchover,
)
from apps.configuration.change_set import diff_lines
from apps.operations.choices import OperationState
from apps.operations.forms import RuleSettingsForm
from apps.operations.models import Operation

from .. import serializers as s
from ..base import ApiView, body, list_schema, page_form, paged, query


def detail(op, code=status.HTTP_200_OK):
    op = Operation.objects.select_related("cluster").prefetch_related("steps").get(pk=op.pk)
    return Response(s.OperationDetailSerializer(op).data, status=code)


def _server_of(cluster, ref, field):
    """The cluster's backend a ServerRefField names (an id, or a (host, port) pair)."""
    if isinstance(ref, int):
        server, named = Server.objects.filter(pk=ref, cluster=cluster).first(), f"#{ref}"
    else:
        server, named = Server.objects.filter(cluster=cluster, hostname=ref[0], port=ref[1]).first(), "%s:%d" % ref
    if server is None:
        raise exceptions.ValidationError({field: [f"No backend {named} in cluster {cluster.name}."]})
    return server


class OperationList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(
        s.OperationSerializer,
        s.OperationFilter,
        operation_id="operations_list",
        tags=["operations"],
        summary="Operations, newest first",
    )
    def get(self, request):
        f = query(s.OperationFilter, request)
        ops = selectors.operations(cluster=f.get("cluster"), kind=f.get("kind") or "", state=f.get("state") or "")
        fields = s.values_of(s.OperationSerializer, ["planned_by", "confirmed_by", "finished", "duration_ms"])
        return paged(self, request, ops.values(*fields, "actor", "confirmer"), rows=operation_rows)


def operation_rows(ops):
    """The list's rows, as OperationSerializer shapes them (plans left out: GET one operation for its plan)."""
    finished = set(OperationState.finished())
    out = []
    for op in ops:
        start, end = op["started_at"], op["finished_at"]
        planned_by, confirmed_by = op.pop("actor"), op.pop("confirmer")
        out.append(
            {
                **op,
                "planned_by": planned_by,
                "confirmed_by": confirmed_by,
                "finished": op["state"] in finished,
                "duration_ms": round((end - start).total_seconds() * 1000, 1) if start and end else None,
            }
        )
    return out


class OperationDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses=s.OperationDetailSerializer,
        tags=["operations"],
        summary="One operation: its plan (guards, SQL per node), its steps as they run, its outcome",
    )
    def get(self, request, pk):
        return detail(get_object_or_404(Operation, pk=pk))


class OperationConfirm(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.ConfirmInput,
        responses={200: s.OperationDetailSerializer},
        tags=["operations"],
        summary="Confirm a planned operation (then follow it with GET)",
    )
    def post(self, request, pk):
        op = get_object_or_404(Operation, pk=pk)
        data = body(s.ConfirmInput, request)
        return detail(services.confirm(op, actor=Actor.of_request(request), override_reason=data["override_reason"]))


class OperationCancel(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=None,
        responses={200: s.OperationDetailSerializer},
        tags=["operations"],
        summary="Ask a running operation to stop and roll back at its next step",
    )
    def post(self, request, pk):
        op = get_object_or_404(Operation, pk=pk)
        services.cancel(op, actor=Actor.of_request(request))
        return detail(op)


class OperationRollbackNow(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=None,
        responses={200: s.OperationDetailSerializer},
        tags=["operations"],
        summary="Run what is pending for this operation now (its rollback, state rollback_pending, or "
        "the rest of it past the point of no return, state finish_pending), node by node (each "
        "try audited); the outcomes in rollback_tries",
    )
    def post(self, request, pk):
        op = get_object_or_404(Operation, pk=pk)
        outcomes = rollbacks.run_now(op, actor=Actor.of_request(request))
        response = detail(op)
        response.data["rollback_tries"] = outcomes
        return response


class _Plan(ApiView):
    roles = {"post": OPERATOR}

    def saved(self, request, plan):
        return detail(services.save_plan(plan, actor=Actor.of_request(request)), status.HTTP_201_CREATED)


PLAN_DOC = "Plan it: the plan is read from the nodes now and saved (state planned); confirm it to run it"


class SwitchoverPlan(_Plan):
    @extend_schema(
        request=s.SwitchoverInput,
        responses={201: s.OperationDetailSerializer},
        tags=["plan"],
        summary=f"Switchover to another writer. {PLAN_DOC}",
    )
    def post(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        data = body(s.SwitchoverInput, request)
        new_writer = _server_of(cluster, data["new_writer"], "new_writer")
        return self.saved(
            request,
            switchover.plan_switchover(
                cluster,
                new_writer,
                drain_timeout_ms=data.get("drain_timeout_ms"),
                on_timeout=data["on_timeout"],
                lower_autoinc=data["lower_autoinc"],
                old_writer_to=data["old_writer_to"],
            ),
        )


class FailoverPlan(_Plan):
    @extend_schema(
        request=s.FailoverInput,
        responses={201: s.OperationDetailSerializer},
        tags=["plan"],
        summary=f"Manual failover: the failover planner, asked by an operator. {PLAN_DOC}",
    )
    def post(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        data = body(s.FailoverInput, request)
        return self.saved(
            request, rules.plan_manual_failover(cluster, _server_of(cluster, data["new_writer"], "new_writer"))
        )


class RepairPlan(_Plan):
    @extend_schema(
        request=s.RepairInput,
        responses={201: s.OperationDetailSerializer},
        tags=["plan"],
        summary=f"Repair one ProxySQL node (or all) from the inventory. {PLAN_DOC}",
    )
    def post(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        data = body(s.RepairInput, request)
        node_ids = None
        if data["node"] is not None:
            if not cluster.proxysql_nodes.filter(pk=data["node"]).exists():
                raise exceptions.ValidationError(
                    {"node": [f"No ProxySQL node #{data['node']} in cluster {cluster.name}."]}
                )
            node_ids = [data["node"]]
        return self.saved(request, repair.plan_repair(cluster, node_ids))


class DrainPlan(_Plan):
    @extend_schema(
        request=s.DrainInput,
        responses={201: s.OperationDetailSerializer},
        tags=["plan"],
        summary=f"Maintenance drain of one backend. {PLAN_DOC}",
    )
    def post(self, request, pk):
        server = get_object_or_404(Server.objects.select_related("cluster"), pk=pk)
        data = body(s.DrainInput, request)
        return self.saved(
            request,
            drain.plan_drain(
                server, drain_timeout_ms=data.get("drain_timeout_ms"), on_timeout=data["on_timeout"], note=data["note"]
            ),
        )


class RestorePlan(_Plan):
    @extend_schema(
        request=None,
        responses={201: s.OperationDetailSerializer},
        tags=["plan"],
        summary=f"Restore a backend from maintenance. {PLAN_DOC}",
    )
    def post(self, request, pk):
        server = get_object_or_404(Server.objects.select_related("cluster"), pk=pk)
        return self.saved(request, drain.plan_restore(server))


class RecordNodes(ApiView):
    roles = {"get": VIEWER, "post": ADMIN}  # every API GET is a viewer's read (apps/api/tests/test_writes.py)

    @extend_schema(
        responses=s.RecordNodesReadingSerializer,
        tags=["operations"],
        summary="What every ProxySQL node runs (mysql_servers) against the latest version: the difference "
        "to record, or why it cannot be recorded (the nodes differ, one does not answer...)",
    )
    def get(self, request, pk):
        reading = record_nodes.read(get_object_or_404(Cluster, pk=pk))
        return Response(
            s.RecordNodesReadingSerializer(
                {"version": reading.version, "refusal": reading.refusal, "lines": reading.lines}
            ).data
        )

    @extend_schema(
        request=s.RecordNodesInput,
        responses={201: s.RecordNodesAnswer},
        tags=["operations"],
        summary="Record what the nodes run as the next version, as the page does: admin, a reason, the "
        "version the difference was read against (409 when it moved or the nodes differ); "
        "nothing is written to the nodes; audited with the difference",
    )
    def post(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        data = body(s.RecordNodesInput, request)
        version = record_nodes.record_nodes(
            cluster, actor=Actor.of_request(request), reason=data["reason"], expect_version=data["version"]
        )
        lines = diff_lines(C.diff(version.parent.content, version.content))
        return Response(s.RecordNodesAnswer({"version": version, "lines": lines}).data, status=status.HTTP_201_CREATED)


class RuleSettings(ApiView):
    roles = {"get": VIEWER, "patch": OPERATOR}

    @extend_schema(
        responses=s.RuleSettingsSerializer,
        tags=["operations"],
        summary="A cluster's read-pool rules and automatic failover settings",
    )
    def get(self, request, pk):
        return Response(s.RuleSettingsSerializer(get_object_or_404(Cluster, pk=pk)).data)

    @extend_schema(
        request=s.RuleSettingsInput,
        responses=s.RuleSettingsSerializer,
        tags=["operations"],
        summary="Change the fields named, as on the cluster's rules page: operators the read-pool "
        "thresholds, admins also the rules' and failover's switches (403 naming the fields "
        "beyond the role); audited with before and after",
    )
    def patch(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        # Every field is open in the form: the role per field is rule_settings.change()'s to enforce, with its message.
        form = page_form(
            RuleSettingsForm,
            body(s.RuleSettingsInput, request),
            request=request,
            instance=cluster,
            cluster=cluster,
            action="rule settings changed",
            editable=rule_settings.FIELDS,
        )
        try:
            rule_settings.change(
                Cluster.objects.get(pk=cluster.pk),
                {f: form.cleaned_data[f] for f in rule_settings.FIELDS},
                actor=Actor.of_request(request),
            )
        except rule_settings.NotAllowed as exc:
            raise exceptions.PermissionDenied(str(exc)) from None
        return Response(s.RuleSettingsSerializer(Cluster.objects.get(pk=cluster.pk)).data)
