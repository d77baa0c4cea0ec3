"""bin/bench-shards runs end to end at a tiny scale: a smoke test of the command (the benchmark itself is not
part of the suite; its figures are in docs/benchmarks.md)."""

import re
import subprocess
import sys
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def test_bench_shards_kills_a_lease_holder_and_stops_what_it_started(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.bench_shards",
            "--nodes",
            "8",
            "--interval",
            "1",
            "--warmup",
            "1",
            "--duration",
            "5",
            "--kill-after",
            "2",
            "--database-url",
            f"sqlite:///{tmp_path / 'bench.sqlite3'}",
            "--workdir",
            str(tmp_path / "run"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    report = out.stdout
    assert re.search(r"killed \(SIGKILL, its process group\) [\d.]+ s in while holding shard \d's lease", report), (
        report
    )
    assert re.search(r"takeover: shard \d's next round started [\d.]+ s after the kill", report), report
    assert "| polled twice or more | 0 | 0 |" in report and "cores per 1,000 polls/s" in report, report
    stopped = re.search(r"stopped (\d+) processes \(pids ([\d ]+)\); none left running", report)
    assert stopped, report[-2000:]
    pids = [int(p) for p in stopped[2].split()]
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
