"""drift.compare / between_nodes on hand-made rows: every kind of difference is named, field by field; and the
one drift engine (apps/configuration/drift.py) over polled mysql_servers layers, as the alert rules feed it."""

from apps.configuration.drift import compare_polled
from apps.fleet.drift import between_nodes, compare, runtime_states


def row(hg, port, **over):
    base = dict(
        hostgroup_id=hg,
        hostname="10.0.0.1",
        port=port,
        gtid_port=0,
        status="ONLINE",
        weight=1000,
        compression=0,
        max_connections=1000,
        max_replication_lag=0,
        use_ssl=0,
        max_latency_ms=0,
        comment="",
    )
    base.update(over)
    return base


def intended_of(*rows):
    return {
        (r["hostgroup_id"], r["hostname"], r["port"]): {
            k: v for k, v in r.items() if k not in ("hostgroup_id", "hostname", "port")
        }
        for r in rows
    }


def test_identical_rows_have_no_drift():
    rows = [row(100, 3306), row(101, 3307)]
    assert compare(intended_of(*rows), rows, {100, 101}) == []


def test_field_difference_names_field_and_both_values():
    out = compare(intended_of(row(100, 3306, weight=1000)), [row(100, 3306, weight=7)], {100})
    assert [(d.field, d.intended, d.runtime) for d in out] == [("weight", 1000, 7)]


def test_missing_and_unexpected_rows():
    out = compare(intended_of(row(100, 3306)), [row(101, 3307)], {100, 101})
    assert {(d.hostgroup_id, d.field, d.runtime) for d in out} == {(100, "row", "missing"), (101, "row", "present")}


def test_rows_of_other_clusters_are_ignored():
    assert compare(intended_of(row(100, 3306)), [row(100, 3306), row(500, 3399)], {100}) == []


def test_shunned_is_proxysqls_verdict_not_drift():
    rows = [row(100, 3306, status="SHUNNED")]
    assert compare(intended_of(row(100, 3306)), rows, {100}) == []
    assert runtime_states(rows, {100}) == [{"key": (100, "10.0.0.1", 3306), "status": "SHUNNED"}]


def test_shunned_row_still_shows_a_real_difference():
    out = compare(intended_of(row(100, 3306, status="OFFLINE_SOFT")), [row(100, 3306, status="SHUNNED")], {100})
    assert [(d.field, d.intended, d.runtime) for d in out] == [("status", "OFFLINE_SOFT", "ONLINE")]


def test_nodes_do_not_disagree_over_a_shunned_row():
    assert between_nodes({"p1": [row(101, 3306, status="SHUNNED")], "p2": [row(101, 3306)]}, {101}) == []


def test_between_nodes_reports_disagreement_per_node():
    a = [row(100, 3306, status="ONLINE"), row(101, 3307)]
    b = [row(100, 3306, status="OFFLINE_SOFT")]
    out = between_nodes({"p1": a, "p2": b}, {100, 101})
    assert {"key": (100, "10.0.0.1", 3306), "field": "status", "values": {"p1": "ONLINE", "p2": "OFFLINE_SOFT"}} in out
    assert {"key": (101, "10.0.0.1", 3307), "field": "row", "values": {"p1": "present", "p2": "missing"}} in out


# -- the three layers (memory, runtime, disk) --------------------------------------------------------------
def layers(rows, memory=None, disk=None):
    return {
        "memory": memory if memory is not None else rows,
        "runtime": rows,
        "disk": disk if disk is not None else rows,
    }


def test_three_layers_that_agree_with_intent_have_nothing_to_say():
    rows = [row(100, 3306), row(101, 3307)]
    assert compare_polled("p2", intended_of(*rows), layers(rows), {100, 101}, 100) == ([], [])


def test_a_disk_with_another_writer_says_where_a_restart_would_send_writes():
    rows = [row(100, 3306), row(101, 3307)]
    disk = [row(100, 3307), row(101, 3307)]
    diffs, findings = compare_polled("proxysql-2", intended_of(*rows), layers(rows, disk=disk), {100, 101}, 100)
    assert [f.words for f in findings] == [
        "a restart of proxysql-2 would send writes to 10.0.0.1:3307 instead of 10.0.0.1:3306"
    ]
    assert findings[0].writer and findings[0].layer == "disk"
    assert [(d.key, d.field, d.intended, d.memory, d.runtime, d.disk) for d in diffs] == [
        ((100, "10.0.0.1", 3306), "row", "present", "present", "present", "missing"),
        ((100, "10.0.0.1", 3307), "row", "missing", "missing", "missing", "present"),
    ]


def test_a_disk_without_an_online_writer_says_the_hostgroup_would_be_empty():
    rows = [row(100, 3306)]
    _, findings = compare_polled(
        "p2", intended_of(*rows), layers(rows, disk=[row(100, 3306, status="OFFLINE_SOFT")]), {100}, 100
    )
    assert [f.words for f in findings] == [
        "a restart of p2 would leave the writer hostgroup 100 empty instead of 10.0.0.1:3306"
    ]


def test_other_disk_differences_say_what_a_restart_would_load():
    rows = [row(100, 3306), row(101, 3307)]
    disk = [row(100, 3306), row(101, 3307, weight=3), row(101, 3308)]
    _, findings = compare_polled("p2", intended_of(*rows), layers(rows, disk=disk), {100, 101}, 100)
    assert [f.words for f in findings] == [
        "a restart of p2 would load hg 101 10.0.0.1:3307 weight 3 (disk) instead of 1000",
        "a restart of p2 would load a row for hg 101 10.0.0.1:3308 (disk) instead of none",
    ]
    assert not any(f.writer for f in findings)


def test_memory_unlike_runtime_is_an_unloaded_edit():
    rows = [row(100, 3306), row(101, 3307)]
    memory = [row(100, 3306), row(101, 3307, weight=3)]
    diffs, findings = compare_polled("p2", intended_of(*rows), layers(rows, memory=memory), {100, 101}, 100)
    assert [(f.layer, f.words) for f in findings] == [
        ("memory", "unloaded edit in memory: hg 101 10.0.0.1:3307 weight 3 (runtime 1000; a LOAD would apply it)")
    ]
    assert [(d.field, d.intended, d.memory, d.runtime, d.disk) for d in diffs] == [("weight", 1000, 3, 1000, 1000)]


def test_a_shunned_runtime_row_is_not_a_layer_difference():
    rows = [row(100, 3306)]
    assert compare_polled(
        "p2", intended_of(*rows), layers([row(100, 3306, status="SHUNNED")], memory=rows, disk=rows), {100}, 100
    ) == ([], [])


def test_other_clusters_rows_in_any_layer_are_ignored():
    rows = [row(100, 3306)]
    assert compare_polled("p2", intended_of(*rows), layers(rows, disk=rows + [row(500, 3399)]), {100}, 100) == ([], [])


def test_a_layer_not_read_is_not_judged():
    rows = [row(100, 3306)]
    assert compare_polled("p2", intended_of(*rows), {"runtime": rows}, {100}, 100) == ([], [])
    _, findings = compare_polled("p2", intended_of(*rows), {"runtime": rows, "disk": [row(100, 3307)]}, {100}, 100)
    assert [f.words for f in findings] == [
        "a restart of p2 would send writes to 10.0.0.1:3307 instead of 10.0.0.1:3306"
    ]
