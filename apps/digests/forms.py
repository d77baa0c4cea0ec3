"""The digest pages' query string, read leniently: every bad value falls back to a sane default and
leaves a note for the page (never a 500, never an unbounded query)."""

import re
import time
import unicodedata
from dataclasses import dataclass, replace
from datetime import datetime, timezone as dt_timezone
from urllib.parse import urlencode

from django import forms as django_forms
from django.utils import timezone

from apps.configuration.models import ChangeSet
from apps.fleet.models import HOSTGROUP_MAX, Cluster, ProxySQLNode

from . import rules
from .models import Digest
from .selectors import DEFAULT_SORT, SORTS, Filters, RuleSample

WINDOWS = {"5m": ("last 5 minutes", 300), "1h": ("last hour", 3600), "24h": ("last 24 hours", 86400)}
DEFAULT_WINDOW = "1h"
SEARCH_MAX = 200
MAX_PAGE = 1_000_000
EARLIEST = 946684800  # 2000-01-01: nothing older can be in the history


@dataclass(frozen=True)
class DigestQuery:
    window: str = DEFAULT_WINDOW
    start: int = 0
    end: int = 0
    custom_from: str = ""  # as typed (or normalised) for the form
    custom_to: str = ""
    filters: Filters = Filters()
    sort: str = DEFAULT_SORT
    descending: bool = True
    page: int = 1

    def params(self, **changes):
        """The query-string parameters of this query (with changes), defaults left out."""
        q = replace(self, **changes) if changes else self
        f = q.filters
        items = [
            ("window", q.window if q.window != DEFAULT_WINDOW else None),
            ("from", q.custom_from if q.window == "custom" else None),
            ("to", q.custom_to if q.window == "custom" else None),
            ("cluster", f.cluster),
            ("node", f.node),
            ("hostgroup", f.hostgroup),
            ("user", f.username or None),
            ("schema", f.schemaname or None),
            ("q", f.search or None),
            ("sort", q.sort if q.sort != DEFAULT_SORT else None),
            ("dir", None if q.descending else "asc"),
            ("page", q.page if q.page != 1 else None),
        ]
        return [(k, v) for k, v in items if v is not None]

    def querystring(self, **changes):
        return urlencode(self.params(**changes))

    def sort_link(self, key):
        """Clicking a column: sort by it descending; clicking the current one flips the direction."""
        descending = not self.descending if key == self.sort else True
        return self.querystring(sort=key, descending=descending, page=1)


def _clean_text(value, limit, name, notes):
    value = "".join(ch for ch in value if unicodedata.category(ch)[0] != "C").strip()
    if len(value) > limit:
        notes.append(f"The {name} was cut to its first {limit} characters.")
        value = value[:limit]
    return value


def _int_param(raw, name, notes, low, high):
    raw = (raw or "").strip()
    if not raw:
        return None
    if not re.fullmatch(r"-?[0-9]{1,20}", raw) or not (low <= int(raw) <= high):
        notes.append(f"Ignored {name} {raw[:40]!r}: not a number between {low} and {high}.")
        return None
    return int(raw)


def _parse_time(raw):
    raw = raw.strip()
    if not raw or len(raw) > 40:
        return None
    try:
        if re.fullmatch(r"[0-9]{1,12}", raw):
            value = datetime.fromtimestamp(int(raw), tz=dt_timezone.utc)
        else:
            value = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except (ValueError, OverflowError, OSError):
        return None
    if timezone.is_naive(value):  # the pages show UTC, so a time typed without a zone is UTC
        value = value.replace(tzinfo=dt_timezone.utc)
    try:
        return int(value.timestamp())
    except (OverflowError, ValueError, OSError):
        return None


def _fmt(ts):
    return datetime.fromtimestamp(ts, tz=dt_timezone.utc).strftime("%Y-%m-%d %H:%M")


def parse(get, now=None):
    """(DigestQuery, [notes]) from request.GET."""
    now = int(now or time.time())
    notes = []

    window = get.get("window", DEFAULT_WINDOW) or DEFAULT_WINDOW
    if window not in WINDOWS and window != "custom":
        notes.append(f"Unknown window {window[:20]!r}: showing the {WINDOWS[DEFAULT_WINDOW][0]}.")
        window = DEFAULT_WINDOW
    custom_from = custom_to = ""
    if window == "custom":
        start, end = _parse_time(get.get("from", "")), _parse_time(get.get("to", ""))
        if get.get("to", "").strip() and end is None:
            notes.append("The 'to' time was not understood (use YYYY-MM-DD HH:MM): using now.")
        if end is None or end > now:
            end = now
        if start is None:
            notes.append(
                "The 'from' time is missing or not understood (use YYYY-MM-DD HH:MM): showing the hour before 'to'."
            )
            start = end - 3600
        if start >= end:
            notes.append("'from' must be before 'to': showing the hour before 'to'.")
            start = end - 3600
        if start < EARLIEST:
            start = EARLIEST
        custom_from, custom_to = _fmt(start), _fmt(end)
    else:
        start, end = now - WINDOWS[window][1], now

    cluster = _int_param(get.get("cluster"), "cluster", notes, 1, 2**63 - 1)
    if cluster is not None and not Cluster.objects.filter(pk=cluster).exists():
        notes.append(f"No cluster #{cluster}: showing every cluster.")
        cluster = None
    node = _int_param(get.get("node"), "node", notes, 1, 2**63 - 1)
    if node is not None and not ProxySQLNode.objects.filter(pk=node).exists():
        notes.append(f"No ProxySQL node #{node}: showing every node.")
        node = None
    hostgroup = _int_param(get.get("hostgroup"), "hostgroup", notes, 0, HOSTGROUP_MAX)
    filters = Filters(
        cluster=cluster,
        node=node,
        hostgroup=hostgroup,
        username=_clean_text(get.get("user", ""), 80, "user name", notes),
        schemaname=_clean_text(get.get("schema", ""), 64, "schema name", notes),
        search=_clean_text(get.get("q", ""), SEARCH_MAX, "search", notes),
    )

    sort = get.get("sort", DEFAULT_SORT) or DEFAULT_SORT
    if sort not in SORTS:
        notes.append(f"Unknown sort {sort[:20]!r}: sorted by {SORTS[DEFAULT_SORT][1]}.")
        sort = DEFAULT_SORT
    direction = get.get("dir", "desc") or "desc"
    if direction not in ("asc", "desc"):
        notes.append(f"Unknown direction {direction[:20]!r}: descending.")
        direction = "desc"
    page = _int_param(get.get("page"), "page", notes, 1, 10**18)
    if page is not None and page > MAX_PAGE:
        page = MAX_PAGE  # clamped again to the last page by the query
    return DigestQuery(
        window=window,
        start=start,
        end=end,
        custom_from=custom_from,
        custom_to=custom_to,
        filters=filters,
        sort=sort,
        descending=direction == "desc",
        page=page or 1,
    ), notes


QUERY_MAX = 10_000


def parse_rule_sample(get):
    """(RuleSample, [notes]) from request.GET, as leniently as parse()."""
    notes = []
    cluster = _int_param(get.get("cluster"), "cluster", notes, 1, 2**63 - 1)
    cluster = Cluster.objects.filter(pk=cluster).first() if cluster is not None else None
    if get.get("cluster") and cluster is None and not notes:
        notes.append("No such cluster: choose one.")
    digest = _int_param(get.get("digest"), "digest", notes, 1, 2**63 - 1)
    digest = Digest.objects.filter(pk=digest).first() if digest is not None else None
    query = get.get("query", "").replace("\r", " ").replace("\n", " ").replace("\t", " ")
    change_set = _int_param(get.get("change_set"), "change set", notes, 1, 2**63 - 1)
    if change_set is not None:
        change_set = ChangeSet.objects.filter(pk=change_set, cluster=cluster, state=ChangeSet.State.DRAFT).first()
        if change_set is None:
            notes.append("That change set is not a draft of this cluster: showing the current rules only.")
    return RuleSample(
        cluster=cluster,
        digest=digest,
        query=_clean_text(query, QUERY_MAX, "query", notes),
        username=_clean_text(get.get("user", ""), 80, "user name", notes),
        schemaname=_clean_text(get.get("schema", ""), 64, "schema name", notes),
        client_addr=_clean_text(get.get("client", ""), 64, "client address", notes),
        change_set=change_set,
    ), notes


class DigestRuleForm(django_forms.Form):
    """The digest page's "make a rule" form (rules.propose does the rest)."""

    cluster = django_forms.ModelChoiceField(queryset=Cluster.objects.order_by("name"), empty_label=None)
    action = django_forms.ChoiceField(choices=list(rules.ACTIONS.items()))
    by = django_forms.ChoiceField(choices=list(rules.BY.items()), initial="text")
    ttl = django_forms.IntegerField(required=False, min_value=1, max_value=2_147_483_647, label="cache TTL (ms)")
    mirror_hostgroup = django_forms.IntegerField(required=False, min_value=0, max_value=HOSTGROUP_MAX)
    error_msg = django_forms.CharField(required=False, max_length=500, label="error message")
