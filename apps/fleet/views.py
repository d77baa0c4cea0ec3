from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods

from apps.accounts.roles import OPERATOR, require_role
from apps.audit.actor import Actor
from apps.audit.services import record

from apps.configuration import adoption as adopt

from .forms import AdoptForm, parse_backend_hosts
from .secrets import decrypt, encrypt

ADOPT_SESSION_KEY = "pending_adoption"


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
        record(
            "adopt proxysql node", request=request, outcome="invalid", details={"errors": form.errors.get_json_data()}
        )
        return TemplateResponse(request, "fleet/adopt.html", {"form": form}, status=400)
    data = form.cleaned_data
    pending = {
        "admin_host": data["admin_host"],
        "admin_port": data["admin_port"],
        "admin_user": data["admin_user"],
        "admin_password": encrypt(data["admin_password"]) or "",
        "node_name": data["node_name"],
        "cluster_name": form.cluster_name,
        "kind": data.get("kind") or None,
        "roles": form.roles,
        "writer_is_also_reader": data.get("writer_is_also_reader"),
        "overwrite": data.get("overwrite", False),
        "hostgroups": data.get("hostgroups") or None,
        "backend_hosts": data.get("backend_hosts") or [],
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
    return TemplateResponse(
        request,
        "fleet/adopt_preview.html",
        {"plan": plan, "unconfirmed": [f"{h}:{p}" for h, p in unconfirmed]},
        status=status,
    )


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
    pending["backend_hosts"] = [
        list(b) for b in dict.fromkeys([tuple(b) for b in pending.get("backend_hosts") or []] + chosen)
    ]
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
    return adopt.preview(
        **{
            **{k: v for k, v in pending.items() if k != "fingerprint"},
            "admin_password": decrypt(pending["admin_password"]),
        },
        actor=Actor.of_request(request) if request is not None else None,
    )


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
        cluster, nodes, _ = adopt.confirm(
            plan,
            monitor,
            admin_user=pending["admin_user"],
            admin_password=decrypt(pending["admin_password"]),
            actor=Actor.of_request(request),
            peers=adopt.listed_peers(plan),
            backend_hosts=[tuple(b) for b in pending.get("backend_hosts") or []],
        )
    except adopt.AdoptionError as exc:
        messages.error(request, str(exc))
        return _preview_page(request, plan, pending, status=400)
    del request.session[ADOPT_SESSION_KEY]
    messages.success(request, f"Adopted {', '.join(map(str, nodes))} into cluster {cluster}.")
    return redirect(cluster)
