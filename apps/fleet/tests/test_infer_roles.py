import pytest

from apps.configuration.adoption import Snapshot, infer_roles
from apps.fleet.inference import conflicts_as_warnings


def snap(rows, galera=()):
    servers = [dict(hostgroup_id=hg, hostname="127.0.0.1", port=p) for hg, p in rows]
    return Snapshot(
        version="x",
        runtime_servers=servers,
        memory_servers=servers,
        galera_hostgroups=list(galera),
        replication_hostgroups=[],
        group_replication_hostgroups=[],
        peers=[],
        mirror_rules=[],
    )


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


# -- issue 9, item 4: the seeds' plain layouts, the writer-is-also-reader policy, conflicting evidence ---------


def plain(rows, users=(), rules=(), backends=(), **native):
    """A snapshot as read_snapshot makes it: rows are (hostgroup, port[, status])."""
    servers = [
        dict(hostgroup_id=r[0], hostname="127.0.0.1", port=r[1], status=r[2] if len(r) > 2 else "ONLINE") for r in rows
    ]
    return Snapshot(
        version="x",
        runtime_servers=servers,
        memory_servers=servers,
        galera_hostgroups=list(native.get("galera", ())),
        replication_hostgroups=[],
        group_replication_hostgroups=[],
        peers=[],
        mirror_rules=[],
        users=[dict(username=u, active=1, default_hostgroup=hg) for u, hg in users],
        query_rules=[
            dict(
                rule_id=i,
                active=1,
                username=None,
                match_digest=d,
                match_pattern=None,
                negate_match_pattern=0,
                destination_hostgroup=hg,
                apply=1,
            )
            for i, (d, hg) in enumerate(rules, 1)
        ],
        backends=list(backends),
    )


SEED_001_RULES = [("^SELECT.*FOR UPDATE$", 100), ("^SELECT", 101)]


def test_seed_001_layout_from_its_users_and_query_rules():
    # Writer 100 alone, readers 101 without the writer: no shared server links the two hostgroups.
    roles = infer_roles(plain([(100, 3311), (101, 3312), (101, 3313)], users=[("utest", 100)], rules=SEED_001_RULES))
    assert (roles["writer"], roles["reader"], roles["backup_writer"], roles["offline"]) == (100, 101, None, None)
    assert roles["writer_is_also_reader"] == 0
    by = {r.decision: r for r in roles["reasons"]}
    assert any("utest" in e for e in by["writer"].evidence) and any("FOR UPDATE" in e for e in by["writer"].evidence)
    assert any("plain reads" in e for e in by["reader"].evidence)
    assert not any(r.conflicts for r in roles["reasons"])


def test_backends_alone_link_and_tell_the_hostgroups_of_an_async_layout():
    backends = [
        dict(hostname="127.0.0.1", port=3321, read_only=False, replica_of=None),
        dict(hostname="127.0.0.1", port=3322, read_only=True, replica_of="127.0.0.1:3321"),
        dict(hostname="127.0.0.1", port=3323, read_only=True, replica_of="127.0.0.1:3321"),
    ]
    roles = infer_roles(plain([(0, 3321), (1, 3322), (1, 3323)], backends=backends))
    assert (roles["kind"], roles["writer"], roles["reader"], roles["writer_is_also_reader"]) == ("async", 0, 1, 0)


@pytest.mark.parametrize(
    "rows,policy",
    [
        ([(100, 3311), (101, 3311), (101, 3312), (101, 3313), (102, 3312), (102, 3313)], 1),  # the writer reads too
        ([(100, 3311), (101, 3311, "OFFLINE_SOFT"), (101, 3312), (101, 3313), (102, 3312), (102, 3313)], 2),
        ([(100, 3311), (101, 3312), (101, 3313), (102, 3312), (102, 3313)], 2),  # backup writers read, the writer not
        ([(100, 3311), (101, 3313), (102, 3312)], 0),  # neither the writer nor the backup writer reads
    ],
)
def test_writer_is_also_reader_follows_the_layout(rows, policy):
    galera = [
        dict(hostname="127.0.0.1", port=p, read_only=False, wsrep_on=True, cluster_size=3, cluster_uuid="u1")
        for p in (3311, 3312, 3313)
    ]  # one Galera cluster: that links the hostgroups
    roles = infer_roles(plain(rows, users=[("app", 100)], backends=galera))
    assert (roles["writer"], roles["reader"]) == (100, 101)
    assert roles["writer_is_also_reader"] == policy


def test_native_table_names_the_policy():
    g = dict(
        writer_hostgroup=100,
        backup_writer_hostgroup=102,
        reader_hostgroup=101,
        offline_hostgroup=9101,
        active=1,
        writer_is_also_reader=2,
    )
    roles = infer_roles(plain([(100, 3311), (101, 3311)], galera=[g]))
    assert roles["writer_is_also_reader"] == 2  # the layout alone says 1: the native table wins, and it shows
    policy = next(r for r in roles["reasons"] if r.decision == "writer_is_also_reader")
    assert policy.conflicts == ["the writer (127.0.0.1:3311) is ONLINE in reader hostgroup 101"]


def test_conflicting_evidence_is_kept_with_the_decision():
    # The application user writes to 101 by default, and a rule sends plain reads there too.
    roles = infer_roles(plain([(100, 3311), (101, 3312), (101, 3313)], users=[("app", 101)], rules=[("^SELECT", 101)]))
    reader = next(r for r in roles["reasons"] if r.decision == "reader")
    assert (roles["writer"], roles["reader"]) == (100, 101)
    assert reader.conflicts == ["mysql_users: app send their writes to hostgroup 101 by default"]
    assert any(
        w.startswith("The evidence conflicts on the reader hostgroup: Inferred 101, but mysql_users: app")
        for w in conflicts_as_warnings(roles["reasons"])
    )


def test_what_the_operator_enters_wins_and_the_evidence_against_it_shows():
    roles = infer_roles(
        plain([(100, 3311), (101, 3312), (101, 3313)], users=[("utest", 100)], rules=SEED_001_RULES),
        given={"writer_is_also_reader": 1, "kind": "async"},
    )
    assert (roles["writer"], roles["reader"], roles["writer_is_also_reader"], roles["kind"]) == (100, 101, 1, "async")
    policy = next(r for r in roles["reasons"] if r.decision == "writer_is_also_reader")
    assert policy.operator and policy.evidence == ["entered by the operator"] and policy.conflicts
    assert "You entered 1: the writer is also a reader" in " ".join(conflicts_as_warnings(roles["reasons"]))
