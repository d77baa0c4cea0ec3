"""The part of the latest-state documents that the whole-cluster rules and the staleness checks read,
decoded with msgspec: a ProxySQL node's pool rows, counters and variables (most of its document) are
skipped by the decoder rather than parsed into dicts. A cluster judged as a whole from these; its nodes'
and backends' own rules read their whole documents, in the round that polled them."""
from typing import Any

import msgspec
import msgspec.structs
import redis

from apps.monitoring import live


class ProxySQLDoc(msgspec.Struct):
    ts: float
    ok: bool = True
    error: Any = None
    error_kind: Any = None
    error_since: Any = None
    last_ok: Any = None
    runtime_servers: list[dict] | None = None
    proxysql_cluster: dict | None = None


class BackendDoc(msgspec.Struct):
    ts: float
    ok: bool = True
    error: Any = None
    error_kind: Any = None
    error_since: Any = None
    last_ok: Any = None
    state: dict | None = None
    lag_seconds: Any = None


_decoders = {live.PROXYSQL: msgspec.json.Decoder(ProxySQLDoc), live.BACKEND: msgspec.json.Decoder(BackendDoc)}


def read_many(kind, pks):
    """{pk: dict or None} like live.read_many, with only the fields above; one MGET."""
    pks = list(pks)
    if not pks:
        return {}
    try:
        values = live.client().mget([live.key(kind, pk) for pk in pks])
    except redis.RedisError as exc:
        raise live.LiveUnavailable(str(exc)) from None
    decode = _decoders[kind].decode
    out = {}
    for pk, raw in zip(pks, values):
        try:
            out[pk] = msgspec.structs.asdict(decode(raw)) if raw else None
        except (msgspec.DecodeError, msgspec.ValidationError):
            out[pk] = None  # unreadable: judged as not polled (the overview says why)
    return out
