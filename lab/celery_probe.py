"""Tasks for tests of the Celery worker itself (the broker lost under it): a worker started by a test with
`--include lab.celery_probe` runs them; product code never queues them."""

import time
from pathlib import Path

from celery import shared_task


@shared_task(name="lab.probe.hold", ignore_result=True)
def hold(seconds):
    """Keeps a pool process busy, so that the next message waits in the worker unacknowledged."""
    time.sleep(seconds)


@shared_task(name="lab.probe.mark", ignore_result=True)
def mark(path, text):
    """Leaves a trace the test reads: the worker consumed this message."""
    with Path(path).open("a") as out:
        out.write(text + "\n")
