"""A channel move's verify step (moves.verify) and its wait for the replica cluster's eviction of a dead old replica
(moves.wait_evicted), against scripted reads of the new replica and the new source: the
threads running just after START SLAVE are not enough when the source has transactions the replica has not
applied; the replica must commit one of them with its threads still running. A Galera replica cluster evicting a
dead member commits nothing until its view changes, and the SQL thread may stop then without an error: that
move must fail (and be rolled back), not be recorded done with a stopped channel."""

import pytest

from apps.clients.backend import ChannelRead
from apps.clients.wire import Unreachable
from apps.dr import moves
from apps.operations.executor import StepFailed
from apps.plans.vocabulary import Step

REPLICA, SOURCE = 1, 2


def _read(sql="Yes", seq=100, io="Yes", sql_error=""):
    return ChannelRead(
        source_host="10.0.1.2",
        source_port=3306,
        io_running=io,
        sql_running=sql,
        seconds_behind=0,
        last_io_errno=0,
        last_io_error="",
        last_sql_errno=1 if sql_error else 0,
        last_sql_error=sql_error,
        gtid_io_pos=f"1-11-{seq + 50}",
        gtid_slave_pos=f"1-11-{seq}",
        gtid_binlog_pos=f"1-11-{seq},2-21-7",
    )


class _Replica:
    def __init__(self, reads=(), views=()):
        self.reads, self.views, self.count = list(reads), list(views), 0

    def channel(self):
        self.count += 1
        return self.reads.pop(0) if len(self.reads) > 1 else self.reads[0]  # the last read repeats

    def view_addresses(self):
        self.count += 1
        return self.views.pop(0) if len(self.views) > 1 else self.views[0]


class _Source:
    def __init__(self, binlog_pos):
        self.binlog_pos = binlog_pos

    def gtid_binlog_pos(self):
        if self.binlog_pos is None:
            raise Unreachable("db-2.dc1:3306", "read gtid_binlog_pos", "Connection refused")
        return self.binlog_pos


class _Run:
    def __init__(self, replica, source):
        self.clients = {REPLICA: replica, SOURCE: source}
        self.beats = 0

    def backend(self, server_id):
        return self.clients[int(server_id)]

    def beat(self):
        self.beats += 1


def _verify(reads, source_pos="1-11-150", timeout_s=5, **params):
    replica = _Replica(reads)
    step = Step(
        key="verify",
        title="verify",
        kind=moves.CHANNEL_VERIFY,
        params={
            "server": REPLICA,
            "source": ["10.0.1.2", 3306],
            "source_server": SOURCE,
            "domain": 1,
            "timeout_s": timeout_s,
            **params,
        },
    )
    detail = {}
    moves.verify(_Run(replica, _Source(source_pos)), step, None, [], detail)
    return replica, detail


def test_a_sql_thread_that_stops_without_an_error_before_its_first_commit_fails_the_move():
    # Running at START SLAVE, then (the replica cluster's view change) stopped, nothing committed, no error.
    with pytest.raises(StepFailed) as failed:
        _verify([_read(), _read(), _read(sql="No")])
    assert "does not run" in str(failed.value) and "SQL No" in str(failed.value)
    assert "stopped, without an error, after START SLAVE, at 1-11-100" in str(failed.value)


def test_the_verify_waits_through_a_stall_until_the_replica_commits_from_the_new_source():
    replica, detail = _verify([_read(), _read(), _read(), _read(seq=101)])
    assert replica.count == 4  # not done at the first read: nothing committed yet
    assert detail["committed_since_start"] is True and detail["applied_at_start"] == 100
    assert detail["source_at_start"] == 150


def test_a_replica_that_commits_nothing_within_the_timeout_fails_the_move():
    with pytest.raises(StepFailed, match="no transaction from the new source committed within 0.2 s"):
        _verify([_read()], timeout_s=0.2)


def test_with_nothing_to_apply_running_threads_are_enough():
    replica, detail = _verify([_read(), _read(sql="No")], source_pos="1-11-100,3-31-9")
    assert replica.count == 1 and detail["committed_since_start"] is None


def test_a_source_that_does_not_answer_counts_as_having_transactions_to_apply():
    with pytest.raises(StepFailed, match="no transaction"):
        _verify([_read()], source_pos=None, timeout_s=0.2)


def test_a_plan_saved_before_the_check_verifies_running_threads_only():
    replica, _ = _verify([_read(), _read(sql="No")], domain=None, source_server=None)
    assert replica.count == 1


def test_an_sql_error_fails_at_once_with_the_error():
    with pytest.raises(StepFailed, match="Duplicate entry"):
        _verify([_read(sql="No", sql_error="Duplicate entry '7' for key 'PRIMARY'")])


THREE = ["10.0.2.1:3306", "10.0.2.2:3306", "10.0.2.3:3306"]


def _wait_evicted(views, dead="10.0.2.1:3306", timeout_s=5):
    replica = _Replica(views=views)
    step = Step(
        key="evicted",
        title="evicted",
        kind=moves.CHANNEL_EVICTED,
        params={"server": REPLICA, "name": "10.0.2.2:3306", "dead": dead, "timeout_s": timeout_s},
    )
    detail = {}
    run = _Run(replica, None)
    moves.wait_evicted(run, step, None, [], detail)
    return replica, detail, run


def test_the_channel_starts_only_once_the_replica_clusters_view_no_longer_counts_the_dead_old_replica():
    replica, detail, run = _wait_evicted([THREE, THREE, THREE, THREE[1:]])
    assert replica.count == 4 and detail["view"] == THREE[1:] and run.beats == 3


def test_a_view_that_still_counts_the_dead_member_after_the_bound_fails_before_anything_starts():
    with pytest.raises(StepFailed, match="view still counts 10.0.2.1:3306, which does not answer, after 0.2 s"):
        _wait_evicted([THREE], timeout_s=0.2)


def test_a_view_listed_by_other_addresses_than_the_inventorys_is_taken_as_it_is():
    replica, detail, _ = _wait_evicted([["db-2.dc2:3306", "db-3.dc2:3306", "db-1.dc2:3306"]])
    assert replica.count == 1 and detail["waited_s"] < 1
