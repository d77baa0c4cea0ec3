from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404, redirect
from urllib.parse import urlencode
from django.template.response import TemplateResponse
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER, require_role
from apps.audit.actor import Actor
from apps.audit.services import record
from apps.fleet.models import Cluster, Server
from apps.fleet.validators import whole_number
from controlplane.converters import parse_id

from apps.plans.vocabulary import Plan
from apps.plans.registry import KINDS, choices
from apps.configuration.services import Refused

from . import (
    drain,
    pending_rows,
    record_nodes as nodes_as_intent,
    repair,
    rollbacks,
    rule_settings,
    selectors,
    services,
    switchover,
)
from .forms import ConfirmForm, DrainForm, RuleSettingsForm, SwitchoverForm, silent_nodes
from .choices import OperationState
from .models import Operation


@require_role(VIEWER)
def operation_list(request):
    """Every operation, newest first; filtered by cluster, kind and state (a filter not understood is ignored)."""
    chosen = {
        "cluster": parse_id(request.GET.get("cluster", "")),
        "kind": request.GET.get("kind", ""),
        "state": request.GET.get("state", ""),
    }
    ops = selectors.operations(
        cluster=chosen["cluster"],
        kind=chosen["kind"] if chosen["kind"] in KINDS else "",
        state=chosen["state"] if chosen["state"] in OperationState.values else "",
    )
    page = Paginator(ops.select_related("cluster"), 50).get_page(request.GET.get("page"))
    kept = urlencode({k: v for k, v in chosen.items() if v not in (None, "")})
    return TemplateResponse(
        request,
        "operations/list.html",
        {
            "page": page,
            "chosen": chosen,
            "kept": kept,
            "clusters": Cluster.objects.order_by("name"),
            "kinds": choices(),
            "states": OperationState.choices,
        },
    )


@require_role(OPERATOR)
def switchover_new(request, cluster_pk):
    """The switchover form; POST builds the plan from the nodes' current state and shows it."""
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    # Where ProxySQL's manager places the writer, the inventory's rows do not say who it is: the plan reads it from the
    # nodes, and every backend is offered (choosing the writer itself is refused by the plan's target guard).
    writer = None if cluster.native_manager in switchover.NATIVE_WAYS else switchover.current_writer(cluster)
    form = SwitchoverForm(request.POST or None, cluster=cluster, exclude_server=writer.server if writer else None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        plan = switchover.plan_switchover(
            cluster,
            data["new_writer"],
            drain_timeout_ms=data["drain_timeout_ms"],
            on_timeout=data["on_timeout"],
            lower_autoinc=data["lower_autoinc"],
            old_writer_to=data["old_writer_to"],
        )
        op = services.save_plan(plan, actor=Actor.of_request(request))
        return redirect(op)
    if request.method == "POST":
        record(
            "switchover planned",
            request=request,
            cluster=cluster,
            outcome="invalid",
            details={"errors": form.errors.get_json_data()},
        )
    return TemplateResponse(
        request,
        "operations/switchover_form.html",
        {"cluster": cluster, "writer": writer, "form": form, "silent_nodes": silent_nodes(cluster)},
        status=400 if form.errors else 200,
    )


@require_role(OPERATOR)
def drain_new(request, server_pk):
    """Maintenance drain of one backend: the form, then the plan."""
    server = get_object_or_404(Server.objects.select_related("cluster"), pk=server_pk)
    form = DrainForm(request.POST or None, initial={"drain_timeout_ms": server.cluster.drain_timeout_ms})
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        plan = drain.plan_drain(
            server, drain_timeout_ms=data["drain_timeout_ms"], on_timeout=data["on_timeout"], note=data["note"]
        )
        return redirect(services.save_plan(plan, actor=Actor.of_request(request)))
    if request.method == "POST":
        record(
            "drain planned",
            request=request,
            cluster=server.cluster,
            target=str(server),
            outcome="invalid",
            details={"errors": form.errors.get_json_data()},
        )
    return TemplateResponse(
        request,
        "operations/drain_form.html",
        {"server": server, "form": form, "silent_nodes": silent_nodes(server.cluster)},
        status=400 if form.errors else 200,
    )


@require_role(OPERATOR)
@require_POST
def restore_new(request, server_pk):
    server = get_object_or_404(Server.objects.select_related("cluster"), pk=server_pk)
    return redirect(services.save_plan(drain.plan_restore(server), actor=Actor.of_request(request)))


@require_role(OPERATOR)
@require_POST
def repair_new(request, cluster_pk):
    """Repair these ProxySQL nodes (POST node=<id>, once per node) or every node of the cluster from the inventory:
    the plan."""
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    node_ids = None
    asked = request.POST.getlist("node")[:1000]
    if asked:
        wanted = {whole_number(v) for v in asked}
        node_ids = sorted(cluster.proxysql_nodes.filter(pk__in=wanted - {None}).values_list("pk", flat=True))
        if len(node_ids) != len(wanted):
            record(
                "repair planned",
                request=request,
                cluster=cluster,
                outcome="invalid",
                details={"node": ", ".join(asked)[:100], "error": "not a ProxySQL node of this cluster"},
            )
            messages.error(request, "That is not a ProxySQL node of this cluster.")
            return redirect(cluster)
    return redirect(services.save_plan(repair.plan_repair(cluster, node_ids), actor=Actor.of_request(request)))


@require_role(ADMIN)
def record_nodes(request, cluster_pk):
    """Record what the nodes run as the next version: the difference, then (POST) a reason and the version seen."""
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    error, status = "", 200
    if request.method == "POST":
        try:
            version = nodes_as_intent.record_nodes(
                cluster,
                actor=Actor.of_request(request),
                reason=request.POST.get("reason", "")[:2000],
                expect_version=whole_number(request.POST.get("version")),
            )
        except Refused as exc:
            error, status = str(exc), 403 if getattr(exc, "forbidden", False) else 400
        else:
            messages.success(request, f"Version {version.number} records what the nodes run.")
            return redirect(cluster)
    return TemplateResponse(
        request,
        "operations/record_nodes.html",
        {
            "cluster": cluster,
            "reading": nodes_as_intent.read(cluster),
            "error": error,
            "reason": request.POST.get("reason", ""),
        },
        status=status,
    )


@require_role(VIEWER)
def pending_rollbacks(request):
    """htmx partial: the banner of the finishes and rollbacks pending, for one cluster (?cluster=<id>) or the fleet."""
    cluster = (
        get_object_or_404(Cluster, pk=whole_number(request.GET["cluster"])) if request.GET.get("cluster") else None
    )
    return TemplateResponse(
        request, "operations/pending_rollbacks.html", {"pending_rollbacks": pending_rows.banner(cluster)}
    )


@require_role(OPERATOR)
@require_POST
def operation_rollback_now(request, pk):
    """Run what is pending for this operation (its rollback, or its finish past the point of no return) now, node
    by node (each try audited)."""
    op = get_object_or_404(Operation, pk=pk)
    outcomes = rollbacks.run_now(op, actor=Actor.of_request(request))
    if not outcomes:
        messages.info(request, "Nothing is pending for this operation.")
    for outcome in outcomes:
        messages.info(request, outcome)
    return redirect(op)


@require_role(VIEWER)
def operation_detail(request, pk):
    op = get_object_or_404(Operation.objects.select_related("cluster"), pk=pk)
    plan = Plan.from_json(op.plan)
    return TemplateResponse(
        request,
        "operations/detail.html",
        {
            "op": op,
            "plan": plan,
            "steps": op.steps.all(),
            "confirm_form": ConfirmForm(),
            "plan_expired": services.plan_expired(op),
            "notes": switchover.notes(plan),
            "hard_failed": [g.label for g in plan.failed_guards if not g.overridable],  # services.confirm refuses them
            "pending": op.pending_rollbacks.select_related("node", "operation", "superseded_by"),
            "second_person_needed": (
                op.cluster.two_person_rule and request.user.is_authenticated and services.is_planner(op, request.user)
            ),
        },
    )


@require_role(VIEWER)
def operation_progress(request, pk):
    """htmx partial polled while the operation runs; answers 286 (stop polling) once it has finished."""
    op = get_object_or_404(Operation.objects.select_related("cluster"), pk=pk)
    context = {
        "op": op,
        "steps": op.steps.all(),
        "sessions": selectors.sessions_holding(op)
        if op.state in (OperationState.PENDING, OperationState.RUNNING)
        else None,
        "pending": op.pending_rollbacks.select_related("node", "operation", "superseded_by"),
    }
    response = TemplateResponse(request, "operations/detail.html#progress", context)
    if op.finished and request.htmx:
        response.render()
        stop = HttpResponseStopPolling(response.content)
        return stop
    return response


@require_role(OPERATOR)
@require_POST
def operation_confirm(request, pk):
    op = get_object_or_404(Operation, pk=pk)
    form = ConfirmForm(request.POST)
    reason = form.cleaned_data["override_reason"] if form.is_valid() else ""
    try:
        services.confirm(op, actor=Actor.of_request(request), override_reason=reason)
    except services.NotAllowed as exc:
        messages.error(request, str(exc))
    return redirect(op)


@require_role(OPERATOR)
@require_POST
def operation_discard(request, pk):
    op = get_object_or_404(Operation, pk=pk)
    try:
        services.discard(op, actor=Actor.of_request(request))
        messages.info(request, "Plan discarded: nothing was sent to any node.")
    except services.NotAllowed as exc:
        messages.error(request, str(exc))
    return redirect(op)


@require_role(OPERATOR)
@require_POST
def operation_cancel(request, pk):
    op = get_object_or_404(Operation, pk=pk)
    try:
        services.cancel(op, actor=Actor.of_request(request))
        messages.info(request, "Cancel requested: the operation rolls back at its next step.")
    except services.NotAllowed as exc:
        messages.error(request, str(exc))
    return redirect(op)


@require_role(VIEWER)
def cluster_rules(request, cluster_pk, form=None, status=200):
    """A cluster's read-pool rules and automatic failover: the settings (each field for the role that may change
    it), what the rules decided recently and what each would do now (nothing is done by looking)."""
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    editable = rule_settings.editable(request.user)
    return TemplateResponse(
        request,
        "operations/rules.html",
        {
            "cluster": cluster,
            "form": form or RuleSettingsForm(instance=cluster, editable=editable),
            "operator_fields": rule_settings.OPERATOR_FIELDS,
            "now": rule_settings.would_do_now(cluster),
            "decisions": rule_settings.decisions(cluster),
        },
        status=status,
    )


@require_role(OPERATOR)
@require_POST
def cluster_rules_save(request, cluster_pk):
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    form = RuleSettingsForm(
        request.POST, instance=Cluster.objects.get(pk=cluster.pk), editable=rule_settings.editable(request.user)
    )
    if not form.is_valid():
        record(
            "rule settings changed",
            request=request,
            cluster=cluster,
            outcome="invalid",
            details={"errors": form.errors.get_json_data()},
        )
        return cluster_rules(request, cluster.pk, form=form, status=400)
    try:
        changes = rule_settings.change(
            cluster, {f: form.cleaned_data[f] for f in rule_settings.FIELDS}, actor=Actor.of_request(request)
        )
        messages.success(request, f"Saved: {', '.join(changes)}." if changes else "Nothing changed.")
    except rule_settings.NotAllowed as exc:
        messages.error(request, str(exc))
    return redirect("operations:cluster_rules", cluster.pk)
