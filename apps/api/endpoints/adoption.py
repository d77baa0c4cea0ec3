"""Adopt a ProxySQL node: preview (read the node, nothing saved) and confirm (all of it or nothing), through the
adoption service the page and the command line use (apps/configuration/adoption.py), with the adopt form's rules."""

from dataclasses import asdict

from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.response import Response

from apps.accounts.roles import OPERATOR
from apps.audit.actor import Actor
from apps.configuration import adoption as adopt
from apps.fleet.forms import AdoptForm

from .. import serializers as s
from ..base import ApiView, body, form_errors
from ..errors import Refused


def _ask(data):
    """The body (its types checked) checked by the adopt form: the keyword arguments of adopt.preview()."""
    form = AdoptForm(
        {
            **data,
            "cluster": data["cluster"] or "",
            "kind": data["kind"],
            "hostgroups": ",".join(map(str, data["hostgroups"])),
            "backend_hosts": " ".join(data["backend_hosts"]),
            **{
                name: "" if data[name] is None else data[name]
                for name in (
                    "writer_hostgroup",
                    "reader_hostgroup",
                    "backup_writer_hostgroup",
                    "offline_hostgroup",
                    "writer_is_also_reader",
                )
            },
        }
    )
    if not form.is_valid():
        raise form_errors(form)
    d = form.cleaned_data
    return {
        "admin_host": d["admin_host"],
        "admin_port": d["admin_port"],
        "admin_user": d["admin_user"],
        "admin_password": d["admin_password"],
        "node_name": d["node_name"],
        "cluster_name": form.cluster_name,
        "kind": d["kind"] or None,
        "roles": form.roles,
        "writer_is_also_reader": d["writer_is_also_reader"],
        "overwrite": d["overwrite"],
        "hostgroups": d["hostgroups"] or None,
        "backend_hosts": d["backend_hosts"],
    }


def _preview(request, ask):
    """adopt.preview() for a person: rate limited and audited as the page's. 400 when the node cannot be read."""
    try:
        return adopt.preview(**ask, actor=Actor.of_request(request))
    except adopt.AdoptionRefused as exc:
        raise exceptions.Throttled(wait=60, detail=str(exc)) from None
    except adopt.AdoptionError as exc:
        raise exceptions.ValidationError({"non_field_errors": [str(exc)]}) from None


def _plan(plan, backend_hosts):
    unconfirmed = [] if plan.cluster_exists else adopt.unconfirmed_backends(plan, backend_hosts)
    return s.AdoptionPlanSerializer(
        {
            **asdict(plan),
            "ok": plan.ok,
            "counts": plan.counts(),
            "unconfirmed_backends": [f"{h}:{p}" for h, p in unconfirmed],
        }
    ).data


class AdoptPreview(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.AdoptInput,
        responses=s.AdoptionPlanSerializer,
        tags=["inventory"],
        summary="Read a ProxySQL node and say what adopting it would change (nothing saved; audited, "
        "at most ADOPT_ATTEMPTS_PER_MINUTE a minute per user): the inferred kind and roles with "
        "how each was decided, the rows, the other nodes of its ProxySQL Cluster",
    )
    def post(self, request):
        ask = _ask(body(s.AdoptInput, request))
        plan, _ = _preview(request, ask)
        return Response(_plan(plan, ask["backend_hosts"]))


class AdoptConfirm(ApiView):
    roles = {"post": OPERATOR}

    @extend_schema(
        request=s.AdoptConfirmInput,
        responses={201: s.AdoptedSerializer},
        tags=["inventory"],
        summary="Adopt what the preview showed (the same body and its fingerprint): the node is read again "
        "(409 when it changed since), then it and the other nodes of its ProxySQL Cluster are "
        "written in one transaction (audited) and version 1 of a new cluster's configuration is "
        "recorded",
    )
    def post(self, request):
        data = body(s.AdoptConfirmInput, request)
        ask = _ask(data)
        # Read again with the rate limit: the credentials come with this request, as in a preview.
        plan, monitor = _preview(request, ask)
        if plan.fingerprint != data["fingerprint"]:
            raise Refused(
                "The node's configuration changed since the preview: preview again "
                f"(fingerprint now {plan.fingerprint})."
            )
        try:
            cluster, nodes, versions = adopt.confirm(
                plan,
                monitor,
                admin_user=ask["admin_user"],
                admin_password=ask["admin_password"],
                actor=Actor.of_request(request),
                peers=adopt.listed_peers(plan),
                backend_hosts=ask["backend_hosts"],
            )
        except adopt.AdoptionError as exc:
            raise Refused(str(exc)) from None
        return Response(
            {
                "cluster": cluster.pk,
                "nodes": [n.pk for n in nodes],
                "versions": [v.number if v else None for v in versions],
            },
            status=status.HTTP_201_CREATED,
        )
