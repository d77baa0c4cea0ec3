"""Configuration versions (list, one, diff of two, export as YAML) and change sets (create from JSON edits
or a YAML file, plan, confirm, revert to a version, write back), through apps/configuration/services.py.
Planning answers the change set and its operation; confirming goes through operations.services.confirm,
which applies the cluster's config_confirm_role and the two-person rule."""

from django.core.files.uploadedfile import UploadedFile
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, inline_serializer
from rest_framework import exceptions, status
from rest_framework.response import Response

from apps.accounts.roles import OPERATOR, VIEWER
from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import files, selectors, services
from apps.configuration.change_set import diff_lines, plan_and_save, plan_draft
from apps.configuration.models import ChangeSet, ConfigVersion
from apps.fleet.models import Cluster
from apps.operations import services as operations

from .. import serializers as s
from ..base import ApiView, body, list_schema, paged, query
from .operations import detail as operation_detail

Planned = inline_serializer(
    "PlannedChangeSet", {"change_set": s.ChangeSetDetailSerializer(), "operation": s.OperationDetailSerializer()}
)


def planned(cs, op):
    cs = ChangeSet.objects.select_related("base", "result").get(pk=cs.pk)
    return Response(
        {"change_set": s.ChangeSetDetailSerializer(cs).data, "operation": operation_detail(op).data},
        status=status.HTTP_201_CREATED,
    )


class VersionList(ApiView):
    roles = {"get": VIEWER}

    @list_schema(
        s.VersionSerializer,
        operation_id="config_versions_list",
        tags=["configuration"],
        summary="A cluster's configuration versions, newest first",
    )
    def get(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        return paged(self, request, selectors.versions(cluster), s.VersionSerializer)


class VersionDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(responses=s.VersionDetailSerializer, tags=["configuration"], summary="One version, whole")
    def get(self, request, pk):
        return Response(
            s.VersionDetailSerializer(get_object_or_404(ConfigVersion.objects.select_related("parent"), pk=pk)).data
        )


class VersionExport(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses={(200, "application/yaml"): OpenApiResponse(OpenApiTypes.STR)},
        tags=["configuration"],
        summary="One version as the YAML file `manage.py config export` writes",
    )
    def get(self, request, pk):
        version = get_object_or_404(ConfigVersion.objects.select_related("cluster"), pk=pk)
        return HttpResponse(files.export(version), content_type="application/yaml; charset=utf-8")


class VersionDiff(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        parameters=[s.DiffFilter],
        responses=s.DiffSerializer,
        tags=["configuration"],
        summary="What changed from version a to version b, table by table, field by field",
    )
    def get(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        f = query(s.DiffFilter, request)
        va = get_object_or_404(ConfigVersion, cluster=cluster, number=f["a"])
        vb = get_object_or_404(ConfigVersion, cluster=cluster, number=f["b"])
        d = C.diff(va.content, vb.content)
        return Response({"a": va.number, "b": vb.number, "empty": d.empty, "lines": diff_lines(d)})


class VersionRevert(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.ReasonInput,
        responses={201: Planned},
        tags=["configuration"],
        summary="Revert the cluster to this version: a change set, planned (confirm its operation)",
    )
    def post(self, request, pk):
        version = get_object_or_404(ConfigVersion.objects.select_related("cluster"), pk=pk)
        data = body(s.ReasonInput, request)
        cs = services.revert_to(version.cluster, version, actor=Actor.of_request(request), reason=data["reason"])
        return planned(cs, plan_and_save(cs, actor=Actor.of_request(request)))


class ChangeSetList(ApiView):
    roles = {"get": VIEWER, "post": OPERATOR}

    @list_schema(
        s.ChangeSetSerializer,
        s.ChangeSetFilter,
        operation_id="change_sets_list",
        tags=["configuration"],
        summary="A cluster's change sets, newest first (state=draft&state=planned: the configuration page's drafts)",
    )
    def get(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        f = query(s.ChangeSetFilter, request)
        return paged(self, request, selectors.change_sets(cluster, states=f.get("state") or ()), s.ChangeSetSerializer)

    @extend_schema(
        request=s.ChangeSetInput,
        responses={201: s.ChangeSetDetailSerializer, 200: s.NothingToDoSerializer},
        tags=["configuration"],
        summary="A new change set (a draft) from edits as JSON, or from a YAML file (JSON `file`, or a "
        'multipart upload) as desired state; 200 "nothing to do" when the file equals the current '
        "version",
    )
    def post(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        data = _with_upload(request) if _uploaded(request) else body(s.ChangeSetInput, request)
        try:
            cs = services.create_change_set(
                cluster,
                actor=Actor.of_request(request),
                reason=data["reason"],
                edits=data.get("edits"),
                file=data.get("file"),
                expect_version=data.get("expect_version"),
            )
        except services.NothingToDo as exc:
            return Response({"outcome": "nothing to do", "version": exc.version.number, "message": str(exc)})
        cs = ChangeSet.objects.select_related("base", "result").get(pk=cs.pk)
        return Response(s.ChangeSetDetailSerializer(cs).data, status=status.HTTP_201_CREATED)


def _uploaded(request):
    return isinstance(request.data.get("file") if hasattr(request.data, "get") else None, UploadedFile)


def _with_upload(request):
    """A multipart upload: the file's text (UTF-8) in place of the file."""
    try:
        text = request.data["file"].read().decode("utf-8")
    except UnicodeDecodeError:
        raise exceptions.ValidationError({"file": ["The file is not UTF-8 text."]}) from None
    fields = {
        "reason": request.data.get("reason", ""),
        "file": text,
        **({"expect_version": request.data["expect_version"]} if request.data.get("expect_version") else {}),
    }
    serializer = s.ChangeSetInput(data=fields)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class ChangeSetDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        responses=s.ChangeSetDetailSerializer,
        tags=["configuration"],
        summary="One change set: its edits and its diff against its base version",
    )
    def get(self, request, pk):
        return Response(
            s.ChangeSetDetailSerializer(
                get_object_or_404(ChangeSet.objects.select_related("base", "result"), pk=pk)
            ).data
        )


class ChangeSetPlan(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.ReasonInput,
        responses={201: Planned},
        tags=["configuration"],
        summary="Plan a draft change set: findings, diffs, SQL per node with undo, as an operation",
    )
    def post(self, request, pk):
        cs = get_object_or_404(ChangeSet.objects.select_related("cluster", "base"), pk=pk)
        data = body(s.ReasonInput, request)  # a draft's new reason: its author's or an admin's (403 otherwise)
        return planned(cs, plan_draft(cs, actor=Actor.of_request(request), reason=data["reason"]))


class ChangeSetConfirm(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.ConfirmInput,
        responses={200: s.OperationDetailSerializer},
        tags=["configuration"],
        summary="Confirm a planned change set's operation (as POST /operations/{id}/confirm/)",
    )
    def post(self, request, pk):
        cs = get_object_or_404(ChangeSet.objects.select_related("operation"), pk=pk)
        data = body(s.ConfirmInput, request)
        if cs.operation is None:
            raise services.Refused(f"This change set is {cs.state}, not planned: plan it first.")
        return operation_detail(
            operations.confirm(cs.operation, actor=Actor.of_request(request), override_reason=data["override_reason"])
        )


class WriteBack(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.WriteBackInput,
        responses={201: Planned},
        tags=["configuration"],
        summary="Write the current version back to one node, or to every node that differs: planned",
    )
    def post(self, request, pk):
        cluster = get_object_or_404(Cluster, pk=pk)
        data = body(s.WriteBackInput, request)
        chosen = []
        if data["node"] is not None:
            chosen = list(cluster.proxysql_nodes.filter(pk=data["node"]))
            if not chosen:
                raise exceptions.ValidationError(
                    {"node": [f"No ProxySQL node #{data['node']} in cluster {cluster.name}."]}
                )
        cs = services.write_back(cluster, actor=Actor.of_request(request), nodes=chosen, reason=data["reason"])
        return planned(cs, plan_and_save(cs, actor=Actor.of_request(request)))
