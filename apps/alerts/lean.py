"""The part of the latest-state documents that the whole-cluster rules and the staleness checks read,
decoded with msgspec: a ProxySQL node's pool rows, counters and variables (most of its document) are
skipped by the decoder rather than parsed into dicts. A cluster judged as a whole from these; its nodes'
and backends' own rules read their whole documents, in the round that polled them. A DR channel's document as
its rules read it at a sweep (conditions.channel_observations): they judge the documents a channel poll hands
over (dicts) the same way, so these are handed over as dicts too."""

from typing import Any

import msgspec
import msgspec.structs

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


class ChannelDoc(msgspec.Struct):
    ts: float
    state: str
    replica: dict
    lag_seconds: int | None = None
    behind_trx: int | None = None


STRUCTS = {live.PROXYSQL: ProxySQLDoc, live.BACKEND: BackendDoc, "channel": ChannelDoc}  # (dr/polling.py's kind)


def read_many(kind, pks):
    """{pk: dict or None} like live.read_many, with only the fields above; one MGET."""
    return {
        pk: msgspec.structs.asdict(doc) if doc else None
        for pk, doc in live.read_typed(kind, pks, STRUCTS[kind]).items()
    }
