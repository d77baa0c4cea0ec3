"""bin/bench-metrics runs end to end at a tiny scale: a smoke test of the command (the benchmark itself is not part
of the suite; its figures are in docs/benchmarks.md)."""

import re
import subprocess
import sys
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[2]


def run_bench(tmp_path, *args):
    """bin/bench-metrics at a tiny scale, in its own scratch database; returns what it printed."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "lab.bench_metrics",
            *args,
            "--database-url",
            f"sqlite:///{tmp_path / 'bench.sqlite3'}",
            "--out-dir",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    return out.stdout


def test_bench_metrics_runs_at_tiny_scale_and_stops_what_it_started(tmp_path):
    report = run_bench(tmp_path, "--nodes", "4", "--requests", "2", "--operations", "30", "--mirror-windows", "2")
    assert re.search(
        r"\| `/metrics` server time, as Prometheus asks \(Accept-Encoding: gzip\) \| < 500 ms \| p50 [\d,]+ ms", report
    )
    assert re.search(r"on the wire \(gzip\) [\d.]+ MB; uncompressed [\d.]+ MB", report)
    assert re.search(
        r"one target per cluster \(2 targets, 2 rounds, gzip\): server time per scrape \| \| p50 [\d.]+ ms", report
    )
    assert re.search(r"\| `/metrics/pool` size per scrape \| < 10 MB \| the largest [\d.]+ kB uncompressed", report)
    assert "the same text: yes" in report
    stopped = re.search(r"stopped (\d+) processes \(pids ([\d ]+)\); none left running", report)
    assert stopped, report[-2000:]
    pids = [int(p) for p in stopped[2].split()]
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def test_bench_metrics_realistic_names_rename_the_fleet_and_count_bytes_by_kind(tmp_path):
    stdout = run_bench(
        tmp_path,
        "--nodes",
        "2",
        "--requests",
        "1",
        "--operations",
        "10",
        "--mirror-windows",
        "1",
        "--names",
        "realistic",
    )
    assert "Fleet (realistic names: see --names): 2 ProxySQL nodes" in stdout
    groups = re.search(
        r"\| bytes by kind of series over /metrics and a round of /metrics/pool \(lines, uncompressed\) \| \| "
        r"pool rows \(pool_\*\) ([\d,]+) lines",
        stdout,
    )
    assert (
        groups and int(groups[1].replace(",", "")) == 6 * 9
    )  # 6 series of 9 rows of the node that answers (the first is down)
    body = (tmp_path / "metrics.txt").read_text()
    assert (
        'proxysql_fleet_backend_up{cluster="orders-000-eu-west-1",server="db-000-0.eu-west-1a.db.example.com:3306"}'
        in body
    )
    assert 'node="proxysql-eu-west-1a-000"' in body and "bench-0000" not in body and "127.0.0.1" not in body
    assert "proxysql_fleet_pool_" not in body  # /metrics/pool carries them
    pool = (tmp_path / "metrics-pool.txt").read_text()
    assert pool.count('proxysql_fleet_pool_connections_used{cluster="orders-000-eu-west-1",hostgroup=') == 9


def test_bench_metrics_lets_a_real_prometheus_scrape_it_over_http(tmp_path):
    stdout = run_bench(
        tmp_path, "--nodes", "4", "--requests", "1", "--operations", "10", "--mirror-windows", "1", "--prometheus", "5"
    )
    samples = re.search(r"\| `/metrics` samples, families \| \| ([\d,]+) samples", stdout)
    pool_samples = re.search(r"\| a whole round: every pool target once \| \|.*; ([\d,]+) samples \|", stdout)
    scraped = re.search(
        r"its 3 targets discovered from /metrics/targets.*body_size_limit 10MB\): /metrics \| \| "
        r"(\d+) scrapes, up 1 in each; scrape duration avg \d+ ms, max \d+ ms; [\d,]+ to ([\d,]+) samples "
        r"a scrape \(([\d,]+) in the last\), body as parsed up to ([\d.]+) MB",
        stdout,
    )
    pools = re.search(
        r"the pool targets \| \| 2 targets, (\d+) scrapes, up 1 in each; .*; ([\d,]+) samples in their last "
        r"scrapes",
        stdout,
    )
    total = re.search(r"scrapes over the body size limit 0; ([\d,]+) fleet series in its head", stdout)
    assert samples and pool_samples and scraped and pools and total, stdout[-3000:]
    assert int(scraped[1]) >= 1 and float(scraped[4]) > 0 and int(pools[1]) >= 2
    # Prometheus parsed every sample line the expositions have, and holds each of the last scrapes' as a series.
    assert scraped[2] == samples[1] and pools[2] == pool_samples[1]
    number = lambda text: int(text.replace(",", ""))  # noqa: E731
    assert number(scraped[3]) + number(pools[2]) == number(total[1])
    assert "none left running" in stdout
