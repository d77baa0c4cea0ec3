"""bin/bench-monitoring runs end to end at a tiny scale: a smoke test of the command (the benchmark itself
is not part of the suite; its figures are in docs/benchmarks.md)."""

import re
import subprocess
import sys
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def test_bench_monitoring_runs_at_tiny_scale_and_stops_what_it_started(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.bench_monitoring",
            "--nodes",
            "4",
            "--interval",
            "1",
            "--warmup",
            "1",
            "--duration",
            "2",
            "--hang-duration",
            "2",
            "--backend-duration",
            "0",
            "--page-requests",
            "1",
            "--database-url",
            f"sqlite:///{tmp_path / 'bench.sqlite3'}",
            "--workdir",
            str(tmp_path / "run"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    report = out.stdout
    assert re.search(r"\| A: ProxySQL nodes \| 2 s \| [\d.]+ \|", report)
    assert "latest-state age, hung node" in report and "**Pages**" in report
    stopped = re.search(r"stopped (\d+) processes \(pids ([\d ]+)\); none left running", report)
    assert stopped, report[-2000:]
    pids = [int(p) for p in stopped[2].split()]
    assert len(pids) >= 6  # redis, 2 double processes, worker (+ its pool), beat
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
