"""The latest-state documents in Redis (live.py), typed once: every field each writer puts in a document of its kind.

Writers: pollers.py (kinds proxysql and backend, every poll), configuration/drift.py (kind drift, the watcher),
dr/polling.py (kind channel). live.write_many() checks every document against its schema here before it writes it
(live.check: a mismatch raises in the tests, settings.LIVE_DOC_STRICT, and is logged in production).
Readers decode the JSON with msgspec into the struct that names only what they read (alerts/lean.py, overview.py,
exporter.py: decoding fewer fields is what keeps /metrics and the alert evaluation fast at fleet scale; through
live.read_typed: the node, backend and cluster pages (selectors.py), operations' rules.py and rule_settings.py,
rollbacks.py, change_set.py and forms.py, configuration/drift.py's stored results, DR's selectors.py and polling.py,
the alert rules' channel reads). Every such reader struct is listed in apps/monitoring/tests/test_live_doc.py
READERS and checked against these full schemas there (each field it reads exists here), and a document written by
the real writers decodes here with no unknown field: a writer that adds, renames or drops a field changes this
module, and a reader that reads a field nobody writes fails its test. Two callers still read whole documents as
dicts (live.read_many, CheckedDoc in the tests): the pollers merging a poll with their own last documents, and the
alert rules' full judgements (they judge stored documents with the functions that judge a round's own dicts).

Nested parts that no reader struct types are kept loose (dict, list) with their writer named."""

from typing import Any

import msgspec


class _Full(msgspec.Struct, forbid_unknown_fields=True):
    pass


class Polled(msgspec.Struct):
    """What every poll writes: when, whether it answered, and since when it has not (pollers._failure: the last good
    document with the error on top). A reader's struct may start from it (it refuses no field: selectors.py)."""

    ts: float
    ok: bool = True
    error: str | None = None
    error_kind: str | None = None
    error_since: float | None = None
    last_ok: float | None = None


class _Polled(Polled, forbid_unknown_fields=True):
    pass


class ProxySQLNodeDoc(_Polled):
    """pollers.proxysql_result (a good poll) and pollers._failure (a failed one)."""

    uptime: int | None = None
    counters: dict[str, int | None] = {}  # GLOBAL_COUNTERS as read (stats_mysql_global)
    counters_ts: float | None = None
    figures: dict[str, float | int | None] = {}  # rates, gauges, limits and the pool's sums
    pool: list[dict] = []  # stats_mysql_connection_pool rows with their rates
    runtime_servers: list[dict] = []  # runtime_mysql_servers rows (ServerRow fields)
    variables: dict[str, Any] = {}  # global_variables as last read (every few polls)
    variables_ts: float | None = None
    status_changes: dict = {}  # status_changes(): runtime statuses that moved, with when
    runtime_fp: Any = None  # _layers(): the runtime rows' fingerprint ...
    runtime_changed_ts: float | None = None  # ... since when it holds
    memory_servers: Any = None  # ... and the memory and disk mysql_servers ("runtime": the same)
    disk_servers: Any = None
    layers_ts: float | None = None
    proxysql_cluster: dict | None = None  # proxysql_cluster.settings_part + checks_part
    query_stats: dict | None = None  # query_stats.document(): users, sessions, commands, errors
    shared_with: list | None = None  # a ProxySQL serving several clusters: the others
    poll_s: float | None = None  # how long the poll took (proxysql_round)
    poll_ms: float | None = None  # _poll_time(): this poll's and the node's usual duration
    poll_ms_usual: float | None = None
    poll_ms_usual_ts: float | None = None


class BackendNodeDoc(_Polled):
    """pollers.poll_backend (and pollers._failure)."""

    state: dict | None = None  # clients.backend.NodeState's fields
    synced_primary: bool | None = None
    lag_seconds: int | None = None
    replica: dict | None = None  # async replica threads: io, sql, error
    fc_marks: Any = None  # fc_marks(): flow control readings for the window's share
    poll_s: float | None = None  # how long the poll took (backend_round)


class DriftNodeDoc(_Full):
    """configuration.drift.watch(): as_stored() for a node read, or the last one with the error on top."""

    ts: float
    version: int | None = None
    error: str = ""
    error_kind: str = ""
    findings: list[dict] = []
    runtime: list[dict] = []
    tables: dict[str, list[str]] = {}
    digest: str = ""


class ChannelDoc(_Full):
    """dr.polling.poll_channel(): one replication channel's ends as its last poll read them."""

    ts: float
    ok: bool
    state: str  # channel_state(): running, connecting, stopped, error, ...
    ends: list[int]  # [source server pk, replica server pk] when polled
    source: dict  # dr.polling._read_source (or _guarded's failure)
    replica: dict  # dr.polling._read_replica (or _guarded's failure)
    domain: int | None = None
    applied_seq: int | None = None
    behind_trx: int | None = None
    lag_seconds: int | None = None
    lag_high: bool = False
    failing_polls: dict[str, int] = {}


FULL = {"proxysql": ProxySQLNodeDoc, "backend": BackendNodeDoc, "drift": DriftNodeDoc, "channel": ChannelDoc}


def decode_strictly(kind: str, raw: bytes | str) -> msgspec.Struct:
    """The document as its full schema: a field nobody declared here is an error (the writers' test)."""
    return msgspec.json.decode(raw, type=FULL[kind])
