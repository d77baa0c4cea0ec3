"""The fleet overview (`/` and its live fragment): what needs attention first, then every cluster, paged."""

from apps.alerts.selectors import firing_summary  # the banner: alerts firing in the fleet
from apps.fleet import tags
from apps.monitoring import overview
from apps.operations import pending_rows  # the rollback-pending banner


def _page_args(request):
    try:
        page = int(request.GET.get("page", 1))
    except ValueError:
        page = 1
    args = {"page": page, "only_attention": request.GET.get("attention") == "1"}
    if request.GET.get("tag"):
        try:
            args["tag"] = tags.parse_filter(request.GET["tag"])
        except tags.BadTag:
            pass  # shown as not understood by overview_context
    return args


def overview_context(request):
    args = _page_args(request)
    tag_text = request.GET.get("tag", "")[:200]
    tag_error = ""
    if tag_text and "tag" not in args:
        try:
            tags.parse_filter(tag_text)
        except tags.BadTag as exc:
            tag_error = str(exc)
    if "tag" in args:  # shown one way, key=value, however it was typed
        tag_text = "=".join(args["tag"])
    return {
        **overview.fleet_overview(**args),
        "pending_rollbacks": pending_rows.banner(),
        **firing_summary(),
        "tag": tag_text,
        "tag_error": tag_error,
    }
