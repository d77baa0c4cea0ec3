"""Latest state per node in Redis: one JSON document per node, with its timestamp and last error.

The pollers (and the drift watcher, the DR channel polls) write it, each document checked against its schema
(live_doc.py). Every reader decodes it with read_typed() into a struct of its own naming the fields it reads
(the pages, /metrics, the overview, the alert rules, operations, DR, the drift watcher's stored results).
read_many() returns plain dicts; its production callers are the two that need whole documents as dicts: the
pollers, which merge a poll with their own last documents (pollers._read_prev), and the alert rules' full
judgements (evaluate.judge_clusters with full), which judge whole stored documents with the same functions that
judge the documents a poll round hands over. When Redis is down, both raise LiveUnavailable so a page can say
"live data unavailable" and fall back to history from the database.
"""

import json
import logging
import time

import msgspec
import redis
from django.conf import settings

from . import live_doc

log = logging.getLogger(__name__)

PROXYSQL, BACKEND = "proxysql", "backend"
DRIFT = "drift"  # per ProxySQL node: the drift watcher's last result (apps/configuration/drift.py)
_clients = {}


class LiveUnavailable(Exception):
    pass


def client():
    url = settings.REDIS_URL
    if url not in _clients:
        _clients[url] = redis.Redis.from_url(
            url, socket_connect_timeout=0.3, socket_timeout=0.5, health_check_interval=30
        )
    return _clients[url]


def key(kind, pk):
    return f"latest:{kind}:{pk}"


def write_many(kind, docs):
    """docs: {pk: dict}. One round trip. Each document is checked against its kind's schema (live_doc.FULL) first:
    every field declared there, every value of its type (check())."""
    if not docs:
        return
    for doc in docs.values():
        check(kind, doc)
    try:
        pipe = client().pipeline(transaction=False)
        for pk, doc in docs.items():
            # msgspec, not json.dumps: a tenth of the CPU for a ~7 kB document, at every poll. A NaN is written
            # as null (json wrote NaN, which no typed reader decodes).
            pipe.set(key(kind, pk), msgspec.json.encode(doc))
        pipe.execute()
    except redis.RedisError as exc:
        raise LiveUnavailable(str(exc)) from None


_refused = set()


def check(kind, doc):
    """The document against its kind's full schema. A mismatch is a writer's bug: with settings.LIVE_DOC_STRICT
    (the tests) it raises msgspec.ValidationError; in production it is logged (once per kind and message in a
    process) and the document is written all the same, so a poll is never lost to it."""
    try:
        msgspec.convert(doc, live_doc.FULL[kind])
    except msgspec.ValidationError as exc:
        if settings.LIVE_DOC_STRICT:
            raise
        if (kind, str(exc)) not in _refused:
            _refused.add((kind, str(exc)))
            log.error("a %s latest-state document does not match live_doc's schema (written as it is): %s", kind, exc)


def _mget(kind, pks):
    """[(pk, raw document or None)], one round trip."""
    pks = list(pks)
    if not pks:
        return []
    try:
        return list(zip(pks, client().mget([key(kind, pk) for pk in pks])))
    except redis.RedisError as exc:
        raise LiveUnavailable(str(exc)) from None


def _decode(raw):
    """A whole document as plain dicts: msgspec (a quarter of json's CPU; the pollers read their previous documents
    at every round); json for a document written with a NaN before the writers used msgspec."""
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return json.loads(raw)


def read_many(kind, pks):
    """{pk: doc (a dict) or None}. One round trip. The whole documents, untyped: for the pollers' merge and the alert
    rules' full judgements; other readers use read_typed()."""
    if settings.LIVE_DOC_STRICT and kind in live_doc.FULL:
        return {pk: (CheckedDoc(kind, _decode(v)) if v else None) for pk, v in _mget(kind, pks)}
    return {pk: (_decode(v) if v else None) for pk, v in _mget(kind, pks)}


class CheckedDoc(dict):
    """A document as read in the tests (LIVE_DOC_STRICT): reading a field its kind's schema does not declare fails,
    so a module that reads a document as a plain dict cannot read a field no writer writes (a typo, a renamed or
    dropped field) without its tests failing. Production reads plain dicts."""

    def __init__(self, kind, doc):
        super().__init__(doc)
        self.kind = kind

    def _declared(self, name):
        if name not in live_doc.FULL[self.kind].__struct_fields__:
            raise AssertionError(
                f"a {self.kind} latest-state document has no field {name!r}: "
                f"live_doc.{live_doc.FULL[self.kind].__name__} does not declare it"
            )

    def __getitem__(self, name):
        self._declared(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        self._declared(name)
        return super().get(name, default)

    def __contains__(self, name):
        self._declared(name)
        return super().__contains__(name)


def read_typed(kind, pks, struct):
    """{pk: struct or None}: the documents decoded into a reader's msgspec struct, which names the fields it reads
    (the decoder skips the rest; test_live_doc.py checks them against live_doc's full schema). A document that
    does not decode is None, as if not polled. One round trip."""
    decode = _decoder(struct).decode
    out = {}
    for pk, raw in _mget(kind, pks):
        try:
            out[pk] = decode(raw) if raw else None
        except (msgspec.DecodeError, msgspec.ValidationError):
            out[pk] = None
    return out


_decoders = {}


def _decoder(struct):
    if struct not in _decoders:
        _decoders[struct] = msgspec.json.Decoder(struct)
    return _decoders[struct]


def read_one(kind, pk):
    return read_many(kind, [pk])[pk]


def age_seconds(doc, now=None):
    if not doc or "ts" not in doc:
        return None
    return max(0.0, (now or time.time()) - doc["ts"])
