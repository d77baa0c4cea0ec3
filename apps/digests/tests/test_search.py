"""The digest search through its word index (apps/digests/search.py) finds exactly what a plain substring
filter finds, on the lab's digests and on texts the index cannot split; run on SQLite and MariaDB."""

import time

import pytest
from django.db import connection

from apps.digests import search, selectors, services
from apps.digests.models import Digest, DigestWord
from apps.digests.selectors import Filters

from .conftest import add_queries
from .factories import digest

pytestmark = pytest.mark.django_db

TERMS = [
    "orders",
    "ORDERS",
    "rders",
    "preorders",
    "sbtest",
    "sbtest1",
    "test12",
    "from sbtest",  # words, infixes, across words
    "c from",
    "id=",
    "where id",
    "between ? and",
    "k_",
    "_",
    "%",
    "100%_sure",
    "?",
    "  ",
    "s",
    "id",  # punctuation, short
    "sel",
    "select c",
    "café",
    "caf",
    "ordersxx",
    "no such query",
    "x" * 70,
    "0x00000000DEADBEEF",  # not plain, long, hash
]


def plain_filter(term):
    """What the search must find: the texts containing the term in any (ASCII) case, or the hash."""
    found = {pk for pk, text in Digest.objects.values_list("pk", "digest_text") if term.lower() in text.lower()}
    if term.lower().startswith("0x"):
        found |= set(Digest.objects.filter(digest="0x" + term[2:].upper()).values_list("pk", flat=True))
    return found


def test_the_search_finds_exactly_the_texts_containing_the_term(digest_lab, monkeypatch):
    cluster, nodes, (first, second) = digest_lab
    first.traffic.set_digests(count=2000, queries=200_000)  # the lab's texts, over its sbtest tables
    t0 = int(time.time())
    services.poll_round(nodes, now=t0)
    add_queries(first, 100_000)
    services.poll_round(nodes, now=t0 + 30)
    lab_texts = Digest.objects.count()
    assert lab_texts >= 2000
    for text in [
        "SELECT * FROM preorders WHERE id = ?",
        "SELECT k_1 FROM orders_2024 WHERE c = '100%_sure'",
        "SELECT note FROM café WHERE id = ?",  # not plain ASCII: always read
        "SELECT a\x01b FROM orders",  # a control character (MariaDB's collation ignores it)
        "SELECT " + "x" * 70 + " FROM t",
    ]:  # a word longer than the vocabulary's column
        digest(text)
    digest("SELECT 1 FROM t", h="0x00000000DEADBEEF")

    indexed = services.rollup_and_prune()["words_indexed"]
    assert indexed == Digest.objects.count() and not Digest.objects.filter(words_indexed=False).exists()
    assert DigestWord.objects.filter(word=search.ALWAYS_READ).exists()
    late = digest("SELECT id FROM orders_late WHERE x = ?")  # stored after the index ran: read until indexed
    assert not Digest.objects.get(pk=late.pk).words_indexed

    for term in TERMS:
        expected = plain_filter(term)
        assert selectors.search_hit_ids(term) == sorted(expected), term
    assert selectors.search_hit_ids("orders_late") == [late.pk]
    assert len(plain_filter("sbtest")) >= 1900  # broad and narrow terms both meant something
    assert len(plain_filter("preorders")) == 1

    # The page's search gives the same digests (SQLite reads the texts; MariaDB the ids from the index).
    window = selectors.window_for(t0 - 60, t0 + 60, now=t0 + 60)
    ran = {r.digest_id for r in selectors.top_digests(window, Filters(), per_page=10_000).rows}
    assert len(ran) >= 1900
    for term in ("sbtest1", "where id", "rders", "café"):
        page = selectors.top_digests(window, Filters(search=term), per_page=10_000)
        assert {r.digest_id for r in page.rows} == plain_filter(term) & ran and page.total == len(page.rows), term
    # Broad terms (in most texts), page after page: every match once, in order, the count exact.
    for term in ("SELECT", "from sbtest", "where"):
        expected, seen, number = plain_filter(term) & ran, [], 1
        assert len(expected) > len(ran) // 3, term
        while True:
            page = selectors.top_digests(window, Filters(search=term), sort="count", page=number, per_page=400)
            assert page.number == number and page.total == len(expected) and not page.more, term
            seen += [(r.count, r.digest_id) for r in page.rows]
            if not page.has_next:
                break
            number += 1
        assert number > 2 and seen == sorted(seen, reverse=True) and {i for _, i in seen} == expected, term

    # More matches than HIT_IDS_MAX: no list of ids (the query matches the texts itself).
    monkeypatch.setattr(selectors, "HIT_IDS_MAX", 10)
    assert selectors.search_hit_ids("sbtest") is None
    assert selectors.search_hit_ids("preorders") == sorted(plain_filter("preorders"))


def test_the_lower_case_copy_a_search_matches():
    """Indexed texts get their lower-case copy where a byte compare means the same as the collation: printable
    ASCII only (MariaDB's collation folds accents and ignores control characters)."""
    plain = digest("SELECT Status FROM Orders WHERE id = ?")
    accented = digest("SELECT note FROM café")
    control = digest("SELECT a\x01b FROM orders")
    assert search.index_words() == 3
    copies = dict(Digest.objects.values_list("pk", "search_text"))
    assert copies == {plain.pk: "select status from orders where id = ?", accented.pk: None, control.pk: None}
    assert selectors.search_hit_ids("STATUS from") == [plain.pk]
    assert selectors.search_hit_ids("FROM CAFE") == ([accented.pk] if connection.vendor == "mysql" else [])
    assert selectors.search_hit_ids("A\x01B from") == [control.pk]


def test_words_of_a_text():
    assert search.words_of("SELECT c FROM sbtest1 WHERE id=? /* q7 */") == {
        "select",
        "c",
        "from",
        "sbtest1",
        "where",
        "id",
        "q7",
    }
    assert search.words_of("SELECT 'é'") == {search.ALWAYS_READ}
    assert search.key_run("from SBtest1 wh") == "sbtest1" and search.key_run("id") is None
    assert search.key_run("café") is None
