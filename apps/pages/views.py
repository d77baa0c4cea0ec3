"""The composite pages (issue 35 item 4): the fleet overview, a cluster, a ProxySQL node and a backend, with their
live fragments and the cluster page's forms, and the incident view (one cluster, one window, every app's story). Each mixes what several apps hold (monitoring's latest state, alerts,
DR channels, operations, configuration's drift); the apps below keep their cores, these doors only put them together.
Live reads from the nodes are selectors' (apps/monitoring/selectors.py), never a view's."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER, require_role
from apps.alerts import native_failover  # the writer moves of ProxySQL's own manager
from apps.alerts import selectors as alert_selectors  # the alert section of the cluster page
from apps.audit.actor import Actor
from apps.configuration import drift as engine
from apps.dr import selectors as dr_selectors  # the DR channels panel of the cluster page
from apps.fleet import connections, tags
from apps.fleet.forms import ConnectionsForm, TagsForm, backend_filter
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.monitoring import selectors as monitoring_selectors  # the monitoring sections of these pages
from apps.operations import pending_rows  # the rollback-pending banner
from apps.operations.choices import OperationState

from . import incident as incident_timeline
from .fleet import overview_context
from .fragments import fragment_response
from .node import proxysql_context


@require_role(VIEWER)
@require_GET
def overview(request):
    """The fleet overview (`/`): what needs attention first, then every cluster, paged (monitoring's live fragment
    refreshes it)."""
    return TemplateResponse(request, "monitoring/overview.html", overview_context(request))


@require_role(VIEWER)
def cluster_detail(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    memberships = (
        HostgroupMembership.objects.filter(server__cluster=cluster)
        .select_related("server")
        .order_by("hostgroup_id", "-weight", "server__hostname", "server__port")
    )
    roles = cluster.hostgroup_roles()
    hostgroups = {}
    for m in memberships:
        hostgroups.setdefault(
            m.hostgroup_id, {"id": m.hostgroup_id, "role": roles.get(m.hostgroup_id, "other"), "members": []}
        )["members"].append(m)
    for hg, role in roles.items():
        hostgroups.setdefault(hg, {"id": hg, "role": role, "members": []})
    backends, filter_context = backend_filter(request.GET)  # a refused value: every backend, and why
    return TemplateResponse(
        request,
        "fleet/cluster_detail.html",
        {
            "hostgroups": sorted(hostgroups.values(), key=lambda h: h["id"]),
            "native_active": cluster.active_native_hostgroups(),
            **monitoring_selectors.cluster_live(cluster, backends=backends),
            **filter_context,
            **monitoring_selectors.sparkline_context(cluster),
            **monitoring_selectors.cluster_query_stats(cluster),
            "recent_operations": cluster.operations.exclude(state=OperationState.PLANNED)[:8],
            "manager_moves": native_failover.recent_moves(cluster.pk, limit=5) if cluster.native_manager else [],
            "pending_rollbacks": pending_rows.banner(cluster),
            **alert_selectors.open_for_cluster(cluster),
            **dr_selectors.for_cluster(cluster),
            "tags": tags.of(cluster),
            "connections_form": ConnectionsForm(instance=cluster),
            "tls_ca_described": connections.describe_ca(cluster.tls_ca),
        },
    )


@require_role(ADMIN)
@require_POST
def cluster_connections(request, pk):
    """An admin sets where the cluster's credentials may go and its TLS; audited. Bad input changes nothing and
    says why, the typed values kept in the form."""
    cluster = get_object_or_404(Cluster, pk=pk)
    form = ConnectionsForm(request.POST)
    if not form.is_valid():
        connections.refused(cluster, form.errors.get_json_data(), actor=Actor.of_request(request))
        messages.error(request, "Connection settings not saved: the Connections form says why.")
        response = cluster_detail(request, pk)
        response.context_data["connections_form"] = form
        response.status_code = 400
        return response
    changed = connections.save(cluster, form.cleaned_data, actor=Actor.of_request(request))
    messages.success(
        request, f"Connection settings saved ({', '.join(changed)})." if changed else "Connection settings unchanged."
    )
    return redirect(reverse("pages:cluster", args=[cluster.pk]) + "#connections")


@require_role(OPERATOR)
@require_POST
def cluster_tags(request, pk):
    """Replace the cluster's tags ("env=prod, region=eu-west"); audited. A bad tag changes nothing and says why."""
    cluster = get_object_or_404(Cluster, pk=pk)
    form = TagsForm(request.POST)
    if not form.is_valid():
        error = " ".join(form.errors["tags"]) if "tags" in form.errors else "Tags not understood."
        tags.refused(cluster, error, actor=Actor.of_request(request))
        messages.error(request, f"Tags not saved: {error}")
        return redirect(reverse("pages:cluster", args=[cluster.pk]) + "#messages")
    changed = tags.set_tags(cluster, form.cleaned_data["tags"], actor=Actor.of_request(request))
    messages.success(request, "Tags saved." if changed else "Tags unchanged.")
    return redirect(reverse("pages:cluster", args=[cluster.pk]) + "#messages")


@require_role(VIEWER)
def cluster_drift(request, pk):
    """htmx partial: drift read live from every ProxySQL node of the cluster (the configuration's engine: every
    table and variable of the current version; configuration sits above fleet, so it is imported here)."""
    cluster = get_object_or_404(Cluster, pk=pk)
    return fragment_response(
        request,
        "fleet/cluster_detail.html#drift",
        {"cluster": cluster, "drift": engine.cluster_drift(cluster)},
        title=f"Drift of {cluster.name}",
        back_url=cluster.get_absolute_url() + "#drift-section",
        back_label=f"Cluster {cluster.name}",
    )


@require_role(VIEWER)
def proxysql_node_detail(request, pk):
    node = get_object_or_404(ProxySQLNode.objects.select_related("cluster"), pk=pk)
    return TemplateResponse(request, "fleet/proxysql_node.html", proxysql_context(node))


@require_role(VIEWER)
def proxysql_node_runtime(request, pk):
    """htmx partial: the node's runtime_mysql_servers, read now."""
    node = get_object_or_404(ProxySQLNode, pk=pk)
    return TemplateResponse(
        request, "fleet/proxysql_node.html#runtime", {"node": node, **monitoring_selectors.runtime_servers_now(node)}
    )


@require_role(VIEWER)
def server_detail(request, pk):
    server = get_object_or_404(Server.objects.select_related("cluster"), pk=pk)
    return TemplateResponse(
        request,
        "fleet/server.html",
        {"memberships": server.memberships.all(), **monitoring_selectors.server_context(server)},
    )


@require_role(VIEWER)
def server_state(request, pk):
    """htmx partial: what the backend says about itself now (wsrep, read_only)."""
    server = get_object_or_404(Server.objects.select_related("cluster"), pk=pk)
    return TemplateResponse(
        request, "fleet/server.html#state", {"server": server, **monitoring_selectors.backend_state_now(server)}
    )


@require_role(VIEWER)
def incident(request):
    """One cluster, one time window: audit events, operations with their steps, and the cluster's
    monitoring history on one time axis (apps/pages/incident.py)."""
    form = incident_timeline.IncidentForm(request.GET or None)
    context = {"form": form}
    if form.is_valid() and form.cleaned_data.get("cluster"):
        context["timeline"] = incident_timeline.build(
            form.cleaned_data["cluster"], *form.window(), highlight=form.cleaned_data.get("event")
        )
        context["shift"] = form.shift_links()
    context["form"] = form.showing_window()  # From/To say the window shown, never left empty
    return TemplateResponse(request, "audit/incident.html", context)
