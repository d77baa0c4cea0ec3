"""Real tier (issue 33): the fault matrix (lab/bench_faults.py) on a pair of REAL ProxySQL nodes in front of the real
Galera lab, adopted through the product: a switchover with the second node paused (SIGSTOP) at its move step (2.7.1
and 2.5.5) and with it SIGKILLed at its move, save and autoinc_restore steps (and inside its SAVE's write, restarted
after the rollback reached it or before: bench_faults.HALF_SAVED, BACK_BEFORE_UNDO), a change set with the second node
paused at its apply step, a repair of real nodes, and a ProxySQL Cluster pair (sync at ProxySQL's defaults) through a
switchover and a change set with a peer paused (and resumed only after the rollback, the retry late); then both
nodes restarted (they load their disk) and every layer of both read: memory, runtime and disk equal to the inventory, and the nodes agreed on one writer.

Steps chosen for the budget (each row starts fresh real nodes, runs the operation, the product's retries and two
restarts): move (switchover: the writer rows change there; a pause lands in the LOAD or in verify), save and
autoinc_restore for a kill, and apply (change set). bin/bench-real-pair and bin/bench-faults cover every step by hand."""

import pytest

from apps.operations.models import Operation, OperationStep
from apps.operations.sync_hold import HOLD_KEY
from lab import bench_faults

pytestmark = pytest.mark.django_db(transaction=True)


def matrix_of(real_proxysql_factory, version, fault, proxysql_cluster=False):
    def make(name, peers=None, ports=None):
        return real_proxysql_factory(version, name=name, peers=peers, ports=ports)

    return bench_faults.RealFaultMatrix(
        make, fault=fault, proxysql_cluster=proxysql_cluster, pause_s=2.0, retry_s=30, out=lambda line: None
    )


@pytest.fixture
def paused(real_proxysql_factory, galera_lab, live_redis):
    m = matrix_of(real_proxysql_factory, "2.7.1", "pause")
    yield m
    m.close()


@pytest.fixture
def paused_2_5(real_proxysql_factory, galera_lab, live_redis):
    m = matrix_of(real_proxysql_factory, "2.5.5", "pause")
    yield m
    m.close()


@pytest.fixture
def killed(real_proxysql_factory, galera_lab, live_redis):
    m = matrix_of(real_proxysql_factory, "2.7.1", "kill")
    yield m
    m.close()


def restarted_as_intended(row):
    """After the retries and both restarts: every layer equal to the inventory, one writer agreed, no SQL by hand."""
    assert row.pending_left == 0, row
    assert (row.layers, row.hand_sql) == ("equal", "none"), (row, row.notes)
    assert row.writer.startswith("agreed (") and "inventory says" not in row.writer, (row, row.notes)


def test_switchover_with_a_real_node_paused_at_move(paused):
    row = paused.row("switchover", "move")
    assert row.landed.endswith("p2 stopped") and row.after_retries in ("done", "rolled_back"), row
    restarted_as_intended(row)


def test_switchover_with_a_real_2_5_5_node_paused_at_move(paused_2_5):
    row = paused_2_5.row("switchover", "move")
    assert row.landed.endswith("p2 stopped") and row.after_retries in ("done", "rolled_back"), row
    restarted_as_intended(row)


@pytest.mark.parametrize(
    "step,ends", [("move", ("done", "rolled_back")), ("save", ("rolled_back",)), ("autoinc_restore", ("done",))]
)
def test_switchover_with_a_real_node_killed_at_a_step(killed, step, ends):
    """Killed at move (the writer rows change), at save (before the point of no return: rolled back, whatever its
    disk kept of the SAVE; the retry re-checks the node) and at autoinc_restore (past the point of no return: the retry
    finishes there)."""
    row = killed.row("switchover", step)
    assert row.landed.endswith("p2 killed") and row.after_retries in ends, row
    restarted_as_intended(row)


@pytest.fixture
def killed_in_save_write(real_proxysql_factory, galera_lab, live_redis):
    m = matrix_of(real_proxysql_factory, "2.7.1", bench_faults.HALF_SAVED)
    yield m
    m.close()


def test_switchover_with_a_real_node_killed_between_its_saves_delete_and_insert(killed_in_save_write):
    """The save row's 1 pass in 4, made certain: p2 killed inside its SAVE's write restarts with no mysql_servers row;
    the rollback's statements bring back only the rows the switchover moved (the other backend's reader and backup
    writer rows stayed missing, in every layer, and the operation said rolled back). The retry checks the node's
    three layers against the inventory once its statements ran, and repairs it: rolled back, every layer equal, said."""
    row = killed_in_save_write.row("switchover", "save")
    assert row.landed.startswith("save; p2 killed") and row.after_retries == "rolled_back", row
    restarted_as_intended(row)
    op = Operation.objects.get(cluster=killed_in_save_write.cluster, kind="switchover")
    assert "repaired from the inventory" in op.error, op.error


@pytest.fixture
def back_before_undo(real_proxysql_factory, galera_lab, live_redis):
    m = matrix_of(real_proxysql_factory, "2.7.1", bench_faults.BACK_BEFORE_UNDO)
    yield m
    m.close()


def test_switchover_with_a_real_node_killed_in_its_save_and_back_before_the_rollback(back_before_undo):
    """The other order: p2, killed inside its SAVE's write, answers again (with no mysql_servers row) before the
    executor's rollback reaches it, so it takes its undo in the run and nothing is left to retry. The run checks every
    node that restarted during the operation before the rollback counts as complete: rolled back, every layer equal."""
    row = back_before_undo.row("switchover", "save")
    assert row.landed.startswith("save; p2 killed") and row.state == "rollback_pending", row
    assert row.after_retries == "rolled_back", row
    restarted_as_intended(row)


def test_change_set_with_a_real_node_paused_at_apply(paused):
    row = paused.row("config", "apply")
    assert row.landed.endswith("p2 stopped") and row.after_retries in ("done", "rolled_back"), row
    restarted_as_intended(row)


def test_repair_of_real_nodes(paused):
    row = paused.row("repair", bench_faults.NO_FAULT)
    assert (row.state, row.after_retries) == ("done", "done"), (row, row.notes)
    restarted_as_intended(row)


@pytest.fixture
def paused_cluster(real_proxysql_factory, galera_lab, live_redis):
    """Two real 2.7.1 nodes in one ProxySQL Cluster, sync at ProxySQL's defaults."""
    m = matrix_of(real_proxysql_factory, "2.7.1", "pause", proxysql_cluster=True)
    yield m
    m.close()


def ran_step(matrix, key):
    """The row's operation had this step: the product saw the pair syncing (a hold first, or a wait for the pull)."""
    return OperationStep.objects.filter(operation__cluster=matrix.cluster, key=key).exists()


def test_proxysql_cluster_pair_switchover_with_a_peer_paused_at_move(paused_cluster):
    row = paused_cluster.row("switchover", "move")
    assert row.landed.endswith("p2 stopped") and row.after_retries in ("done", "rolled_back"), row
    assert ran_step(paused_cluster, HOLD_KEY)
    restarted_as_intended(row)


def test_proxysql_cluster_pair_change_set_with_a_peer_paused_at_apply(paused_cluster):
    row = paused_cluster.row("config", "apply")
    assert row.landed.endswith("p2 stopped") and row.after_retries in ("done", "rolled_back"), row
    assert ran_step(paused_cluster, HOLD_KEY)  # the default mode (Cluster.cluster_sync_mode "hold")
    restarted_as_intended(row)


@pytest.fixture
def resumed_after_rollback(real_proxysql_factory, galera_lab, live_redis):
    m = matrix_of(real_proxysql_factory, "2.7.1", bench_faults.RESUMED_AFTER_ROLLBACK, proxysql_cluster=True)
    yield m
    m.close()


def test_proxysql_cluster_pair_change_set_with_a_peer_resumed_only_after_the_rollback(resumed_after_rollback):
    """The order the paused row met 2 times in 5 under load, made certain: p2, stopped with its apply's LOAD in flight,
    resumes only after p1's rollback and runs that LOAD then (the pair's newest change), and the retry comes more than
    3 s later. p1 keeps its sync held until p2 took its undo (before, p1 restored it in the rollback, pulled p2's
    change and saved it to disk: after the restarts p1 had the new weight)."""
    row = resumed_after_rollback.row("config", "apply")
    assert row.landed.endswith("p2 stopped, resumed after the rollback") and row.state == "rollback_pending", row
    assert not [n for n in row.notes if n.startswith("before the retry: p1")], row.notes  # it pulled nothing
    assert row.after_retries == "rolled_back", row
    assert "retry: p1: 3 statement(s) ran; its rollback is complete" in row.notes, row.notes  # after p2's
    restarted_as_intended(row)
