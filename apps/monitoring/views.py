"""Monitoring pages and their live fragments, and one JSON view per chart. Viewer-level (login is required by
middleware, the viewer role by each view); nothing here changes state but the kill of a client session (an operator's,
confirmed, audited: sessions.py). /metrics (Prometheus) is the exception: outside the login, with its own check
(scrape_access.py). The fleet overview, node, cluster and backend pages are the fleet app's; their monitoring sections
are partials of templates/monitoring/*.html refreshed by the views below."""

import gzip
import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_not_required
from django.db import DatabaseError
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_http_methods
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from apps.accounts.roles import OPERATOR, VIEWER, has_role, require_role
from apps.audit.actor import Actor
from apps.clients.wire import ClientError
from apps.configuration.rule_tester import normalise
from apps.fleet.forms import backend_filter
from apps.fleet.models import Cluster, ProxySQLNode, Server

from apps.pages import fleet as fleet_pages
from apps.pages import metrics as metrics_page
from apps.pages import node as node_pages
from apps.pages import search

from . import charts, exporter, live, scrape_access, selectors, sessions


@require_role(VIEWER)
@require_GET
def overview_live(request):
    return TemplateResponse(request, "monitoring/overview.html#live", fleet_pages.overview_context(request))


def _node(pk):
    return get_object_or_404(ProxySQLNode.objects.select_related("cluster"), pk=pk)


@require_role(VIEWER)
@require_GET
def proxysql_pool(request, pk):
    """Live fragment: the node's state and connection pool from its last poll."""
    return TemplateResponse(request, "monitoring/proxysql.html#pool", node_pages.proxysql_context(_node(pk)))


@require_role(VIEWER)
@require_GET
def proxysql_mirror(request, pk):
    """Live fragment: the mirror panel."""
    return TemplateResponse(request, "monitoring/proxysql.html#mirror", node_pages.proxysql_context(_node(pk)))


@require_role(VIEWER)
@require_GET
def proxysql_query_stats(request, pk):
    """Live fragment: users against their limit, sessions by command, backend errors, command counters (polled)."""
    return TemplateResponse(request, "monitoring/proxysql.html#query_stats", selectors.proxysql_query_stats(_node(pk)))


@require_role(VIEWER)
@require_GET
def cluster_query_stats(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    return TemplateResponse(request, "monitoring/cluster.html#query_stats", selectors.cluster_query_stats(cluster))


@require_role(VIEWER)
@require_GET
def proxysql_sessions(request, pk):
    """Fragment: the node's client sessions (stats_mysql_processlist), read from it now, on demand."""
    node = _node(pk)
    sort, text = request.GET.get("sort", "time"), request.GET.get("q", "")[:200]
    hide_sleep = request.GET.get("hide_sleep") == "1"
    # A query's literals (values, sometimes secrets) are for operators: viewers read, and filter on, its digest.
    shown = None if has_role(request.user, OPERATOR) else digest_form
    found = sessions.live_sessions(node, sort=sort, text=text, hide_sleep=hide_sleep, query_text=shown)
    return TemplateResponse(
        request,
        "monitoring/proxysql.html#sessions",
        {
            "node": node,
            **found,
            "sort": sort if sort in sessions.SORTS else "time",
            "q": text,
            "hide_sleep": hide_sleep,
            "sorts": [(value, label) for value, (label, _) in sessions.SORTS.items()],
        },
    )


def digest_form(sql):
    """A client's SQL as its digest (literals as ?); a string left open (a query cut short) is cut where it opens."""
    if not sql:
        return sql
    text = normalise(sql)
    quotes = [i for i in (text.find("'"), text.find('"')) if i >= 0]
    return text[: min(quotes)] + "?…" if quotes else text


@require_role(OPERATOR)
@require_http_methods(["GET", "POST"])
def proxysql_kill_session(request, pk, session_id):
    """GET: the confirmation, naming the session as the node shows it now. POST (confirmed): KILL CONNECTION."""
    node = _node(pk)
    back = node.get_absolute_url() + "#messages"  # the outcome first: the flash sits at the top of the page
    try:
        row = sessions.read_session(node, session_id)
    except ClientError as exc:
        messages.error(request, f"The node did not answer: {exc}")
        return redirect(back)
    if request.method == "POST":
        expected = {k: request.POST.get(k, "") for k in ("user", "cli_host", "cli_port")}
        if request.POST.get("confirm") != "yes":
            return TemplateResponse(
                request,
                "monitoring/kill_session.html",
                {
                    "node": node,
                    "row": row,
                    "session_id": session_id,
                    "expected": expected,
                    "describe": row and sessions.describe(row),
                    "refusal": "Tick the confirmation to kill the session.",
                },
                status=400,
            )
        try:
            killed, gone = sessions.kill_session(
                node, session_id, expected, actor=Actor.of_request(request), as_digest=digest_form
            )
        except sessions.KillRefused as exc:
            messages.error(request, str(exc))
            return redirect(back)
        messages.success(
            request,
            f"Killed {sessions.describe(killed)}"
            + ("." if gone else ": it still shows in the processlist; ProxySQL closes it at its next step."),
        )
        return redirect(back)
    return TemplateResponse(
        request,
        "monitoring/kill_session.html",
        {
            "node": node,
            "row": row,
            "session_id": session_id,
            "mirror_copy": row is not None and sessions.is_mirror_copy(row),
            "mirror_refusal": sessions.MIRROR_REFUSAL,
            "expected": row and sessions.fingerprint(row),
            "describe": row and sessions.describe(row),
        },
    )


@require_role(VIEWER)
@require_GET
def server_live(request, pk):
    server = get_object_or_404(Server.objects.select_related("cluster"), pk=pk)
    return TemplateResponse(request, "monitoring/server.html#live", selectors.server_context(server))


@require_role(VIEWER)
@require_GET
def cluster_live(request, pk):
    """The cluster page's live part; its refresh carries the page's backend filter (fleet/forms.py backend_filter)."""
    cluster = get_object_or_404(Cluster, pk=pk)
    backends, filter_context = backend_filter(request.GET)
    return TemplateResponse(
        request,
        "monitoring/cluster.html#live",
        {**selectors.cluster_live(cluster, backends=backends), **filter_context},
    )


@require_role(VIEWER)
@require_GET
def cluster_sparklines(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    return TemplateResponse(request, "monitoring/cluster.html#sparklines", selectors.sparkline_context(cluster))


def _chart_end(request):
    """An optional end of the chart's window (epoch seconds), e.g. an alert's evidence around its start;
    anything unreadable or out of range is ignored (the window ends now)."""
    try:
        end = float(request.GET.get("end", ""))
    except ValueError:
        return None
    return end if 0 < end <= time.time() + 86400 else None


def _chart(request, kind, obj, name):
    try:
        data = charts.chart(kind, name, obj, request.GET.get("range", charts.DEFAULT_RANGE), now=_chart_end(request))
    except charts.UnknownChart:
        raise Http404(f"no chart named {name!r}") from None
    return JsonResponse(data)


@require_role(VIEWER)
@require_GET
def proxysql_chart(request, pk, name):
    return _chart(request, "proxysql", _node(pk), name)


@require_role(VIEWER)
@require_GET
def server_chart(request, pk, name):
    return _chart(request, "backend", get_object_or_404(Server.objects.select_related("cluster"), pk=pk), name)


@login_not_required  # Prometheus has no session: scrape_access checks a token or the address instead
@require_GET
def metrics(request):
    """`/metrics`: the fleet in the Prometheus text format (exporter.py), for a scraper let in by scrape_access."""
    refused = scrape_access.refusal(request)
    if refused is not None:
        return refused
    return _exposition_response(request, metrics_page.exposition())


@login_not_required
@require_GET
def pool_metrics(request):
    """`/metrics/pool?cluster=NAME`: the connection pool rows of one cluster's ProxySQL nodes (one scrape target per
    cluster: exporter.py says why). A failure is an HTTP error, so that Prometheus marks the target down."""
    refused = scrape_access.refusal(request)
    if refused is not None:
        return refused
    name = request.GET.get("cluster", "")
    if not name:
        return _plain(400, "Which cluster? /metrics/pool?cluster=NAME (GET /metrics/targets lists them).")
    try:
        body = exporter.pool_exposition(name)
    except exporter.UnknownCluster:
        return _plain(404, f"No cluster is named {name!r}.")
    except live.LiveUnavailable:
        return _plain(
            503,
            "Redis does not answer: the latest pool rows cannot be read (proxysql_fleet_live_up on "
            "/metrics says so too).",
        )
    except DatabaseError:
        return _plain(503, "The database does not answer (proxysql_fleet_database_up on /metrics says so too).")
    return _exposition_response(request, body)


@login_not_required
@require_GET
def metrics_targets(request):
    """`/metrics/targets`: the scrape targets for Prometheus's HTTP service discovery (http_sd_configs): /metrics and
    one /metrics/pool per cluster, at settings.METRICS_TARGET_URL (else where this request was sent)."""
    refused = scrape_access.refusal(request)
    if refused is not None:
        return refused
    scheme, address = (
        settings.METRICS_TARGET_URL.split("://", 1)
        if settings.METRICS_TARGET_URL
        else (request.scheme, request.get_host())
    )
    try:
        groups = exporter.scrape_targets(address, scheme)
    except DatabaseError:
        return _plain(503, "The database does not answer: the clusters cannot be listed.")
    response = JsonResponse(groups, safe=False)
    response["Cache-Control"] = "no-store"
    return response


def _exposition_response(request, body):
    response = HttpResponse(content_type=CONTENT_TYPE_PLAIN_0_0_4)
    if "gzip" in request.headers.get("Accept-Encoding", ""):  # Prometheus asks for it: ~20 times smaller on the wire
        body = gzip.compress(body, compresslevel=1)  # the fastest level: a few tens of ms for 10 MB
        response["Content-Encoding"] = "gzip"
    response.content = body
    response["Vary"] = "Accept-Encoding"
    response["Cache-Control"] = "no-store"
    return response


def _plain(status_code, text):
    return HttpResponse(text + "\n", status=status_code, content_type="text/plain; charset=utf-8")


ACCESS_CHECK = "apps.monitoring.scrape_access.refusal (METRICS_TOKEN or METRICS_ALLOWED_ADDRESSES)"
metrics.access_check = pool_metrics.access_check = metrics_targets.access_check = ACCESS_CHECK


@require_role(VIEWER)
@require_GET
def search_page(request):
    """The header's search across clusters, nodes, backends and digests (apps/pages/search.py)."""
    found = search.search(request.GET.get("q", ""))
    return TemplateResponse(request, "monitoring/search.html", {**found, "search_q": found["q"]})
