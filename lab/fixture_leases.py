"""Sharing a lab between pytest sessions (several runs, xdist workers): each session holds a lease file;
the lab is stopped at the end only by the session that started it, once no other session holds it."""

import os
from contextlib import contextmanager

import psutil


def _live_leases(lease_dir):
    pids = []
    for f in lease_dir.glob("*"):
        try:
            pid = int(f.name)
        except ValueError:
            continue
        if pid == os.getpid():
            continue
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
        if alive:
            pids.append(pid)
        else:
            f.unlink(missing_ok=True)  # a session that died without its teardown
    return pids


@contextmanager
def leased(lab):
    """Bring `lab` up (it has up(), down(), _lock() and base_dir) and yield it for a session.

    Teardown stops it only if this session started it (nothing was running) and no other live session
    holds a lease. LAB_KEEP=1 always keeps it up and hands it over (later sessions treat it as
    pre-existing)."""
    started_marker = lab.base_dir / "started-by-pytest"
    lease_dir = lab.base_dir / "pytest-sessions"
    with lab._lock():
        result = lab.up()
        if not result["was_running"]:
            started_marker.write_text(f"{os.getpid()}\n")
        lease_dir.mkdir(parents=True, exist_ok=True)
        lease = lease_dir / str(os.getpid())
        lease.write_text("")
    try:
        yield lab
    finally:
        with lab._lock():
            lease.unlink(missing_ok=True)
            if os.environ.get("LAB_KEEP") == "1":
                started_marker.unlink(missing_ok=True)
            elif started_marker.exists() and not _live_leases(lease_dir):
                lab.down()
                started_marker.unlink(missing_ok=True)


def held_by_others(base_dir):
    """Whether a live pytest session (another test run on this machine) holds a lease on the lab in base_dir."""
    from pathlib import Path

    lease_dir = Path(base_dir) / "pytest-sessions"
    return lease_dir.is_dir() and bool(_live_leases(lease_dir))


if __name__ == "__main__":  # python -m lab.fixture_leases DIR...: exit 0 when another test run holds one of them
    import sys

    sys.exit(0 if any(held_by_others(d) for d in sys.argv[1:]) else 1)
