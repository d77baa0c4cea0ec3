"""Deltas of cumulative counters between two polls (pure: no I/O)."""

from apps.clients.proxysql import DigestRow
from apps.digests.deltas import compute, field_and_value


def row(digest="0xA", count=10, total=1000, least=50, most=300, first=100, hg=101, affected=0, sent=0):
    return DigestRow(hg, "shop", "app", "", digest, count, first, first + 50, total, least, most, affected, sent)


def baseline(*rows):
    return dict(field_and_value(r) for r in rows)


def test_no_baseline_gives_no_delta_only_a_new_baseline():
    out = compute([row()], None)
    assert out.deltas == [] and out.full and len(out.changed) == 1


def test_unchanged_rows_cost_nothing_and_write_nothing():
    out = compute([row()], baseline(row()))
    assert out.deltas == [] and out.changed == {} and out.removed == [] and not out.full


def test_an_increment_is_the_difference_with_derivable_extremes_only():
    out = compute([row(count=15, total=1600, most=300)], baseline(row()))
    (d,) = out.deltas
    assert (d.count_star, d.sum_time, d.max_time, d.min_time) == (5, 600, None, None)  # max did not move: unknown
    (d,) = compute([row(count=15, total=2600, most=900, least=20)], baseline(row())).deltas
    assert (d.max_time, d.min_time) == (900, 20)  # a new max / min ran in this interval
    (d,) = compute([row(count=11, total=1120)], baseline(row())).deltas
    assert (d.count_star, d.sum_time, d.max_time, d.min_time) == (1, 120, 120, 120)  # one execution: its time


def test_a_new_digest_brings_all_of_its_counters():
    (d,) = compute([row(), row(digest="0xB", count=3, total=90, least=20, most=40)], baseline(row())).deltas
    assert (d.digest, d.count_star, d.sum_time, d.min_time, d.max_time) == ("0xB", 3, 90, 20, 40)


def test_a_reset_gives_what_ran_since_never_negative():
    out = compute([row(count=4, total=200, first=500)], baseline(row()))
    (d,) = out.deltas
    assert (d.count_star, d.sum_time) == (4, 200) and out.resets == 1
    # first_seen changed while the count grew past the old one: still a reset, not a small delta
    (d,) = compute([row(count=40, total=4000, first=500)], baseline(row())).deltas
    assert d.count_star == 40
    # sum_time went down with the count up (a reset and more traffic): a reset
    (d,) = compute([row(count=12, total=500)], baseline(row())).deltas
    assert (d.count_star, d.sum_time) == (12, 500)


def test_rows_that_disappear_leave_the_baseline():
    out = compute([row(digest="0xB")], baseline(row(), row(digest="0xB")))
    assert out.deltas == [] and out.removed == [field_and_value(row())[0]]


def test_same_digest_in_two_hostgroups_are_two_series():
    out = compute(
        [row(count=12, total=1200), row(hg=100, count=7, total=700)], baseline(row(), row(hg=100, count=5, total=500))
    )
    assert sorted((d.hostgroup, d.count_star) for d in out.deltas) == [(100, 2), (101, 2)]


def test_rows_sent_and_affected_are_deltas_too():
    (d,) = compute([row(count=15, total=1600, sent=90, affected=7)], baseline(row(sent=40, affected=2))).deltas
    assert (d.rows_sent, d.rows_affected) == (50, 5)
    (d,) = compute([row(digest="0xB", sent=30, affected=1)], baseline(row())).deltas  # new: all of it
    assert (d.rows_sent, d.rows_affected) == (30, 1)


def test_a_baseline_from_before_rows_were_read_gives_no_rows_delta():
    old = {field: b" ".join(value.split()[:5]) for field, value in baseline(row()).items()}
    (d,) = compute([row(count=15, total=1600, sent=90)], old).deltas
    assert (d.count_star, d.sum_time, d.rows_sent, d.rows_affected) == (5, 600, None, None)
