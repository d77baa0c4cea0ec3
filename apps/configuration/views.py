"""Configuration pages: versions (viewers), diffs, the change set editor, files, and planning (operators).
Thin: every write is a service call (services.py); a plan becomes an Operation shown on its page."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse
from django.utils.http import content_disposition_header
from django.template.response import TemplateResponse
from django.views.decorators.http import require_POST

from apps.accounts.roles import OPERATOR, VIEWER, require_role
from apps.audit.actor import Actor
from apps.audit.services import record
from apps.fleet.models import Cluster, ProxySQLNode
from apps.pages.fragments import fragment_response
from controlplane.converters import parse_id

from . import content as C
from . import display, drift, edits, files, rule_tester, selectors, services
from .change_set import NotPlanned, diff_lines, plan_and_save, plan_draft, plan_from_file
from .forms import ReasonForm, RolesForm, RowForm, UploadForm, VariableForm
from .models import ChangeSet, ConfigVersion
from .tables import BY_NAME, TABLES, VARIABLES


def _version_or_404(cluster, number):
    return get_object_or_404(ConfigVersion, cluster=cluster, number=number)


@require_role(VIEWER)
def cluster_config(request, cluster_pk):
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    current = services.latest(cluster)
    versions = Paginator(selectors.versions(cluster), 25).get_page(request.GET.get("page"))
    drafts = selectors.change_sets(cluster, states=selectors.OPEN_STATES)[:10]
    return TemplateResponse(
        request,
        "configuration/cluster.html",
        {
            "cluster": cluster,
            "current": current,
            "versions": versions,
            "drafts": drafts,
            "tables": _tables(current.content) if current else [],
            "nodes": cluster.proxysql_nodes.order_by("pk"),
        },
    )


def _tables(content):
    """The content as (table, columns, rows) for display; secrets shown as such."""
    out = []
    for table in TABLES:
        out.append(
            {
                "name": table.name,
                "title": table.title,
                "columns": display.first_columns(table),
                "rows": display.compact_rows(table, content.get(table.name) or []),
            }
        )
    variables = [{"cells": (k, "(secret)" if C.is_secret(v) else v)} for k, v in (content.get(VARIABLES) or {}).items()]
    out.append(
        {
            "name": VARIABLES,
            "title": "Global variables",
            "columns": ("variable_name", "variable_value"),
            "rows": variables,
        }
    )
    return out


@require_role(VIEWER)
def cluster_drift(request, cluster_pk):
    """htmx partial: each node's memory, runtime and disk against the current version (drift.py), table by table."""
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    return fragment_response(
        request,
        "configuration/cluster.html#drift",
        {"cluster": cluster, "drift": drift.cluster_drift(cluster)},
        title=f"Drift of {cluster.name}: each node against the current version",
        back_url=reverse("configuration:cluster", args=[cluster.pk]),
        back_label=f"Configuration of {cluster.name}",
    )


@require_role(VIEWER)
def version_detail(request, pk):
    version = get_object_or_404(ConfigVersion.objects.select_related("cluster", "parent"), pk=pk)
    parent_diff = diff_lines(C.diff(version.parent.content, version.content)) if version.parent else None
    current = services.latest(version.cluster)
    kept = services.kept_operational(version.cluster, current, version)[1] if current.pk != version.pk else []
    return TemplateResponse(
        request,
        "configuration/version.html",
        {
            "version": version,
            "cluster": version.cluster,
            "tables": _tables(version.content),
            "parent_diff": parent_diff,
            "kept": kept,
            "others": ConfigVersion.objects.filter(cluster=version.cluster)
            .exclude(pk=version.pk)
            .values_list("number", flat=True),
            "reason_form": ReasonForm(initial={"reason": f"revert to version {version.number}"}),
        },
    )


@require_role(VIEWER)
def version_diff(request, cluster_pk):
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    try:
        a, b = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        return TemplateResponse(
            request,
            "configuration/diff.html",
            {"cluster": cluster, "error": "Choose two versions (a and b are version numbers)."},
            status=400,
        )
    va, vb = _version_or_404(cluster, a), _version_or_404(cluster, b)
    d = C.diff(va.content, vb.content)
    grouped = {}
    for line in diff_lines(d):
        grouped.setdefault(line["table"], []).append(line)
    return TemplateResponse(
        request, "configuration/diff.html", {"cluster": cluster, "a": va, "b": vb, "grouped": grouped, "empty": d.empty}
    )


@require_role(VIEWER)
def version_export(request, pk):
    version = get_object_or_404(ConfigVersion.objects.select_related("cluster"), pk=pk)
    response = HttpResponse(files.export(version), content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(True, f"{version.cluster.name}-v{version.number}.yaml")
    return response


# -- change sets -----------------------------------------------------------------------------------
@require_role(OPERATOR)
@require_POST
def change_set_new(request, cluster_pk):
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    try:
        cs = services.start_change_set(cluster, actor=Actor.of_request(request))
    except services.Refused as exc:
        messages.error(request, str(exc))
        return redirect("configuration:cluster", cluster.pk)
    return redirect(cs)


@require_role(VIEWER)
def change_set(request, pk):
    cs = get_object_or_404(ChangeSet.objects.select_related("cluster", "base", "operation"), pk=pk)
    try:
        target = services.target_of(cs)
        error = None
    except C.EditError as exc:
        target, error = cs.base.content, str(exc)
    tables = []
    for table in TABLES:
        tables.append(
            {
                "table": table,
                "columns": display.first_columns(table),
                "rows": display.compact_rows(table, target.get(table.name) or []),
            }
        )
    return TemplateResponse(
        request,
        "configuration/change_set.html",
        {
            "cs": cs,
            "cluster": cs.cluster,
            "tables": tables,
            "error": error,
            "editors": services.editors(cs),
            "edits": [C.describe(e) for e in cs.edits],
            "diff": diff_lines(C.diff(cs.base.content, target)),
            "variables": sorted(
                (k, "(secret)" if C.is_secret(v) else v) for k, v in (target.get(VARIABLES) or {}).items()
            ),
            "roles_form": RolesForm(initial=target.get("roles") or {}),
            "reason_form": ReasonForm(initial={"reason": cs.reason}),
            "variable_form": VariableForm(),
            "add_forms": {t.name: RowForm(table=t, prefix=f"add-{t.name}") for t in TABLES},
        },
    )


def _draft(pk):
    cs = get_object_or_404(ChangeSet.objects.select_related("cluster", "base"), pk=pk)
    if cs.state != ChangeSet.State.DRAFT:
        raise services.Refused("This change set is no longer a draft.")
    return cs


@require_role(OPERATOR)
def row_form(request, pk, table_name):
    """GET: the form for one row (new, or the row whose key is ?key=...); POST: validate (htmx, on every
    change) or add the edit (the save button)."""
    cs = get_object_or_404(ChangeSet.objects.select_related("cluster", "base"), pk=pk)
    table = BY_NAME.get(table_name)
    if table is None:
        return HttpResponse("unknown table", status=404)
    target = services.target_of(cs) if cs.edits else cs.base.content
    key = request.GET.getlist("key") or request.POST.getlist("key")
    existing = None
    if key:
        existing = next((r for r in target.get(table.name) or [] if [str(v) for v in table.key_of(r)] == key), None)
        if existing is None:
            return HttpResponse("no such row", status=404)
    prefix = f"row-{table.name}"
    form = RowForm(
        request.POST or None,
        table=table,
        initial=existing,
        prefix=prefix,
        regex_engine=rule_tester.regex_engine(target),
    )
    context = {"cs": cs, "table": table, "form": form, "key": key}
    if request.method == "POST":
        valid = form.is_valid()
        if valid and request.POST.get("save"):
            edit = edits.upsert(
                table,
                form.cleaned_data["row"],
                password=form.cleaned_data.get("password"),
                key=table.key_of(existing) if existing else None,
            )
            try:
                services.add_edit(_draft(pk), edit, actor=Actor.of_request(request))
            except services.NotPermitted as exc:
                raise PermissionDenied(str(exc)) from None
            except services.Refused as exc:
                form.add_error(None, str(exc))
                return TemplateResponse(
                    request, _row_form_template(request), context, status=200 if request.htmx else 400
                )
            response = HttpResponse(status=204)
            response["HX-Redirect"] = cs.get_absolute_url()
            return response if request.htmx else redirect(cs)
        # htmx swaps 2xx answers only: inline validation gets the verdict (fields untouched while the operator
        # types), the save button the whole form with its errors; a plain POST the form with 400
        if request.htmx and not request.POST.get("save"):
            return TemplateResponse(request, "configuration/change_set.html#form_check", context)
        return TemplateResponse(
            request, _row_form_template(request), context, status=200 if valid or request.htmx else 400
        )
    return TemplateResponse(request, _row_form_template(request), context)


def _row_form_template(request):
    # htmx swaps the bare form in; a plain request (a click before htmx loaded, no JavaScript) gets a whole page.
    return "configuration/change_set.html#row_form" if request.htmx else "configuration/row_form_page.html"


@require_role(OPERATOR)
@require_POST
def delete_row(request, pk, table_name):
    table = BY_NAME.get(table_name)
    if table is None:
        return HttpResponse("unknown table", status=404)
    cs = get_object_or_404(ChangeSet.objects.select_related("base"), pk=pk)
    target = services.target_of(cs)
    key = request.POST.getlist("key")
    row = next((r for r in target.get(table.name) or [] if [str(v) for v in table.key_of(r)] == key), None)
    if row is None:
        messages.error(request, "No such row.")
        return redirect(cs)
    _try(
        request,
        lambda: services.add_edit(_draft(pk), edits.delete(table, table.key_of(row)), actor=Actor.of_request(request)),
    )
    return redirect(cs)


@require_role(OPERATOR)
@require_POST
def set_variable(request, pk):
    cs = get_object_or_404(ChangeSet, pk=pk)
    form = VariableForm(request.POST)
    valid = form.is_valid()
    if request.htmx and request.POST.get("validate"):  # inline validation, on every change: the verdict only
        return TemplateResponse(request, "configuration/change_set.html#form_check", {"form": form})
    if request.htmx and not valid:  # the set button: the form again, with its errors
        return TemplateResponse(
            request, "configuration/change_set.html#variable_form", {"cs": cs, "variable_form": form}
        )
    if not valid:
        messages.error(request, "; ".join(e for errors in form.errors.values() for e in errors))
        return redirect(cs)
    edit = edits.set_variable(form.cleaned_data["name"], form.cleaned_data["value"])
    _try(request, lambda: services.add_edit(_draft(pk), edit, actor=Actor.of_request(request)))
    if request.htmx:
        response = HttpResponse(status=204)
        response["HX-Redirect"] = cs.get_absolute_url()
        return response
    return redirect(cs)


@require_role(OPERATOR)
@require_POST
def set_roles(request, pk):
    cs = get_object_or_404(ChangeSet, pk=pk)
    form = RolesForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Hostgroup roles: " + "; ".join(e for errors in form.errors.values() for e in errors))
        return redirect(cs)
    _try(
        request, lambda: services.add_edit(_draft(pk), edits.roles(form.cleaned_data), actor=Actor.of_request(request))
    )
    return redirect(cs)


@require_role(OPERATOR)
@require_POST
def remove_edit(request, pk, index):
    cs = get_object_or_404(ChangeSet, pk=pk)
    _try(request, lambda: services.remove_edit(_draft(pk), index, actor=Actor.of_request(request)))
    return redirect(cs)


@require_role(OPERATOR)
def discard(request, pk):
    """Asks first (a page, so it works without JS): only a POST with confirm=yes discards."""
    cs = get_object_or_404(ChangeSet.objects.select_related("cluster"), pk=pk)
    if request.method != "POST" or request.POST.get("confirm") != "yes":
        _try(request, lambda: services.check_editor(cs, Actor.of_request(request)))
        return TemplateResponse(request, "configuration/discard.html", {"cs": cs})
    if _try(request, lambda: services.discard(cs, actor=Actor.of_request(request))):
        return redirect("configuration:cluster", cs.cluster_id)
    return redirect(cs)


@require_role(OPERATOR)
@require_POST
def plan(request, pk):
    cs = get_object_or_404(ChangeSet.objects.select_related("cluster", "base"), pk=pk)
    form = ReasonForm(request.POST)
    if not form.is_valid() and request.POST.get("reason", "").strip():  # a reason that is no text (NUL, too long)
        messages.error(request, f"The reason: {' '.join(form.errors['reason'])}")
        return redirect(cs)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    op = _try(request, lambda: plan_draft(cs, actor=Actor.of_request(request), reason=reason))
    return redirect(op) if op else redirect(cs)


@require_role(OPERATOR)
@require_POST
def revert(request, pk):
    version = get_object_or_404(ConfigVersion.objects.select_related("cluster"), pk=pk)
    form = ReasonForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    cs = _try(
        request, lambda: services.revert_to(version.cluster, version, actor=Actor.of_request(request), reason=reason)
    )
    if cs is None:
        return redirect(version)
    op = _try(request, lambda: plan_and_save(cs, actor=Actor.of_request(request)))
    return redirect(op) if op else redirect(cs)


@require_role(OPERATOR)
@require_POST
def take_runtime(request, node_pk):
    node = get_object_or_404(ProxySQLNode.objects.select_related("cluster"), pk=node_pk)
    cs = _try(
        request,
        lambda: services.take_runtime(
            node.cluster, node, actor=Actor.of_request(request), reason=f"take {node.name}'s runtime into a new version"
        ),
    )
    if cs is None:
        return redirect("configuration:cluster", node.cluster_id)
    op = _try(request, lambda: plan_and_save(cs, actor=Actor.of_request(request)))
    return redirect(op) if op else redirect(cs)


@require_role(OPERATOR)
@require_POST
def write_back(request, cluster_pk):
    """Write the current version back: to one node (?node=pk) or to every node that differs."""
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    node = parse_id(request.POST.get("node"))
    chosen = list(cluster.proxysql_nodes.filter(pk=node)) if node is not None else []
    cs = _try(request, lambda: services.write_back(cluster, actor=Actor.of_request(request), nodes=chosen))
    if cs is None:
        return redirect("configuration:cluster", cluster.pk)
    op = _try(request, lambda: plan_and_save(cs, actor=Actor.of_request(request)))
    return redirect(op) if op else redirect(cs)


@require_role(OPERATOR)
def upload(request, cluster_pk):
    cluster = get_object_or_404(Cluster, pk=cluster_pk)
    form = UploadForm(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            op = plan_from_file(
                cluster,
                form.cleaned_data["file"],
                actor=Actor.of_request(request),
                reason=form.cleaned_data["reason"],
                expect_version=form.cleaned_data["expect_version"],
            )
            return redirect(op)
        except services.NothingToDo as exc:
            messages.success(
                request, f"Nothing to do: {cluster} already runs this file (version {exc.version.number})."
            )
            return redirect("configuration:cluster", cluster.pk)
        except NotPlanned as exc:  # the draft is kept: its page says what to do
            messages.error(request, str(exc))
            return redirect(exc.change_set)
        except services.NoReason as exc:
            form.add_error("reason", str(exc))
        except services.NotPermitted as exc:
            raise PermissionDenied(str(exc)) from None
        except services.Refused as exc:
            messages.error(request, str(exc))
    elif request.method == "POST":
        record(
            "configuration file refused",
            request=request,
            cluster=cluster,
            outcome="invalid",
            details={"errors": form.errors.get_json_data()},
        )
    return TemplateResponse(
        request, "configuration/upload.html", {"cluster": cluster, "form": form}, status=400 if form.errors else 200
    )


def _try(request, fn):
    """Run a service call; a refusal becomes a message on the page (and None), one for this user a 403."""
    try:
        return fn() or True
    except services.NotPermitted as exc:
        raise PermissionDenied(str(exc)) from None
    except services.Refused as exc:
        messages.error(request, str(exc))
        return None
