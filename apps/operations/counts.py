"""The fleet's operations for /metrics: how many by cluster, kind and state, and the run times of those that ended
(a histogram), kept up to date without reading every operation at every scrape.

A year of operations is tens of thousands of rows, each carrying its plan (kilobytes of JSON: on SQLite the columns
after it, timings among them, are read through its overflow pages): counting them all at every scrape cost 100 ms
at 20,000 operations and grew with every one. But an operation that ended never changes again (its state is
final), so a process counts it once: each scrape reads only the operations after the last one counted for good,
and those counted while not ended yet (planned, running, rollback or finish pending...), by primary key.

An operation is counted for good only once it is older than GRACE_S: until then it is read again at each scrape.
So a row that commits late (its transaction began before a row with a higher id committed) is still found, and
nothing is counted twice. A changed database (another one, or rows removed: a restore) starts the count again.
"""

import threading
from collections import Counter
from itertools import accumulate

from django.db import connection
from django.db.models import FloatField, Q
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast

from apps.operations.choices import OperationState
from apps.operations.models import Operation

# Operation durations (seconds): a switchover takes tens of milliseconds, a drain waits up to its timeout
# (5 s by default), a configuration change on many nodes longer.
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
ENDED = frozenset(str(s) for s in OperationState.finished())
GRACE_S = 300
IN_CHUNK = 500


class Histogram:
    """Run times (timings total_ms, as the executor measured them) per (kind, state): a count per bucket, the sum."""

    def __init__(self):
        self.counts = {}  # (kind, state) -> [n per bucket, then beyond the last]
        self.total_ms = Counter()

    def add(self, kind, state, ms):
        counts = self.counts.setdefault((kind, state), [0] * (len(DURATION_BUCKETS) + 1))
        counts[next((i for i, b in enumerate(DURATION_BUCKETS) if ms <= b * 1000), len(DURATION_BUCKETS))] += 1
        self.total_ms[kind, state] += ms

    def merged(self, other):
        out = Histogram()
        for h in (self, other):
            for key, counts in h.counts.items():
                mine = out.counts.setdefault(key, [0] * len(counts))
                out.counts[key] = [a + b for a, b in zip(mine, counts)]
            out.total_ms.update(h.total_ms)
        return out

    def cumulative(self):
        """{(kind, state): ([(le, cumulative count)...] ending with +Inf, total seconds)}."""
        return {
            key: (list(zip([*DURATION_BUCKETS, float("inf")], accumulate(counts))), self.total_ms[key] / 1000)
            for key, counts in sorted(self.counts.items())
        }


class Snapshot:
    def __init__(self, ended, unended, histogram):
        self.ended = ended  # Counter (cluster_id, kind, state) -> operations that ended
        self.unended = unended  # the same for the operations not ended
        self.histogram = histogram


class OperationCounts:
    def __init__(self):
        self._lock = threading.Lock()
        self._start(None)

    def _start(self, database):
        self.database = database
        self.upto = 0  # every operation up to this id is counted for good, or in self.unended
        self.unended = set()  # ids up to self.upto not ended when read: read again at each scrape
        self.ended = Counter()
        self.histogram = Histogram()

    def snapshot(self, now):
        with self._lock:
            self._start_again_if_changed()
            recent, recent_histogram, unended = Counter(), Histogram(), Counter()
            horizon, settled = now - GRACE_S, True
            for pk, cluster_id, kind, state, created_at, run_ms in self._rows():
                key, ended = (cluster_id, kind, state), state in ENDED
                if pk <= self.upto:  # read before, not ended then
                    if ended:
                        self.unended.discard(pk)
                        self._count(self.ended, self.histogram, key, run_ms)
                    else:
                        unended[key] += 1
                    continue
                settled = settled and created_at is not None and created_at.timestamp() < horizon
                if settled:  # counted for good from now on
                    self.upto = pk
                    if ended:
                        self._count(self.ended, self.histogram, key, run_ms)
                    else:
                        self.unended.add(pk)
                        unended[key] += 1
                elif ended:
                    self._count(recent, recent_histogram, key, run_ms)
                else:
                    unended[key] += 1
            return Snapshot(self.ended + recent, unended, self.histogram.merged(recent_histogram))

    @staticmethod
    def _count(counter, histogram, key, run_ms):
        counter[key] += 1
        if run_ms is not None:  # an operation that never ran (refused at start, expired) has no run time
            histogram.add(key[1], key[2], run_ms)

    def _rows(self):
        """The operations read again: those not ended when last read, then every one after self.upto, by id."""
        fields = ("pk", "cluster_id", "kind", "state", "created_at", "run_ms")
        run_ms = Cast(KeyTextTransform("total_ms", "timings"), FloatField())
        unended = sorted(self.unended)
        for i in range(0, len(unended), IN_CHUNK):
            yield from (
                Operation.objects.filter(pk__in=unended[i : i + IN_CHUNK])
                .annotate(run_ms=run_ms)
                .values_list(*fields)
                .order_by("pk")
            )
        yield from (
            Operation.objects.filter(Q(pk__gt=self.upto)).annotate(run_ms=run_ms).values_list(*fields).order_by("pk")
        )

    def _start_again_if_changed(self):
        database = (connection.vendor, connection.settings_dict.get("HOST"), connection.settings_dict.get("NAME"))
        last = Operation.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        if database != self.database or last < self.upto:
            self._start(database)


TALLY = OperationCounts()  # one per process
