"""The double's mirror queue as ProxySQL counts it: whole queries, never a float truncated below the cap.

The CI run of 62cd6da read Mirror_queue_length 99 six times in a row from a queue that was full: the model keeps the
queue as a float, and at the cap the share kept of each route summed to 99.99999999999999, which int() read as 99.
"""

import random
import threading

from lab.proxysql_double.traffic import TrafficModel


class NeverJitter(random.Random):
    """The sampling jitter (a reading caught while a thread pops) is off: what is left is the queue itself."""

    def random(self):
        return 0.99


def saturated_model():
    m = TrafficModel(threading.Lock(), seed=1)
    m.rng = NeverJitter()
    m.vars.update({"mysql-threads": "2", "mysql-mirror_max_concurrency": "1", "mysql-mirror_max_queue_length": "50"})
    m.mirror_latency_ms = 5.0
    return m


def test_a_full_mirror_queue_reads_its_cap_at_every_step_length():
    m = saturated_model()
    rng = random.Random(7)
    m._mirror_step = {(10, 101, 100, "w", 1, "app", "db"): 500.0}
    m._run_mirror_queue(0.1)  # full from here on
    readings = []
    for _ in range(2000):
        dt = rng.uniform(0.001, 0.2)
        # Two routes arrive faster than one slot serves them (200/s): the queue stays full.
        m._mirror_step = {
            (10, 101, 100, "w", 1, "app", "db"): rng.uniform(300, 2000) * dt,
            (11, 101, 100, "w", 2, "app", "db"): rng.uniform(0, 50) * dt,
        }
        m._run_mirror_queue(dt)
        readings.append(m.mirror_figures()[1])
    assert set(readings) == {100}, sorted(set(readings))


def test_the_queue_below_its_cap_reads_whole_queries():
    m = saturated_model()
    m._mirror_step = {(10, 101, 100, "w", 1, "app", "db"): 40.0}
    m._run_mirror_queue(0.1)  # 40 arrived, 20 served
    assert m.mirror_figures() == (1, 20)
