import json

from django.core.paginator import Paginator
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse

from .models import AuditEvent, Outcome


def event_list(request):
    """The basic audit list: newest first, filtered by cluster, action and outcome, paged."""
    events = AuditEvent.objects.all()
    filters = {
        "cluster": request.GET.get("cluster", "").strip(),
        "action": request.GET.get("action", "").strip(),
        "outcome": request.GET.get("outcome", "").strip(),
    }
    if filters["cluster"]:
        events = events.filter(cluster_name=filters["cluster"])
    if filters["action"]:
        events = events.filter(action__icontains=filters["action"])
    if filters["outcome"] in Outcome.values:
        events = events.filter(outcome=filters["outcome"])
    page = Paginator(events, 50).get_page(request.GET.get("page"))
    return TemplateResponse(request, "audit/event_list.html",
                            {"page": page, "filters": filters, "outcomes": Outcome.choices})


def event_detail(request, pk):
    event = get_object_or_404(AuditEvent, pk=pk)
    details_json = json.dumps(event.details, indent=2, sort_keys=True, ensure_ascii=False)
    return TemplateResponse(request, "audit/event_detail.html", {"event": event, "details_json": details_json})
