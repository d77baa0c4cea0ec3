from apps.fleet.adopt import Snapshot, infer_roles


def snap(rows, galera=()):
    servers = [dict(hostgroup_id=hg, hostname="127.0.0.1", port=p) for hg, p in rows]
    return Snapshot(version="x", runtime_servers=servers, memory_servers=servers, galera_hostgroups=list(galera),
                    replication_hostgroups=[], group_replication_hostgroups=[], peers=[], mirror_rules=[])


def test_native_galera_table_names_the_roles_even_when_inactive():
    g = dict(writer_hostgroup=10, backup_writer_hostgroup=12, reader_hostgroup=11, offline_hostgroup=13, active=0)
    roles = infer_roles(snap([(10, 1)], galera=[g]))
    assert (roles["writer"], roles["reader"], roles["backup_writer"], roles["offline"]) == (10, 11, 12, 13)


def test_seed_layout_is_recognised_without_native_tables():
    # The seeds' Galera layout: writer 100 (one node), reader 101 (all three), backup writer 102 (two).
    rows = [(100, 3311), (101, 3311), (101, 3312), (101, 3313), (102, 3312), (102, 3313)]
    roles = infer_roles(snap(rows))
    assert (roles["writer"], roles["reader"], roles["backup_writer"]) == (100, 101, 102)


def test_hostgroups_of_another_cluster_are_not_mixed_in():
    rows = [(100, 3311), (101, 3311), (101, 3312), (101, 3313), (200, 4411), (201, 4411)]
    roles = infer_roles(snap(rows))
    assert {roles["writer"], roles["reader"]} == {100, 101} and roles["backup_writer"] is None


def test_no_servers_means_no_guess():
    assert infer_roles(snap([])) is None
