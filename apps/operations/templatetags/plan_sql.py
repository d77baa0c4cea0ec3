"""How a plan's SQL is shown: a node whose statements equal an earlier node's is folded into "same as", and a
REPLACE of a wide row (a query rule has 35 columns, most NULL) is shown without its NULL columns, saying how many
it leaves out. What is sent is the plan's statements unchanged; the page shows them in full one click away."""

import re

from django import template

register = template.Library()

REPLACE = re.compile(r"^REPLACE INTO (\w+) \(([\w,]+)\) VALUES \((.*)\)$", re.S)


def _literals(text):
    """The comma-separated SQL literals of a VALUES list ('...' with backslash or doubled-quote escapes, numbers,
    NULL); None when the text is not only such literals."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "'":
            j = i + 1
            while j < len(text) and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            while j + 1 < len(text) and text[j + 1] == "'":  # '' inside the string
                j = text.find("'", j + 2)
                if j < 0:
                    return None
            end = j + 1
        else:
            end = text.find(",", i)
            end = len(text) if end < 0 else end
            if "'" in text[i:end]:  # a prefixed string (_binary'...'): not read here
                return None
        out.append(text[i:end].strip())
        if end < len(text) and text[end] != ",":
            return None
        i = end + 1
    return out


@register.filter
def without_nulls(statement):
    """(shown, left_out): a REPLACE without its NULL columns and how many it left out; others as they are."""
    match = REPLACE.match(statement)
    values = _literals(match.group(3)) if match else None
    columns = match.group(2).split(",") if match else []
    if values is None or len(values) != len(columns) or "NULL" not in values:
        return statement, 0
    kept = [(c, v) for c, v in zip(columns, values) if v != "NULL"]
    shown = f"REPLACE INTO {match.group(1)} ({','.join(c for c, _ in kept)}) VALUES ({','.join(v for _, v in kept)})"
    return shown, len(columns) - len(kept)


@register.filter
def folded_nodes(nodes):
    """[(node id, spec, the earlier node's name whose statements and rollback are the same, or "")]."""
    out, seen = [], {}
    for node_id, spec in nodes.items():
        key = (tuple(spec.get("sql") or ()), tuple(spec.get("rollback") or ()))
        same = seen.get(key, "") if spec.get("sql") else ""
        seen.setdefault(key, spec.get("name"))
        out.append((node_id, spec, same))
    return out


@register.filter
def shown_statements(statements):
    """{"rows": [(shown, NULL columns left out)], "shortened": whether any statement is shown shorter than sent}."""
    rows = [without_nulls(s) for s in statements or ()]
    return {"rows": rows, "shortened": any(left for _, left in rows)}
