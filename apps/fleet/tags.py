"""Tags on clusters: free key=value labels (env=prod, region=eu-west, team=payments), for the fleet page's and
the API's filters (?tag=env:prod) and the search. Short and plain: a key of letters, digits and . _ -; a value
without control characters or the separators , = (it is written as "key=value, key=value")."""

import re

from django.db import transaction
from django.db.models import Aggregate, OuterRef, Subquery, TextField, Value
from django.db.models.functions import Concat

from apps.audit.services import record

from .models import Cluster, ClusterTag
from .validators import has_invisible

KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
BAD_VALUE = re.compile(r"[\x00-\x1f\x7f-\x9f,=\u2028\u2029]")
VALUE_MAX, TAGS_MAX = 100, 20


class BadTag(ValueError):
    """The message says which tag and why, in the operator's terms."""


def check(key, value):
    """(key, value) stripped, or BadTag."""
    key, value = key.strip(), value.strip()
    if not KEY.fullmatch(key):
        raise BadTag(
            f"Tag key {key[:40]!r}: 1 to 40 letters, digits, '.', '_' or '-', starting with a letter or digit."
        )
    if not value or len(value) > VALUE_MAX or BAD_VALUE.search(value) or has_invisible(value) or value.isspace():
        raise BadTag(
            f"Tag {key}: a value of 1 to {VALUE_MAX} characters, without control characters, invisible "
            "characters, ',' or '='."
        )
    return key, value


def parse(text):
    """{key: value} from "env=prod, region=eu-west" (empty: no tags), or BadTag. "env:prod", the way the filter and
    the search were once written, is taken too (a key holds no ':'); tags are always shown as key=value."""
    pairs = []
    for part in (p for p in text.split(",") if p.strip()):
        key, sep, value = part.partition("=") if "=" in part else part.partition(":")
        if not sep:
            raise BadTag(f"{part.strip()[:40]!r}: write each tag as key=value.")
        pairs.append((key, value))
    return _collect(pairs)


def checked(mapping):
    """{key: value} from a mapping (the API's JSON object), each tag checked as parse() checks it, or BadTag."""
    if not isinstance(mapping, dict):
        raise BadTag("Tags are an object of key: value.")
    if len(mapping) > TAGS_MAX:
        raise BadTag(f"At most {TAGS_MAX} tags on a cluster.")
    for key, value in mapping.items():
        if not isinstance(value, str):
            raise BadTag(f"Tag {str(key)[:40]}: the value must be text.")
    return _collect((str(key), value) for key, value in mapping.items())


def _collect(pairs):
    tags = {}
    for key, value in pairs:
        key, value = check(key, value)
        if key in tags:
            raise BadTag(f"Tag {key} is given twice.")
        tags[key] = value
    if len(tags) > TAGS_MAX:
        raise BadTag(f"At most {TAGS_MAX} tags on a cluster.")
    return tags


def refused(cluster, error, *, actor):
    """Tags that could not be used: audited as invalid (nothing changed)."""
    record("cluster tags changed", actor=actor, cluster=cluster, outcome="invalid", details={"error": error})


def parse_filter(text):
    """(key, value) from a filter "env=prod" (or "env:prod"), or BadTag."""
    key, sep, value = text.partition("=") if "=" in text else text.partition(":")
    if not sep:
        raise BadTag(f"{text[:40]!r}: filter by tag as key=value, e.g. env=prod.")
    return check(key, value)


def tagged(clusters, key, value):
    """The clusters (a queryset) with this tag."""
    return clusters.filter(pk__in=ClusterTag.objects.filter(key=key, value=value).values("cluster_id"))


class _GroupConcat(Aggregate):
    """GROUP_CONCAT: the same name and default separator (a comma) on SQLite, MariaDB and MySQL; no tag holds a
    comma. MySQL cuts the result at group_concat_max_len (1,024 by default; MariaDB's is 1 MiB)."""

    function = "GROUP_CONCAT"
    output_field = TextField()


GROUP_CONCAT_CUT = 1024


def with_tags(clusters):
    """The clusters (a queryset) annotated with `tags_text`, their tags as "key=value,key=value", in the clusters'
    own query (the overview's query budget)."""
    text = (
        ClusterTag.objects.filter(cluster_id=OuterRef("pk"))
        .values("cluster_id")
        .annotate(text=_GroupConcat(Concat("key", Value("="), "value", output_field=TextField())))
        .values("text")
    )
    return clusters.annotate(tags_text=Subquery(text[:1], output_field=TextField()))


def from_text(text):
    """["key=value", ...] sorted, from with_tags()'s tags_text; a last tag possibly cut by the database is left out
    and the list ends with an ellipsis."""
    if not text:
        return []
    parts = text.split(",")
    cut = len(text) >= GROUP_CONCAT_CUT
    return sorted(parts[:-1] if cut else parts) + (["…"] if cut else [])


def of(cluster):
    return {t.key: t.value for t in cluster.tags.all()}


def as_text(tags):
    return ", ".join(f"{k}={v}" for k, v in sorted(tags.items()))


def set_tags(cluster, tags, *, actor):
    """Replace the cluster's tags by `tags` ({key: value}, checked by parse()); audited with before and after.
    Returns whether anything changed."""
    before = of(cluster)
    if before == tags:
        return False
    with transaction.atomic():
        Cluster.objects.select_for_update().filter(pk=cluster.pk).first()  # two editors: one after the other
        cluster.tags.all().delete()
        ClusterTag.objects.bulk_create([ClusterTag(cluster=cluster, key=k, value=v) for k, v in tags.items()])
        record(
            "cluster tags changed",
            actor=actor,
            cluster=cluster,
            target=cluster.name,
            details={"before": before, "after": tags},
        )
    return True
