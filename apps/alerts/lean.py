"""The part of the latest-state documents that the whole-cluster rules and the staleness checks read,
decoded with msgspec: a ProxySQL node's pool rows, counters and variables (most of its document) are
skipped by the decoder rather than parsed into dicts. A cluster judged as a whole from these; its nodes'
and backends' own rules read their whole documents, in the round that polled them."""
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


STRUCTS = {live.PROXYSQL: ProxySQLDoc, live.BACKEND: BackendDoc}


def read_many(kind, pks):
    """{pk: dict or None} like live.read_many, with only the fields above; one MGET."""
    return {pk: msgspec.structs.asdict(doc) if doc else None
            for pk, doc in live.read_typed(kind, pks, STRUCTS[kind]).items()}
