"""The query digest pages: top digests over a window (htmx for sort, paging and search, with real
hrefs kept), one digest's detail, and the JSON that feeds its chart. Viewer role (login is required by
the middleware; a user without a role gets 403)."""

from dataclasses import replace

from django.contrib import messages
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.roles import OPERATOR, VIEWER, has_role, require_role
from apps.audit.actor import Actor
from apps.fleet.models import Cluster
from apps.fleet.validators import whole_number

from . import analysis, explain, forms, rules, selectors
from .models import Digest


def _window(query):
    return selectors.window_for(query.start, query.end)


def _columns(query):
    return [
        {
            "key": key,
            "label": label,
            "qs": query.sort_link(key),
            "active": key == query.sort,
            "aria": ("descending" if query.descending else "ascending") if key == query.sort else "none",
        }
        for key, (_, label) in selectors.SORTS.items()
    ]


def _pager(query, page):
    links = []
    if page.has_previous:
        links += [
            {"rel": "first", "label": "« first", "qs": query.querystring(page=1)},
            {"rel": "prev", "label": "‹ previous", "qs": query.querystring(page=page.number - 1)},
        ]
    if page.has_next:
        links.append({"rel": "next", "label": "next ›", "qs": query.querystring(page=page.number + 1)})
    if page.has_next and not page.more:  # a broad search is counted up to a point: its last page is not known
        links.append({"rel": "last", "label": "last »", "qs": query.querystring(page=page.pages)})
    return links


@require_role(VIEWER)
@require_GET
def digest_list(request):
    query, notes = forms.parse(request.GET)
    window = _window(query)
    if window.snapped:
        notes.append(
            "Part of this window is older than the finest history kept: its edges were widened to "
            "the 5-minute, hourly or daily buckets still stored."
        )
    page = selectors.top_digests(window, query.filters, query.sort, query.descending, query.page, exact_total=False)
    if page.number != query.page:
        query = replace(query, page=page.number)
    context = {
        "query": query,
        "window": window,
        "page": page,
        "notes": notes,
        "list_url": request.path,
        "columns": _columns(query),
        "pager": _pager(query, page),
        "sort_label": selectors.SORTS[query.sort][1],
        "windows": forms.WINDOWS,
        "polls": selectors.poll_summary(query.filters),
    }
    if request.htmx and request.htmx.target == "digest-results":
        return TemplateResponse(request, "digests/digest_list.html#results", context)
    context["choices"] = selectors.filter_choices()
    return TemplateResponse(request, "digests/digest_list.html", context)


@require_role(VIEWER)
@require_GET
def digest_detail(request, pk):
    digest = get_object_or_404(Digest, pk=pk)
    query, notes = forms.parse(request.GET)
    return TemplateResponse(request, "digests/digest_detail.html", _detail_context(request, digest, query, notes))


def _detail_context(request, digest, query, notes):
    window = _window(query)
    breakdown = selectors.digest_breakdown(digest, window, query.filters) if window.pieces else []
    # An example's literals (values, sometimes secrets) are for operators; viewers read its digest form.
    literals = has_role(request.user, OPERATOR)
    found = analysis.examples(digest, query.filters.cluster, literals=literals)
    return {
        "digest": digest,
        "query": query,
        "window": window,
        "notes": notes,
        "windows": forms.WINDOWS,
        "breakdown": breakdown,
        "summary": selectors.digest_summary(digest, window, query.filters, breakdown),
        "back": query.querystring(),
        "rule_form": forms.DigestRuleForm(initial={"cluster": _rule_cluster(query, breakdown)}),
        "latency": analysis.latency_windows(digest, window, query.filters) if window.pieces else [],
        "examples": found,
        "routes": analysis.routes(digest, breakdown, found[0]["text"] if literals and found else ""),
    }


@require_role(OPERATOR)
@require_POST
def digest_explain(request, pk):
    """EXPLAIN an example query of this digest on a backend it is routed to (read only, time limited, audited);
    the digest page again, the plan or the reason it was not run at the top."""
    digest = get_object_or_404(Digest, pk=pk)
    query, notes = forms.parse(request.GET)
    try:
        index = int(request.POST.get("example", ""))
    except ValueError:
        index = -1
    cluster_id = whole_number(request.POST.get("cluster", ""))
    outcome = explain.explain(digest, index, cluster_id=cluster_id, actor=Actor.of_request(request))
    context = {**_detail_context(request, digest, query, notes), "explain": outcome}
    return TemplateResponse(request, "digests/digest_detail.html", context, status=200)


@require_role(VIEWER)
@require_GET
def digest_chart(request, pk):
    """Chart data of one digest: executions/s, average and max time per bucket (null = gap)."""
    digest = get_object_or_404(Digest, pk=pk)
    query, notes = forms.parse(request.GET)
    window = _window(query)
    data = selectors.chart_series(digest, window, query.filters)
    data.update(digest=digest.digest, notes=notes)
    return JsonResponse(data)


@require_role(VIEWER)
@require_GET
def rule_test(request):
    """Which query rules a digest or a typed query hits on a cluster: its current rules, and beside them a
    draft change set's (read only: nothing is sent to a node)."""
    sample, notes = forms.parse_rule_sample(request.GET)
    columns = selectors.rule_chains(sample)
    if sample.cluster is not None and (sample.query or sample.digest) and not columns:
        notes.append(f"{sample.cluster} has no configuration version yet: adopt a node first.")
    return TemplateResponse(
        request,
        "digests/rule_test.html",
        {
            "sample": sample,
            "notes": notes,
            "columns": columns,
            "clusters": Cluster.objects.order_by("name"),
            "choices": selectors.rule_test_choices(sample.cluster),
        },
    )


def _rule_cluster(query, breakdown):
    """The rule form's first cluster: the page's, else the one the digest took the most time on in the window."""
    if query.filters.cluster is not None:
        return query.filters.cluster
    own = [row["source"] for row in breakdown if row["source"] is not None and not row["mirrored"]]
    return own[0].node.cluster_id if own else None


@require_role(OPERATOR)
@require_POST
def digest_rule(request, pk):
    """A new query rule for this digest as a draft change set; the operator reviews and plans it there."""
    digest = get_object_or_404(Digest, pk=pk)
    form = forms.DigestRuleForm(request.POST)
    if not form.is_valid():
        messages.error(
            request, "The rule is not valid: " + "; ".join(f"{k}: {e}" for k, errs in form.errors.items() for e in errs)
        )
        return redirect("digests:detail", digest.pk)
    values = form.cleaned_data
    try:
        cs = rules.propose(
            values["cluster"],
            digest,
            values["action"],
            actor=Actor.of_request(request),
            by=values["by"],
            ttl=values["ttl"],
            mirror_hostgroup=values["mirror_hostgroup"],
            error_msg=values["error_msg"],
        )
    except rules.RuleRefused as exc:
        messages.error(request, f"No rule made: {exc}.")
        return redirect("digests:detail", digest.pk)
    messages.success(request, f"Draft {cs} holds the new rule: review it, test it, then plan it.")
    return redirect(cs)
