"""Free-text search over the audit log, the same on SQLite and MariaDB.

At record() time an event's words (action, actor, cluster, target, outcome, source address and the
details JSON, keys and values) become `search_text` (lowercased) and one AuditSearchToken row per
distinct word. A word is a run between spaces and JSON punctuation ("127.0.0.1:3313", "galera-lab"),
and each of its alphanumeric parts ("127", "3313", "galera", "lab"); words shorter than MIN_TOKEN
characters are not indexed, longer ones are cut at MAX_TOKEN.

A query is split into terms (whitespace; "double quotes" keep a phrase together). An event matches
when its search_text contains every term (a LIKE). The index decides which events the LIKE looks at:
each term's longest word is looked up by prefix in the token table (a primary-key range, fast
whatever the table size) and the rarest one, if rare enough, limits the events to its entries; a
common one does not need to (see driver()). So "127.0.0.1:3313" finds exactly that text, through
the few events holding the word "127.0.0.1:3313". Terms match words and the beginnings of words,
like most search boxes: "switch" finds "switchover", "witchover" does not (unless a rarer term of
the same query lets the LIKE look at that event). A term with no indexable word (one character) is
checked by the LIKE alone.
"""

import json
import re
from collections.abc import Iterable
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet

from .redaction import shown_details
from .models import AuditEvent, AuditSearchToken

MIN_TOKEN = 2
MAX_TOKEN = 48
DRIVER_LIMIT = 5_000  # see driver(); measured: both plans cost about the same there (docs/benchmarks.md)
MAX_TOKENS_PER_EVENT = 2000  # a plan with many statements repeats words; this bound is never reached in practice
_WORDS = re.compile(r"[\s\"'`{}\[\](),;=<>|]+")
_PARTS = re.compile(r"[\W_]+")
_EDGE = ".:-/@#+*&%!?~^$\\"


def words_of(text: str) -> set[str]:
    """The distinct indexable words of a (lowercased) text."""
    out: set[str] = set()
    for word in set(_WORDS.split(text)):  # a plan repeats its statements per node: split each word once
        word = word.strip(_EDGE)
        if len(word) < MIN_TOKEN:
            continue
        out.add(word[:MAX_TOKEN])
        for part in _PARTS.split(word):
            if len(part) >= MIN_TOKEN:
                out.add(part[:MAX_TOKEN])
    return out


def search_text(
    *, action: str, actor: str, cluster_name: str, target: str, outcome: str, source_address: str | None, details: Any
) -> str:
    """What an event's search covers, lowercased. Derived from hashed fields only, the details as shown (redaction.py:
    a secret no reader sees is no search term either)."""
    details_json = json.dumps(shown_details(action, details), sort_keys=True, ensure_ascii=False, cls=DjangoJSONEncoder)
    parts = (action, actor, cluster_name, target, outcome, source_address or "", details_json)
    return "\n".join(str(p) for p in parts).lower()


def tokens_for(text: str) -> set[str]:
    words = words_of(text)
    if len(words) > MAX_TOKENS_PER_EVENT:
        words = set(sorted(words, key=lambda w: (-len(w), w))[:MAX_TOKENS_PER_EVENT])
    return words


def terms(query: str | None) -> list[str]:
    """Split a query into lowercased terms; "double quotes" keep a phrase together."""
    out: list[str] = []
    for phrase, bare in re.findall(r'"([^"]*)"|(\S+)', query or ""):
        term = (phrase or bare).strip().lower()
        if term and term not in out:
            out.append(term)
    return out[:8]  # a query of more terms is a paste, not a search; the first eight narrow enough


def key_word(term: str) -> str | None:
    """The word of a term to look up in the index: its longest (the rarest, as a rule), or None."""
    words = words_of(term)
    return max(words, key=lambda w: (len(w), w)) if words else None


def prefix_range(word: str) -> tuple[str, str]:
    """(low, high) such that low <= token < high holds for exactly the tokens starting with word."""
    return word, word[:-1] + chr(ord(word[-1]) + 1)


def _matching_tokens(word: str) -> QuerySet[AuditSearchToken]:
    low, high = prefix_range(word)
    return AuditSearchToken.objects.filter(token__gte=low, token__lt=high)


def driver(words: Iterable[str]) -> tuple[str, int] | None:
    """The word whose index entries narrow the events best, if looking it up pays: (word, capped
    count) for the word with the fewest entries when that is at most DRIVER_LIMIT, else None. Past
    that, a term is common: walking the newest events (already in order) finds a page of matches
    sooner than reading and sorting every match, so the LIKE alone does the work."""
    best: tuple[str, int] | None = None
    for word in words:
        n = _matching_tokens(word)[: DRIVER_LIMIT + 1].count()
        if best is None or n < best[1]:
            best = (word, n)
        if n == 0:
            break
    return best if best is not None and best[1] <= DRIVER_LIMIT else None


def filter_by_terms(queryset: QuerySet[AuditEvent], query: str) -> QuerySet[AuditEvent]:
    """Narrow an AuditEvent queryset to the events whose search_text contains every term of `query`."""
    found = terms(query)
    best = driver([k for k in map(key_word, found) if k])
    if best is not None:
        queryset = queryset.filter(id__in=_matching_tokens(best[0]).values("event_id"))
    for term in found:
        queryset = queryset.filter(search_text__contains=term)  # stored lowercased: a plain LIKE
    return queryset


def filter_by_target(queryset: QuerySet[AuditEvent], value: str) -> QuerySet[AuditEvent]:
    """Events whose target contains `value` (any case), through the same index: the target's words
    are in search_text too."""
    value = value.strip()
    key = key_word(value.lower())
    best = driver([key]) if key else None
    if best is not None:
        queryset = queryset.filter(id__in=_matching_tokens(best[0]).values("event_id"))
    return queryset.filter(target__icontains=value)
