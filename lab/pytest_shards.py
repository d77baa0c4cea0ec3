"""Cutting one test pass into shards (bin/test's TEST_SHARDS), and the per-module durations that balance them.

TEST_SHARD="i/N" (set by bin/test for each shard of a pass) keeps the test modules of shard i of N and deselects
the rest. A module is never cut: its module-scoped fixtures (a started double, a real ProxySQL, a Galera fault) are
made once. Modules are dealt longest first to the shard with the least time so far, by the durations measured in
an earlier run (lab/test_durations.json, {module: seconds}); a module it does not know counts as the median. Every
shard collects the same modules (the same arguments), so each makes the same deal and together they run each
module once.

TEST_DURATIONS_OUT=path: at the end of the run, write each module's measured seconds (setup, call and teardown of
its tests) there; bin/test merges the shards' files into var/test-logs/durations.json, which is what to copy over
lab/test_durations.json when the suite has changed much.
"""

import json
import os
import statistics
from pathlib import Path

DURATIONS = Path(__file__).with_name("test_durations.json")


def parse_shard(text):
    """ "i/N" -> (i, N) with 1 <= i <= N; None for empty."""
    if not text:
        return None
    index, _, count = text.partition("/")
    i, n = int(index), int(count)
    if not 1 <= i <= n:
        raise ValueError(f"TEST_SHARD={text!r}: want i/N with 1 <= i <= N")
    return i, n


def deal(modules, shards, known):
    """{module: shard number 1..shards}: longest first onto the least loaded shard (ties: the lower shard)."""
    median = statistics.median(known.values()) if known else 1.0
    cost = {m: known.get(m, median) for m in modules}
    load = [0.0] * shards
    out = {}
    for m in sorted(modules, key=lambda m: (-cost[m], m)):
        s = min(range(shards), key=lambda k: (load[k], k))
        out[m] = s + 1
        load[s] += cost[m]
    return out


def _module(item):
    return item.nodeid.split("::", 1)[0]


def load_known():
    try:
        return {k: float(v) for k, v in json.loads(DURATIONS.read_text()).items()}
    except FileNotFoundError:
        return {}


def pytest_collection_modifyitems(config, items):
    shard = parse_shard(os.environ.get("TEST_SHARD", ""))
    if shard is None:
        return
    i, n = shard
    owner = deal({_module(it) for it in items}, n, load_known())
    keep = [it for it in items if owner[_module(it)] == i]
    dropped = [it for it in items if owner[_module(it)] != i]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
    items[:] = keep


_spent = {}


def pytest_runtest_logreport(report):
    _spent[_module(report)] = _spent.get(_module(report), 0.0) + report.duration


def pytest_sessionfinish(session):
    out = os.environ.get("TEST_DURATIONS_OUT")
    if out and _spent:
        Path(out).write_text(json.dumps({m: round(s, 2) for m, s in sorted(_spent.items())}, indent=0) + "\n")


def pytest_report_header(config):
    shard = os.environ.get("TEST_SHARD")
    if shard:
        return f"shard {shard} of the pass (lab/pytest_shards.py), dealt by {len(load_known())} known module durations"
