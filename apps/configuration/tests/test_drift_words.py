"""The drift engine's words where a node runs another value than its memory holds (drift.compare_node is pure: the
layers are fed as nodes.read_layers returns them)."""

from apps.configuration import content as C
from apps.configuration.drift import compare_node
from apps.configuration.tables import TABLES, VARIABLES


def layer(**variables):
    return {**{t.name: [] for t in TABLES}, VARIABLES: variables}


def findings(memory, runtime, disk):
    intended = {
        **C.empty(),
        "roles": {"writer": 100, "reader": 101},
        VARIABLES: {"mysql-threads": "8", "mysql-max_connections": "2048"},
    }
    layers = {"memory": layer(**memory), "runtime": layer(**runtime), "disk": layer(**disk)}
    _, said = compare_node("proxysql-1", intended, layers, {100, 101}, lambda a, b: a == b, "version 2")
    return [(f.layer, f.words) for f in said]


def test_equal_layers_say_nothing():
    same = {"mysql-threads": "8", "mysql-max_connections": "2048"}
    assert findings(same, same, same) == []


def test_a_runtime_edit_that_memory_does_not_hold():
    memory = {"mysql-threads": "8", "mysql-max_connections": "2048"}
    assert findings(memory, {**memory, "mysql-max_connections": "100"}, memory) == [
        ("runtime", "proxysql-1 runs mysql-max_connections=100 instead of 2048"),
        ("memory", "unloaded edit in memory: mysql-max_connections=2048 (runtime 100; a LOAD would apply it)"),
    ]


def test_a_variable_read_only_at_a_start_waits_for_the_restart():
    """A LOAD leaves mysql-threads as it runs: memory and disk hold the version's, only a restart applies it."""
    memory = {"mysql-threads": "8", "mysql-max_connections": "2048"}
    assert findings(memory, {**memory, "mysql-threads": "4"}, memory) == [
        ("runtime", "proxysql-1 runs mysql-threads=4 instead of 8 until it restarts (read only at a start)")
    ]


def test_loaded_and_not_saved():
    edited = {"mysql-threads": "8", "mysql-max_connections": "100"}
    assert findings(edited, edited, {"mysql-threads": "8", "mysql-max_connections": "2048"}) == [
        (
            "runtime",
            "loaded, not saved: proxysql-1 runs mysql-max_connections=100 instead of 2048; a restart of "
            "proxysql-1 would load version 2's from disk",
        )
    ]
