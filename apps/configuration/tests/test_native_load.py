"""native_load.placed_with_edits (pure): Monitor's placement with a change set's edits, what its LOAD carries on a
cluster placed by ProxySQL's replication or Galera manager (issue 33)."""

from apps.configuration.native_load import marks_kept, placed_with_edits


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


def test_a_status_edit_is_taken_a_new_backend_goes_in_as_configured_without_an_entry_a_removed_one_goes():
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


def test_the_galera_managers_marks_are_loaded_as_marks_and_a_backup_writers_weight_goes_where_monitor_put_it():
    """Galera manager: 3311 writing, 3312 and 3313 backup writers (ONLINE in 102, marked SHUNNED in writer hostgroup
    100), everyone reading. The marks stay marks, SHUNNED (loaded ONLINE they would write: three writers, 1213 on real
    2.7.1; left out, a check of Monitor's racing the LOAD once wrote 3313's mark with the old weight, never rewritten);
    3313's new weight goes to each hostgroup Monitor put it in, its mark in the writer hostgroup too."""
    configured = keyed(row(100, 3311), row(100, 3312, weight=900), row(100, 3313, weight=800))
    runtime = [
        row(100, 3311),
        row(100, 3312, weight=900),  # read_layers reads Monitor's SHUNNED as the configured ONLINE
        row(100, 3313, weight=800),
        *[row(hg, 3312, weight=900) for hg in (101, 102)],
        *[row(hg, 3313, weight=800) for hg in (101, 102)],
        row(101, 3311),
        row(9101, 3314, status="ONLINE"),
    ]
    shunned = [row(100, 3312, weight=900, status="SHUNNED"), row(100, 3313, weight=800, status="SHUNNED")]
    shunned.append(row(9101, 3314, status="SHUNNED"))  # a pool's verdict in another hostgroup: not a mark
    placed = keyed(*marks_kept(runtime, shunned, {100}))
    assert {(k[0], k[2]): r["status"] for k, r in placed.items() if k[0] in (100, 9101)} == {
        (100, 3311): "ONLINE",
        (100, 3312): "SHUNNED",
        (100, 3313): "SHUNNED",
        (9101, 3314): "ONLINE",
    }
    after = {**configured, (100, "127.0.0.1", 3313): row(100, 3313, weight=700)}
    want = placed_with_edits(placed, configured, after)
    assert {(k[0], k[2]): r["status"] for k, r in want.items() if k[0] == 100} == {
        (100, 3311): "ONLINE",
        (100, 3312): "SHUNNED",
        (100, 3313): "SHUNNED",
    }
    assert {k[0]: r["weight"] for k, r in want.items() if k[2] == 3313} == {100: 700, 101: 700, 102: 700}
    assert {k[0]: r["weight"] for k, r in want.items() if k[2] == 3312} == {100: 900, 101: 900, 102: 900}


def test_a_new_backend_of_a_writer_hostgroup_enters_where_the_manager_says():
    """Loaded ONLINE in the writer hostgroup, a new backend would take writes beside Monitor's writer until Monitor's
    next check (a read_only replica: 1290; a Galera node: two writers). It enters the manager's entry hostgroup (the
    replication manager's readers here, the Galera manager's backup writers), a row configured there already kept as
    it is; one of another hostgroup goes in as configured."""
    after = {**CONFIGURED, (10, "127.0.0.1", 3324): row(10, 3324, weight=7)}
    want = placed_with_edits(PLACED, CONFIGURED, after, entry={10: 20})
    assert want == {**PLACED, (20, "127.0.0.1", 3324): row(20, 3324, weight=7)}
    after = {
        **CONFIGURED,
        (10, "127.0.0.1", 3324): row(10, 3324, weight=7),
        (20, "127.0.0.1", 3324): row(20, 3324, weight=9),
        (30, "127.0.0.1", 3325): row(30, 3325),
    }
    want = placed_with_edits(PLACED, CONFIGURED, after, entry={10: 20})
    assert want == {
        **PLACED,
        (20, "127.0.0.1", 3324): row(20, 3324, weight=9),
        (30, "127.0.0.1", 3325): row(30, 3325),
    }
