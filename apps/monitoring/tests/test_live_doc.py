"""Issue 25 section 2: the latest-state documents typed once (apps/monitoring/live_doc.py). Documents written by the
real writers (the pollers against the lab, the drift watcher) decode into the full schemas with no unknown field,
and every reader's struct (READERS: alerts, monitoring's overview, exporter and pages, operations, configuration's
drift watcher, DR) reads only fields a writer writes; the writer checks each document against its schema
(live.write_many)."""

import math
import time

import msgspec
import pytest

from apps.alerts import lean
from apps.clients.backend import NodeState
from apps.configuration import drift
from apps.dr import polling as dr_polling
from apps.dr import selectors as dr_selectors
from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import exporter, live, live_doc, overview, pollers, selectors
from apps.configuration import change_set
from apps.operations import rollbacks, rules
from apps.rollouts import gates as rollout_gates
from apps.operations import forms as operation_forms

pytestmark = pytest.mark.django_db

# Each reader's struct and the full schema of the documents it decodes.
READERS = [
    (lean.ProxySQLDoc, live_doc.ProxySQLNodeDoc),
    (lean.BackendDoc, live_doc.BackendNodeDoc),
    (overview.ProxySQLDoc, live_doc.ProxySQLNodeDoc),
    (overview.BackendDoc, live_doc.BackendNodeDoc),
    (overview.DriftDoc, live_doc.DriftNodeDoc),
    (exporter.ProxySQLDoc, live_doc.ProxySQLNodeDoc),
    (exporter.PoolDoc, live_doc.ProxySQLNodeDoc),
    (rollbacks.PollOutcome, live_doc.ProxySQLNodeDoc),
    (change_set.NodeFigures, live_doc.ProxySQLNodeDoc),
    (operation_forms.NodePoll, live_doc.ProxySQLNodeDoc),
    (operation_forms.CandidatePoll, live_doc.BackendNodeDoc),
    (rules.BackendPoll, live_doc.BackendNodeDoc),
    (drift.StoredResult, live_doc.DriftNodeDoc),
    (dr_selectors.ChannelView, live_doc.ChannelDoc),
    (dr_polling.LastPoll, live_doc.ChannelDoc),
    (lean.ChannelDoc, live_doc.ChannelDoc),
    (selectors.NodeDoc, live_doc.ProxySQLNodeDoc),
    (selectors.BackendDoc, live_doc.BackendNodeDoc),
    (selectors.QueryStatsDoc, live_doc.ProxySQLNodeDoc),
    (rollout_gates.LatestPoll, live_doc.ProxySQLNodeDoc),
]


def fields(struct):
    return set(struct.__struct_fields__)


def strictly(kind, doc):
    return live_doc.decode_strictly(kind, msgspec.json.encode(doc))


def test_every_reader_reads_only_fields_the_writers_write():
    for reader, full in READERS:
        assert fields(reader) <= fields(full), f"{reader.__module__}.{reader.__name__}: {fields(reader) - fields(full)}"
    # nested: the backend state a reader types is NodeState's (the poller writes its __dict__)
    assert fields(overview.WsrepState) <= {f for f in NodeState.__dataclass_fields__}


def test_the_writers_documents_decode_into_the_full_schemas(adopted_lab, live_redis, galera_healthy):
    cluster, doubles = adopted_lab
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    servers = list(Server.objects.select_related("cluster").order_by("port"))
    pollers.proxysql_round(nodes, now=time.time())
    time.sleep(0.3)
    pollers.proxysql_round(nodes, now=time.time())  # with rates
    pollers.backend_round(servers)
    drift.watch()
    docs = live.read_many(live.PROXYSQL, [n.pk for n in nodes])
    for doc in docs.values():
        typed = strictly("proxysql", doc)
        assert typed.ok and typed.pool and typed.runtime_servers and typed.figures
    one = next(iter(docs.values()))
    # the nested parts /metrics types: their fields are the ones written
    assert fields(exporter.Figures) <= set(one["figures"]), fields(exporter.Figures) - set(one["figures"])
    assert fields(exporter.GlobalCounters) <= set(one["counters"])
    assert fields(exporter.PoolRow) <= set(one["pool"][0]) and fields(exporter.PoolCounters) <= set(
        one["pool"][0]["counters"]
    )
    for doc in live.read_many(live.BACKEND, [s.pk for s in servers]).values():
        assert strictly("backend", doc).state["local_state"] == 4
    for doc in live.read_many(live.DRIFT, [n.pk for n in nodes]).values():
        assert strictly("drift", doc).findings == []
    # a failed poll: the last good document with the error on top
    doubles[1].set_mode("hang")
    try:
        pollers.proxysql_round(nodes, now=time.time())
    finally:
        doubles[1].set_mode("normal")
    failed = strictly("proxysql", live.read_one(live.PROXYSQL, nodes[1].pk))
    assert not failed.ok and failed.error and failed.error_kind


def test_a_field_no_schema_declares_is_refused():
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        live_doc.decode_strictly("drift", b'{"ts": 1.0, "surprise": 1}')


def test_the_writer_checks_each_document_against_its_schema(live_redis, settings, caplog):
    """live.write_many(): a document with a field its schema does not declare, or a value of another type, is a
    writer's bug: refused in the tests (LIVE_DOC_STRICT), logged once and written all the same in production."""
    good = {"ts": 1.0, "ok": True, "state": {"local_state": 4}, "synced_primary": True}
    live.write_many(live.BACKEND, {901: good})
    assert live.read_one(live.BACKEND, 901) == good
    for bad in ({**good, "surprise": 1}, {**good, "synced_primary": "yes"}):
        with pytest.raises(msgspec.ValidationError):
            live.write_many(live.BACKEND, {902: bad})
        assert live.read_one(live.BACKEND, 902) is None  # nothing written
    settings.LIVE_DOC_STRICT = False
    field = "only_this_test_writes"  # a message no other test of this process has logged
    with caplog.at_level("ERROR", logger="apps.monitoring.live"):
        live.write_many(live.BACKEND, {902: {**good, field: 2}})
        live.write_many(live.BACKEND, {903: {**good, field: 3}})
    assert live.read_one(live.BACKEND, 902)[field] == 2 and live.read_one(live.BACKEND, 903)[field] == 3
    refused = [r for r in caplog.records if "does not match live_doc's schema" in r.getMessage()]
    assert len(refused) == 1 and field in refused[0].getMessage()  # once per kind and message


def test_a_reader_cannot_read_a_field_no_writer_writes(live_redis):
    """In the tests, a document read as a plain dict (live.read_many) refuses a field its schema does not declare:
    the callers that read whole documents as dicts (the pollers' merge, the alert rules' full judgements) are held
    to the schema by their own tests."""
    live.write_many(live.BACKEND, {904: {"ts": 1.0, "ok": True, "synced_primary": True}})
    doc = live.read_one(live.BACKEND, 904)
    assert doc["synced_primary"] is True and doc.get("lag_seconds") is None and "state" not in doc  # declared
    for read in (lambda: doc["synced"], lambda: doc.get("synced"), lambda: "synced" in doc):
        with pytest.raises(AssertionError, match="no field 'synced'"):
            read()


def test_a_nan_figure_is_written_as_null_and_the_document_stays_readable(live_redis):
    """live.write_many() encodes with msgspec (a tenth of json.dumps's CPU at every poll): a NaN figure is written as
    null, so the typed readers (msgspec, which refuses NaN) still read the document; json.dumps wrote NaN and every
    typed reader took the node for not polled. A document written with a NaN before is still read whole."""
    live.write_many(live.BACKEND, {905: {"ts": 1.0, "ok": True, "synced_primary": True, "poll_s": float("nan")}})
    assert live.read_one(live.BACKEND, 905)["poll_s"] is None
    typed = live.read_typed(live.BACKEND, [905], lean.BackendDoc)[905]
    assert typed is not None and typed.ok is True
    live_redis.set(live.key(live.BACKEND, 906), b'{"ts":1.0,"ok":true,"poll_s":NaN}')
    assert math.isnan(live.read_one(live.BACKEND, 906)["poll_s"])
