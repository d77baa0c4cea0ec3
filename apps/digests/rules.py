"""A query rule made from a digest: route it to the readers, cache it, mirror it or block it, proposed as a draft
change set for the operator to review and plan (never applied from here).

The rule matches the digest exactly, by its text (match_digest '^<escaped text>$', in both ProxySQL regex
engines) or by its hash (the digest column). It goes before the first rule that catches the digest today in
the flag-0 walk (the largest free rule_id below it), else after the last rule. Routing and blocking stop the
walk (apply=1); caching and mirroring let it go on (apply=0), so the rules that route the digest still do.
"""

from apps.configuration import content as C
from apps.configuration import rule_tester, services
from apps.configuration.tables import MYSQL_QUERY_RULES, typed_row

ACTIONS = {"readers": "route to the readers", "cache": "cache", "mirror": "mirror", "block": "block"}
BY = {"text": "digest text (match_digest)", "hash": "digest hash (digest column)"}
_META = set("\\.^$|?*+()[]{}")


class RuleRefused(ValueError):
    """The rule cannot be made (a missing value, a cluster without a version): the reason, in the operator's words."""


def escape(text):
    """A digest text as a literal regex for PCRE and RE2 alike (only their metacharacters escaped)."""
    return "".join("\\" + ch if ch in _META else ch for ch in text)


def free_rule_id(content, digest):
    """The rule_id for a new rule on this digest: just before the first rule it hits today, else after the last."""
    rules = content.get(MYSQL_QUERY_RULES.name) or []
    taken = {r["rule_id"] for r in rules}
    walk = rule_tester.on_content(content, digest_text=digest.digest_text, digest=digest.digest)
    first = next((s.rule_id for s in walk.steps if s.matched), None)
    if first is not None:
        below = [n for n in range(first - 1, 0, -1) if n not in taken]
        if below:
            return below[0]
    return max(taken, default=0) + 1


def rule_for(content, digest, action, *, by="text", ttl=None, mirror_hostgroup=None, error_msg=""):
    """The mysql_query_rules row for this action on this digest (pure)."""
    if action not in ACTIONS:
        raise RuleRefused(f"unknown action {action!r}")
    if by not in BY:
        raise RuleRefused(f"unknown match {by!r}")
    row = {
        "rule_id": free_rule_id(content, digest),
        "active": 1,
        "apply": 0,
        "comment": f"{ACTIONS[action]}: digest {digest.digest} (from the digest page)",
    }
    if by == "text":
        row["match_digest"] = "^" + escape(digest.digest_text) + "$"
    else:
        row["digest"] = digest.digest
    if action == "readers":
        reader = (content.get("roles") or {}).get("reader")
        if reader is None:
            raise RuleRefused("the configuration has no reader hostgroup")
        row.update(destination_hostgroup=reader, apply=1)
    elif action == "cache":
        if not ttl or ttl < 1:
            raise RuleRefused("a cache needs a TTL of at least 1 ms")
        row["cache_ttl"] = ttl
    elif action == "mirror":
        if mirror_hostgroup is None:
            raise RuleRefused("a mirror needs the hostgroup to mirror to")
        row["mirror_hostgroup"] = mirror_hostgroup
    else:
        row.update(error_msg=error_msg or f"Query blocked by the console (digest {digest.digest})", apply=1)
    return typed_row(MYSQL_QUERY_RULES, row, strict=False)


def propose(cluster, digest, action, *, actor, **values):
    """A draft change set on the cluster's current version holding the new rule (audited); RuleRefused."""
    version = services.latest(cluster)
    if version is None:
        raise RuleRefused(f"{cluster} has no configuration version yet: adopt a node first")
    row = rule_for(version.content, digest, action, **values)
    reason = f"{ACTIONS[action]} digest {digest.digest}: {digest.digest_text[:80]}"
    try:
        return services.create_change_set(
            cluster, actor=actor, reason=reason, edits=[{"op": "upsert", "table": MYSQL_QUERY_RULES.name, "row": row}]
        )
    except (services.Refused, C.EditError) as exc:
        raise RuleRefused(str(exc)) from None
