"""An adoption's preview and confirm on a natively managed node: Monitor moving the servers of its hostgroups in
between (lab/reference/native-galera/: it does at every healthcheck) does not change what is adopted, so the confirm
is not refused as "the node changed"; a row moved by hand outside them still is."""

from apps.configuration.adoption import Snapshot

GALERA = {
    "writer_hostgroup": 100,
    "backup_writer_hostgroup": 102,
    "reader_hostgroup": 101,
    "offline_hostgroup": 9101,
    "active": 1,
    "max_writers": 1,
    "writer_is_also_reader": 1,
}


def row(hg, port, status="ONLINE"):
    return {"hostgroup_id": hg, "hostname": "127.0.0.1", "port": port, "status": status, "weight": 1000}


def snapshot(runtime, galera=(GALERA,)):
    memory = [row(100, 3311), row(100, 3312), row(200, 3313)]
    return Snapshot(
        version="2.7.1",
        runtime_servers=runtime,
        memory_servers=memory,
        galera_hostgroups=list(galera),
        replication_hostgroups=[],
        group_replication_hostgroups=[],
        peers=[],
        mirror_rules=[],
    )


def test_monitor_placing_the_servers_between_preview_and_confirm_changes_no_fingerprint():
    loaded = [row(100, 3311), row(100, 3312), row(200, 3313)]
    placed = [row(100, 3311), row(100, 3312, "SHUNNED"), row(101, 3311), row(101, 3312), row(102, 3312), row(200, 3313)]
    assert snapshot(loaded).fingerprint() == snapshot(placed).fingerprint()
    moved_by_hand = [row(100, 3311), row(100, 3312), row(201, 3313)]
    assert snapshot(loaded).fingerprint() != snapshot(moved_by_hand).fingerprint()
    # without an active manager, a row in another hostgroup is a change
    inactive = [{**GALERA, "active": 0}]
    assert snapshot(loaded, inactive).fingerprint() != snapshot(placed, inactive).fingerprint()
