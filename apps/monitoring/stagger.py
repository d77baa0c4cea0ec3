"""When each shard's rounds start: shard i of N at i/N of the interval, so the shards' rounds (and their
load on the workers, Redis and the database) are spread over the interval instead of all starting at once.

Each shard has a grid of slots, k * interval + (i / N) * interval in epoch seconds, and a node is polled
once per slot of its own interval. Beat ticks every shard every TICK_S at the shard's own offset within
the tick (PhasedSchedule), so a shard's ticks fall on its slots whenever the interval is a whole number
of ticks (the defaults, 2 s and 1 s, are); other intervals are polled at the first tick of each slot.
Pure: no Django, imported by controlplane/celery.py when beat's schedule is built.
"""

import math
import time
from datetime import timedelta

from celery.schedules import schedstate, schedule

TICK_S = 1.0
BACKEND_DEFAULT_INTERVAL_S = 1.0  # fleet.Cluster.backend_poll_interval_s's default


def phase_of(shard, shards, interval):
    return interval * shard / shards


def slot_start(now, interval, shard, shards, tolerance=0.0):
    """Start of the shard's slot that `now + tolerance` lies in (a tick a little early counts as on time)."""
    phase = phase_of(shard, shards, interval)
    return math.floor((now + tolerance - phase) / interval) * interval + phase


def tick_offset(shard, shards, interval):
    """Where in each beat tick the shard's task is sent: its phase within the tick."""
    return phase_of(shard, shards, interval) % TICK_S


class PhasedSchedule(schedule):
    """A beat schedule due at k * run_every + offset (epoch seconds), once per such instant; a beat that
    fell behind sends one task for the instants it missed, never a burst."""

    EARLY_S = 0.02  # beat wakes ~10 ms early (Scheduler.adjust): that counts as the instant itself

    def __init__(self, run_every=TICK_S, offset=0.0, app=None):
        super().__init__(run_every=timedelta(seconds=run_every), app=app)
        self.offset = offset % self.seconds

    def _latest(self, now):
        return math.floor((now + self.EARLY_S - self.offset) / self.seconds) * self.seconds + self.offset

    def is_due(self, last_run_at):
        now = time.time()
        latest = self._latest(now)
        next_in = max(latest + self.seconds - now, 0.001)
        if self.maybe_make_aware(last_run_at).timestamp() < latest - self.EARLY_S:
            return schedstate(True, next_in)
        return schedstate(False, next_in)

    def remaining_estimate(self, last_run_at):
        now = time.time()
        return timedelta(seconds=max(self._latest(now) + self.seconds - now, 0))

    def __repr__(self):
        return f"<phased: every {self.seconds:g} s at +{self.offset:.3f} s>"

    def __eq__(self, other):
        return isinstance(other, PhasedSchedule) and self.seconds == other.seconds and self.offset == other.offset

    def __reduce__(self):
        return self.__class__, (self.seconds, self.offset)
