"""A client writing through one ProxySQL node's client port as the application does (autocommit INSERTs, each taking an
auto-increment id), in a process of its own.

Why a process: a thread in the test's process timed its inserts with the executor's GIL. On a loaded machine the
executor's thread, descheduled while holding the GIL, kept the writer from reading its answer: a thread beside it that
only slept 10 ms woke up to 253 ms late at load 30, just before the drain, so a slowest insert grew by that stall,
not by anything ProxySQL did. In its own process the writer's timing is the client's, as an application would see it.
Imports nothing of Django: the spawned process loads only this module.
"""

import multiprocessing
import time

import MySQLdb

SLOW_MS = 200  # each insert slower than this is kept with when it began, to say where the time went


def write(port, tag, rows, slowest_ms, stop, slow, errors):
    conn = None
    while not stop.is_set():
        try:
            if conn is None:
                conn = MySQLdb.connect(host="127.0.0.1", port=port, user="app", passwd="app", db="app", autocommit=True)
            start, began = time.monotonic(), time.time()
            conn.cursor().execute("INSERT INTO app.native_load (tag) VALUES (%s)", (tag,))
            took = (time.monotonic() - start) * 1000
            with rows.get_lock():
                rows.value += 1
            if took > slowest_ms.value:
                slowest_ms.value = took
            if took > SLOW_MS:
                slow.put((began, took))
        except MySQLdb.MySQLError as exc:
            errors.put(str(exc))
            conn = None
    if conn is not None:
        conn.close()


class Writer:
    """Counts its rows, its errors, its slowest insert and each one over SLOW_MS (when it began, wall clock, and how
    long it took). start(), then stop.set() and join(); errors and slow are read after the join."""

    def __init__(self, port, tag):
        mp = multiprocessing.get_context("spawn")
        self.stop, self._rows, self._slowest = mp.Event(), mp.Value("q", 0), mp.Value("d", 0.0)
        self._slow, self._errors = mp.Queue(), mp.Queue()
        self.errors, self.slow = [], []
        self.process = mp.Process(
            target=write,
            args=(port, tag, self._rows, self._slowest, self.stop, self._slow, self._errors),
            daemon=True,
        )

    @property
    def rows(self):
        return self._rows.value

    @property
    def slowest_ms(self):
        return self._slowest.value

    def start(self):
        self.process.start()

    def join(self, timeout):
        # drain the queues before the join: a child with items in a queue's pipe does not exit until they are read
        deadline = time.monotonic() + timeout
        while self.process.is_alive() and time.monotonic() < deadline:
            self._collect()
            self.process.join(0.05)
        self._collect()
        if self.process.is_alive():
            self.process.kill()
            self.errors.append(f"the writer did not stop within {timeout} s")

    def _collect(self):
        for queue, into in ((self._slow, self.slow), (self._errors, self.errors)):
            while not queue.empty():
                into.append(queue.get())


def where_the_time_went(steps, writers):
    """Each step (key, start, duration) and each writer's slow inserts (start, duration), in ms from the drain's start:
    the message of a failed bound on the slowest insert."""
    t0 = next(s.started_at for s in steps if s.key == "drain").timestamp()
    return {
        "steps": [(s.key, round((s.started_at.timestamp() - t0) * 1000), round(s.duration_ms)) for s in steps],
        "slow inserts": [[(round((at - t0) * 1000), round(ms)) for at, ms in w.slow] for w in writers],
    }
