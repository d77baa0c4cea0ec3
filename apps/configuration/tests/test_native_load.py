"""native_load.placed_with_edits (pure): Monitor's placement with a change set's edits, what its LOAD carries on a
cluster placed by ProxySQL's replication manager (issue 33)."""

from apps.configuration.native_load import placed_with_edits


def row(hg, port, **columns):
    return {
        "hostgroup_id": hg,
        "hostname": "127.0.0.1",
        "port": port,
        "status": "ONLINE",
        "weight": 1000,
        "max_connections": 2000,
        **columns,
    }


def keyed(*rows):
    return {(r["hostgroup_id"], r["hostname"], r["port"]): r for r in rows}


# configured: every backend in writer hostgroup 10; Monitor placed 3322 writing (and reading), 3321 and 3323 reading
CONFIGURED = keyed(row(10, 3321), row(10, 3322), row(10, 3323))
PLACED = keyed(row(10, 3322), row(20, 3321), row(20, 3322), row(20, 3323, status="SHUNNED"))


def test_an_untouched_backend_stays_where_monitor_put_it_and_an_edited_one_takes_its_columns_everywhere():
    after = {**CONFIGURED, (10, "127.0.0.1", 3322): row(10, 3322, weight=500)}
    want = placed_with_edits(PLACED, CONFIGURED, after)
    assert want == {
        **PLACED,
        (10, "127.0.0.1", 3322): row(10, 3322, weight=500),
        (20, "127.0.0.1", 3322): row(20, 3322, weight=500),
    }
    assert not [k for k, r in want.items() if k[0] == 10 and k[2] != 3322]  # no read_only server writing


def test_a_status_edit_is_taken_a_new_backend_goes_in_as_configured_a_removed_one_goes():
    after = {
        **CONFIGURED,
        (10, "127.0.0.1", 3321): row(10, 3321, status="OFFLINE_SOFT"),
        (10, "127.0.0.1", 3324): row(10, 3324),
    }
    del after[(10, "127.0.0.1", 3323)]
    want = placed_with_edits(PLACED, CONFIGURED, after)
    assert want == {
        (10, "127.0.0.1", 3322): row(10, 3322),
        (20, "127.0.0.1", 3322): row(20, 3322),
        (20, "127.0.0.1", 3321): row(20, 3321, status="OFFLINE_SOFT"),
        (10, "127.0.0.1", 3324): row(10, 3324),
    }
    # an edit that leaves the status alone keeps Monitor's (SHUNNED read as its configured ONLINE elsewhere)
    after = {**CONFIGURED, (10, "127.0.0.1", 3323): row(10, 3323, max_connections=10)}
    assert placed_with_edits(PLACED, CONFIGURED, after)[(20, "127.0.0.1", 3323)] == row(
        20, 3323, status="SHUNNED", max_connections=10
    )
