"""Query digests: the digest page's window, filters, search, sort and pages (apps/digests/selectors.py)."""

import time

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions
from rest_framework.response import Response

from apps.accounts.roles import VIEWER
from apps.digests import forms, selectors
from apps.digests.models import Digest
from apps.fleet.models import Cluster, ProxySQLNode

from .. import serializers as s
from ..base import ApiView, query


def _window_and_filters(request):
    """(window, filters, the validated query) as the digest page reads them; unknown ids are a 400."""
    f = query(s.DigestFilter, request)
    now = int(time.time())
    if f["window"] == "custom":
        start = int(f["start"].timestamp())
        end = min(int(f["end"].timestamp()), now) if f.get("end") else now
        start = max(start, forms.EARLIEST)
        if start >= end:
            raise exceptions.ValidationError({"start": ["must be before the end (and the end is at most now)."]})
    else:
        start, end = now - forms.WINDOWS[f["window"]][1], now
    for name, model in (("cluster", Cluster), ("node", ProxySQLNode)):
        if f.get(name) is not None and not model.objects.filter(pk=f[name]).exists():
            raise exceptions.ValidationError({name: [f"No {name} #{f[name]}."]})
    filters = selectors.Filters(
        cluster=f.get("cluster"),
        node=f.get("node"),
        hostgroup=f.get("hostgroup"),
        username=f.get("user", ""),
        schemaname=f.get("schema", ""),
        search=f.get("q", ""),
    )
    return selectors.window_for(start, end), filters, f


def _window(window):
    return {"start": window.start, "end": window.end, "snapped": window.snapped}


class DigestList(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        parameters=[s.DigestFilter],
        responses=s.DigestPageSerializer,
        tags=["digests"],
        operation_id="digests_list",
        summary="Top query digests over a window, filtered, searched, sorted, paged",
    )
    def get(self, request):
        window, filters, f = _window_and_filters(request)
        page = selectors.top_digests(window, filters, f["sort"], f["dir"] == "desc", f["page"], per_page=f["page_size"])
        return Response(
            {
                "count": page.total,
                "page": page.number,
                "pages": page.pages,
                "window": _window(window),
                "mirror_note": page.mirror_note,
                "results": s.DigestRowSerializer(page.rows, many=True).data,
            }
        )


class DigestDetail(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        parameters=[s.DigestFilter],
        responses=s.DigestDetailSerializer,
        tags=["digests"],
        summary="One digest: its text and its figures per source over the window",
    )
    def get(self, request, pk):
        digest = get_object_or_404(Digest, pk=pk)
        window, filters, _ = _window_and_filters(request)
        rows = selectors.digest_breakdown(digest, window, filters) if window.pieces else []
        return Response(
            {
                "id": digest.pk,
                "digest": digest.digest,
                "text": digest.digest_text,
                "window": _window(window),
                "breakdown": [{**{k: v for k, v in r.items() if k != "source"}, **_source(r["source"])} for r in rows],
            }
        )


def _source(source):
    if source is None:
        return {"node": None}
    return {
        "node": source.node_id,
        "node_name": source.node.name,
        "cluster": source.node.cluster_id,
        "hostgroup": source.hostgroup,
        "username": source.username,
        "schemaname": source.schemaname,
        "client_address": source.client_address,
    }


class DigestHistory(ApiView):
    roles = {"get": VIEWER}

    @extend_schema(
        parameters=[s.DigestFilter],
        responses=s.DigestHistorySerializer,
        tags=["digests"],
        summary="One digest's executions/s, average and max time per bucket (null: a gap)",
    )
    def get(self, request, pk):
        digest = get_object_or_404(Digest, pk=pk)
        window, filters, _ = _window_and_filters(request)
        return Response(selectors.chart_series(digest, window, filters))
