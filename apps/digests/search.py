"""The digest search's index: the words of the digest texts, so that a text search need not read every text.

A search is a case-insensitive substring match ("contains", the database's LIKE), exact: the index only
narrows the texts that are read. A word is a maximal run of [a-z0-9_] in the lower-cased text. If a text
contains the term, every maximal run of the term's own [a-z0-9_] characters lies inside one word of the
text, so the digests having a word that contains the term's longest run are a superset of the matches;
their texts are then matched exactly. MariaDB's FULLTEXT indexes words too, but only finds words that
*start* with the term (never "orders" inside "preorders"), hence this table.

Where this reasoning needs plain text it gives up rather than miss a match: a text with any character
outside printable ASCII (accents fold under MariaDB's collation, control characters are ignored by it)
or with a word longer than the vocabulary's column gets the word '' and is always read; a term outside
printable ASCII, or whose longest run is shorter than MIN_RUN characters, is matched against every text
(a short run is in too many words to narrow anything). Texts not indexed yet (Digest.words_indexed, set
by index_words() after each digest rollup) are always read.
"""

import re
from collections.abc import Sequence

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from django.db.models.constants import OnConflict

from .models import Digest, DigestWord, DigestWordUse

WORD = re.compile(r"[a-z0-9_]+")
# a CharField's max_length: never None (the stubs type it for every field)
WORD_MAX: int = DigestWord._meta.get_field("word").max_length  # type: ignore[assignment]
ALWAYS_READ = ""  # the word of texts the index cannot split
MIN_RUN = 3
CHUNK = 900  # values per IN (...) or rows per INSERT: under SQLite's 999 variables
INDEX_BATCH = 20_000  # digests indexed per run of the rollup task (about 2 s)
LOOKUPS_MAX = 2_000  # up to this many candidates are matched by primary key; more: one scan of the texts


def _plain(text: str) -> bool:
    return all(" " <= ch <= "~" for ch in text)


def words_of(text: str) -> set[str]:
    """The words of a digest text, or {ALWAYS_READ} when the index cannot stand for it."""
    if not _plain(text):
        return {ALWAYS_READ}
    words = set(WORD.findall(text.lower()))
    if any(len(w) > WORD_MAX for w in words):
        return {ALWAYS_READ}
    return words


def search_text(text: str) -> str | None:
    """The copy of a text a search matches byte for byte (its lower case), or None: match the text through the
    database's collation (it folds accents and ignores control characters, a byte compare would not)."""
    return text.lower() if _plain(text) else None


def key_run(search: str) -> str | None:
    """The run of the term the index looks up (its longest), or None: match every text."""
    if not _plain(search):
        return None
    runs = WORD.findall(search.lower())
    best = max(runs, key=len, default="")
    return best if len(best) >= MIN_RUN else None


def index_words(limit: int = INDEX_BATCH) -> int:
    """Index the words of up to `limit` digests not indexed yet. Returns how many were indexed."""
    rows = list(Digest.objects.filter(words_indexed=False).order_by("pk").values_list("pk", "digest_text")[:limit])
    if not rows:
        return 0
    words = {pk: words_of(text) for pk, text in rows}
    vocabulary = sorted(set[str]().union(*words.values()))
    with transaction.atomic():
        ids: dict[str, int] = {}
        for i in range(0, len(vocabulary), CHUNK):
            chunk = vocabulary[i : i + CHUNK]
            ids.update(DigestWord.objects.filter(word__in=chunk).values_list("word", "pk"))
            new = [w for w in chunk if w not in ids]
            if new:
                DigestWord.objects.bulk_create([DigestWord(word=w) for w in new], ignore_conflicts=True)
                ids.update(DigestWord.objects.filter(word__in=new).values_list("word", "pk"))
        uses = [(ids[w], pk) for pk, ws in words.items() for w in ws]
        insert = connection.ops.insert_statement(on_conflict=OnConflict.IGNORE)
        with connection.cursor() as cur:
            for i in range(0, len(uses), CHUNK):
                cur.executemany(
                    f"{insert} {DigestWordUse._meta.db_table} (word_id, digest_id) VALUES (%s, %s)", uses[i : i + CHUNK]
                )
        # With its words, its lower-case copy for a binary match (where the text is plain ASCII); a few hundred
        # rows per UPDATE (one per row costs a round trip each).
        copies = [(pk, search_text(text)) for pk, text in rows if search_text(text) is not None]
        with connection.cursor() as cur:
            for i in range(0, len(copies), CHUNK // 3):
                part = copies[i : i + CHUNK // 3]
                cur.execute(
                    f"UPDATE {Digest._meta.db_table} SET search_text = CASE id"
                    f" {' '.join(['WHEN %s THEN %s'] * len(part))} END"
                    f" WHERE id IN ({','.join(['%s'] * len(part))})",
                    [v for pair in part for v in pair] + [pk for pk, _ in part],
                )
        pks = [pk for pk, _ in rows]
        for i in range(0, len(pks), CHUNK):
            Digest.objects.filter(pk__in=pks[i : i + CHUNK]).update(words_indexed=True)
    return len(rows)


def matching_ids(
    condition: str, params: Sequence[str], search: str, limit: int, digest_hash: str | None = None
) -> list[int] | None:
    """Ids of the digests `condition` (over alias d: the exact text match, or the hash `digest_hash`)
    holds for, or None when more than `limit` do. Reads only the texts the index cannot rule out."""
    table = Digest._meta.db_table
    found: set[int] = set()
    with connection.cursor() as cur:

        def read(sql: str, args: Sequence[str | int | bool]) -> bool:
            cur.execute(f"{sql} LIMIT {limit + 1 - len(found)}", args)
            found.update(r[0] for r in cur.fetchall())
            return len(found) <= limit

        if digest_hash and not read(f"SELECT d.id FROM {table} d WHERE d.digest = %s", [digest_hash]):
            return None
        lookups = min(limit, LOOKUPS_MAX)
        candidates = _candidates(cur, search, lookups)
        if candidates is None or len(candidates) > lookups:
            # No index for this term, or a term in many texts: one scan of the texts (stops past `limit`) is
            # cheaper than fetching that many texts one by one (a binary match of the lower-case copies:
            # 100,000 in less time than 7,000 lookups by primary key, measured on MariaDB).
            return sorted(found) if read(f"SELECT d.id FROM {table} d WHERE {condition}", params) else None
        # Looked up first, then matched by primary key: left to itself, MariaDB reads every text.
        size = CHUNK if connection.vendor == "sqlite" else 5000
        for i in range(0, len(candidates), size):
            chunk = candidates[i : i + size]
            if not read(
                f"SELECT d.id FROM {table} d WHERE d.id IN ({','.join(['%s'] * len(chunk))}) AND {condition}",
                [*chunk, *params],
            ):
                return None
        if not read(f"SELECT d.id FROM {table} d WHERE d.words_indexed = %s AND {condition}", [False, *params]):
            return None
    return sorted(found)


def _candidates(cur: CursorWrapper, search: str, limit: int) -> list[int] | None:
    """Ids of the indexed digests that may contain `search` (a superset; more than `limit` of them: stops
    at limit + 1, which says enough), or None: no index for it."""
    run = key_run(search)
    if run is None:
        return None
    words, uses = DigestWord._meta.db_table, DigestWordUse._meta.db_table
    cur.execute(
        f"SELECT DISTINCT u.digest_id FROM {uses} u WHERE u.word_id IN"
        f" (SELECT w.id FROM {words} w WHERE INSTR(w.word, %s) > 0 OR w.word = %s) LIMIT {int(limit) + 1}",
        [run, ALWAYS_READ],
    )
    return [r[0] for r in cur.fetchall()]
