from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.debug import sensitive_post_parameters
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER, require_role
from apps.audit.actor import Actor
from apps.audit.services import record
from apps.alerts import selectors as alert_selectors  # the alert section of the cluster page
from apps.alerts import native_failover  # the writer moves of ProxySQL's own manager
from apps.clients.backend import BackendClient
from apps.clients.proxysql import ProxySQLAdmin
from apps.clients.wire import ClientError
from apps.dr import selectors as dr_selectors  # the DR channels panel of the cluster page
from apps.monitoring import selectors as monitoring_selectors  # the monitoring sections of these pages
from apps.pages import fleet as fleet_pages
from apps.pages.fragments import fragment_response
from apps.pages import node as node_pages
from apps.operations.choices import OperationState
from apps.operations import pending_rows  # the rollback-pending banner

from apps.configuration import adoption as adopt
from apps.configuration import drift as engine

from . import connections, tags
from .forms import AdoptForm, ConnectionsForm, TagsForm, parse_backend_hosts
from .models import Cluster, HostgroupMembership, ProxySQLNode, Server
from .secrets import decrypt, encrypt

ADOPT_SESSION_KEY = "pending_adoption"


@require_role(VIEWER)
@require_GET
def overview(request):
    """The fleet overview (`/`): what needs attention first, then every cluster, paged (monitoring's live fragment
    refreshes it)."""
    return TemplateResponse(request, "monitoring/overview.html", fleet_pages.overview_context(request))


@require_role(VIEWER)
def cluster_detail(request, pk):
    cluster = get_object_or_404(Cluster, pk=pk)
    memberships = (HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server")
                   .order_by("hostgroup_id", "-weight", "server__hostname", "server__port"))
    roles = cluster.hostgroup_roles()
    hostgroups = {}
    for m in memberships:
        hostgroups.setdefault(m.hostgroup_id, {"id": m.hostgroup_id, "role": roles.get(m.hostgroup_id, "other"),
                                               "members": []})["members"].append(m)
    for hg, role in roles.items():
        hostgroups.setdefault(hg, {"id": hg, "role": role, "members": []})
    return TemplateResponse(request, "fleet/cluster_detail.html", {
        "hostgroups": sorted(hostgroups.values(), key=lambda h: h["id"]),
        "native_active": cluster.active_native_hostgroups(),
        **monitoring_selectors.cluster_live(cluster), **monitoring_selectors.sparkline_context(cluster),
        **monitoring_selectors.cluster_query_stats(cluster),
        "recent_operations": cluster.operations.exclude(state=OperationState.PLANNED)[:8],
        "manager_moves": native_failover.recent_moves(cluster.pk, limit=5) if cluster.native_manager else [],
        "pending_rollbacks": pending_rows.banner(cluster),
        **alert_selectors.open_for_cluster(cluster),
        **dr_selectors.for_cluster(cluster),
        "tags": tags.of(cluster),
        "connections_form": ConnectionsForm(instance=cluster), "tls_ca_described": connections.describe_ca(cluster.tls_ca),
    })


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
    messages.success(request, f"Connection settings saved ({', '.join(changed)})." if changed
                     else "Connection settings unchanged.")
    return redirect(reverse("fleet:cluster", args=[cluster.pk]) + "#connections")


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
        return redirect(reverse("fleet:cluster", args=[cluster.pk]) + "#messages")
    changed = tags.set_tags(cluster, form.cleaned_data["tags"], actor=Actor.of_request(request))
    messages.success(request, "Tags saved." if changed else "Tags unchanged.")
    return redirect(reverse("fleet:cluster", args=[cluster.pk]) + "#messages")


@require_role(VIEWER)
def cluster_drift(request, pk):
    """htmx partial: drift read live from every ProxySQL node of the cluster (the configuration's engine: every
    table and variable of the current version; configuration sits above fleet, so it is imported here)."""
    cluster = get_object_or_404(Cluster, pk=pk)
    return fragment_response(request, "fleet/cluster_detail.html#drift",
                             {"cluster": cluster, "drift": engine.cluster_drift(cluster)},
                             title=f"Drift of {cluster.name}", back_url=cluster.get_absolute_url() + "#drift-section",
                             back_label=f"Cluster {cluster.name}")


@require_role(VIEWER)
def proxysql_node_detail(request, pk):
    node = get_object_or_404(ProxySQLNode.objects.select_related("cluster"), pk=pk)
    return TemplateResponse(request, "fleet/proxysql_node.html", node_pages.proxysql_context(node))


@require_role(VIEWER)
def proxysql_node_runtime(request, pk):
    """htmx partial: the node's runtime_mysql_servers, read now."""
    node = get_object_or_404(ProxySQLNode, pk=pk)
    rows, error = [], None
    try:
        with ProxySQLAdmin.for_node(node) as admin:
            rows = admin.servers("runtime")
    except ClientError as exc:
        error = exc
    others = [n.cluster.name for n in node.shares_with()]
    hidden = 0
    if others:  # a ProxySQL serving several clusters: this cluster's rows; the others' are on their pages
        mine = node.cluster.hostgroup_ids()
        hidden = sum(1 for r in rows if r.hostgroup_id not in mine)
        rows = [r for r in rows if r.hostgroup_id in mine]
    return TemplateResponse(request, "fleet/proxysql_node.html#runtime",
                            {"node": node, "rows": rows, "error": error, "shared_with": others, "hidden": hidden})


@require_role(VIEWER)
def server_detail(request, pk):
    server = get_object_or_404(Server.objects.select_related("cluster"), pk=pk)
    return TemplateResponse(request, "fleet/server.html", {"memberships": server.memberships.all(),
                                                           **monitoring_selectors.server_context(server)})


@require_role(VIEWER)
def server_state(request, pk):
    """htmx partial: what the backend says about itself now (wsrep, read_only)."""
    server = get_object_or_404(Server.objects.select_related("cluster"), pk=pk)
    state, error = None, None
    if not server.cluster.monitor_user:
        error = "No monitor credentials are set for this cluster (Django admin, cluster page)."
    else:
        try:
            with BackendClient.for_server(server) as client:
                state = client.state()
        except ClientError as exc:
            error = exc
    return TemplateResponse(request, "fleet/server.html#state", {"server": server, "state": state, "error": error})


@require_role(OPERATOR)
@require_http_methods(["GET", "POST"])
@sensitive_post_parameters("admin_password")
def adopt_node(request):
    """Adopt a ProxySQL node: form -> preview (read from the node, nothing saved) -> confirm (all or nothing)."""
    if request.method == "POST" and "confirm" in request.POST:
        return _adopt_confirm(request)
    if request.method == "POST" and "confirm_backends" in request.POST:
        return _adopt_confirm_backends(request)
    form = AdoptForm(request.POST or None, initial={"cluster": request.GET.get("cluster")})
    if request.method == "GET":
        return TemplateResponse(request, "fleet/adopt.html", {"form": form})
    if not form.is_valid():
        record("adopt proxysql node", request=request, outcome="invalid",
               details={"errors": form.errors.get_json_data()})
        return TemplateResponse(request, "fleet/adopt.html", {"form": form}, status=400)
    data = form.cleaned_data
    pending = {
        "admin_host": data["admin_host"], "admin_port": data["admin_port"], "admin_user": data["admin_user"],
        "admin_password": encrypt(data["admin_password"]) or "", "node_name": data["node_name"],
        "cluster_name": form.cluster_name, "kind": data.get("kind") or None, "roles": form.roles,
        "writer_is_also_reader": data.get("writer_is_also_reader"), "overwrite": data.get("overwrite", False),
        "hostgroups": data.get("hostgroups") or None, "backend_hosts": data.get("backend_hosts") or [],
    }
    try:
        plan, _ = _preview(pending, request=request)
    except adopt.AdoptionError as exc:
        form.add_error(None, str(exc))
        status = 429 if isinstance(exc, adopt.AdoptionRefused) else 400
        return TemplateResponse(request, "fleet/adopt.html", {"form": form}, status=status)
    pending["fingerprint"] = plan.fingerprint
    request.session[ADOPT_SESSION_KEY] = pending
    return _preview_page(request, plan, pending)


def _preview_page(request, plan, pending, status=200):
    """The preview, with a new cluster's backends nobody confirmed (not read; not polled after the confirm)."""
    unconfirmed = [] if plan.cluster_exists else adopt.unconfirmed_backends(plan, pending.get("backend_hosts") or [])
    return TemplateResponse(request, "fleet/adopt_preview.html", {
        "plan": plan, "unconfirmed": [f"{h}:{p}" for h, p in unconfirmed]}, status=status)


def _adopt_confirm_backends(request):
    """The person confirms some of the backends the preview left unread: preview again with them."""
    pending = request.session.get(ADOPT_SESSION_KEY)
    if not pending:
        messages.error(request, "Nothing to confirm: the preview expired. Fill in the form again.")
        return redirect("fleet:adopt")
    try:
        chosen = parse_backend_hosts(" ".join(request.POST.getlist("backend")))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("fleet:adopt")
    pending["backend_hosts"] = [list(b) for b in dict.fromkeys(
        [tuple(b) for b in pending.get("backend_hosts") or []] + chosen)]
    try:
        plan, _ = _preview(pending, request=request)
    except adopt.AdoptionError as exc:
        messages.error(request, str(exc))
        status = 429 if isinstance(exc, adopt.AdoptionRefused) else 400
        return TemplateResponse(request, "fleet/adopt.html", {"form": AdoptForm()}, status=status)
    pending["fingerprint"] = plan.fingerprint
    request.session[ADOPT_SESSION_KEY] = pending
    return _preview_page(request, plan, pending)


def _preview(pending, request=None):
    """adopt.preview() of what the session keeps (its password encrypted); with the request, audited and bounded."""
    return adopt.preview(**{**{k: v for k, v in pending.items() if k != "fingerprint"},
                            "admin_password": decrypt(pending["admin_password"])},
                         actor=Actor.of_request(request) if request is not None else None)


def _adopt_confirm(request):
    pending = request.session.get(ADOPT_SESSION_KEY)
    if not pending:
        messages.error(request, "Nothing to confirm: the preview expired. Fill in the form again.")
        return redirect("fleet:adopt")
    try:  # read again, bounded and audited as a preview (the API's confirm too): confirm only what was previewed
        plan, monitor = _preview(pending, request=request)
    except adopt.AdoptionError as exc:
        messages.error(request, str(exc))
        status = 429 if isinstance(exc, adopt.AdoptionRefused) else 400
        return TemplateResponse(request, "fleet/adopt.html", {"form": AdoptForm()}, status=status)
    if plan.fingerprint != pending["fingerprint"]:
        pending["fingerprint"] = plan.fingerprint
        request.session[ADOPT_SESSION_KEY] = pending
        messages.warning(request, "The node's configuration changed since the preview. Review this new preview.")
        return _preview_page(request, plan, pending, status=409)
    try:
        cluster, nodes, _ = adopt.confirm(plan, monitor, admin_user=pending["admin_user"],
                                          admin_password=decrypt(pending["admin_password"]),
                                          actor=Actor.of_request(request), peers=adopt.listed_peers(plan),
                                          backend_hosts=[tuple(b) for b in pending.get("backend_hosts") or []])
    except adopt.AdoptionError as exc:
        messages.error(request, str(exc))
        return _preview_page(request, plan, pending, status=400)
    del request.session[ADOPT_SESSION_KEY]
    messages.success(request, f"Adopted {', '.join(map(str, nodes))} into cluster {cluster}.")
    return redirect(cluster)
