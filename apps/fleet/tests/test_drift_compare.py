"""drift.compare / between_nodes on hand-made rows: every kind of difference is named, field by field."""
from apps.fleet.drift import between_nodes, compare, runtime_states


def row(hg, port, **over):
    base = dict(hostgroup_id=hg, hostname="10.0.0.1", port=port, gtid_port=0, status="ONLINE", weight=1000,
                compression=0, max_connections=1000, max_replication_lag=0, use_ssl=0, max_latency_ms=0, comment="")
    base.update(over)
    return base


def intended_of(*rows):
    return {(r["hostgroup_id"], r["hostname"], r["port"]): {k: v for k, v in r.items()
                                                            if k not in ("hostgroup_id", "hostname", "port")}
            for r in rows}


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
