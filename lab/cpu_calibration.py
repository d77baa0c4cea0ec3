"""The speed of this machine's core, as one number: the CPU milliseconds a fixed piece of ordinary Python work takes
(dicts, strings, JSON, sorting: what a poll, a page or a plan mostly does), measured in the process that measures.

The budgets (docs/budgets.json) are CPU time, which holds on a loaded machine where wall time does not; but a core
of another machine may be twice as slow (CI machines were measured 2.2 times apart). So a figure is compared after
scaling it by budgets' calibration_ms over this machine's: the budget of a slower machine grows with it, and a
regression of the code still shows as one.
"""

import json
import statistics
import time


def _work():
    rows = [
        {
            "hostgroup": i % 7,
            "hostname": f"10.0.{i % 250}.{i % 13}",
            "port": 3306 + i % 3,
            "status": "ONLINE",
            "ConnUsed": str(i % 17),
            "Queries": str(i * 31),
        }
        for i in range(3000)
    ]
    text = json.dumps(rows)
    back = json.loads(text)
    total = 0
    for r in back:
        total += int(r["ConnUsed"]) + int(r["Queries"]) % 97
        r["key"] = (r["hostgroup"], r["hostname"], r["port"])
    back.sort(key=lambda r: (r["hostname"], -r["port"]))
    words = " ".join(r["hostname"] for r in back).split(".")
    return total + len(words)


def calibration_ms(rounds=7):
    """CPU ms of the fixed work, the median of `rounds` (the first, which warms the caches, left out)."""
    _work()
    spent = []
    for _ in range(rounds):
        started = time.process_time()
        _work()
        spent.append(time.process_time() - started)
    return round(statistics.median(spent) * 1000, 2)
