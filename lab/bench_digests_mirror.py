"""Server time of the digest list when a mirror rule copies part of the traffic (issue 36: the ranking leaves the
mirrored copies out over the whole window). Not collected by pytest (no test_ prefix; not a timed test):

    DB=sqlite .venv/bin/pytest lab/bench_digests_mirror.py -q -s
    TEST_NETNS=1 DB=mariadb TEST_LAB_SETS=<set> bin/test lab/bench_digests_mirror.py -q -s

Shape: one cluster of 2 ProxySQL nodes, DIGESTS distinct digests in the last hour, each in a raw row every 5 minutes
on both nodes (hostgroup 100); a mirror rule on each node copies the INSERTs (a third of the digests) to hostgroup
101, where a tenth of the digests also run on their own. The copies' rows are marked as the poll marks them
(DigestStat.mirrored), with the rule rows the poll's marks come from. 12 x (2 x DIGESTS x 1.43) rows: 480,000 at 14,000 digests.
"""

import os
import random
import statistics
import time

import pytest

from apps.digests.models import RAW, Digest, DigestPoll, DigestSource, DigestStat
from apps.digests.tests.factories import fleet, polls
from apps.fleet.models import MirrorRule

DIGESTS = int(os.environ.get("BENCH_DIGESTS", 14_000))
REQUESTS = int(os.environ.get("BENCH_REQUESTS", 10))  # (SQLite runs in this process: its CPU time is the query's)


def fill(nodes, now, mirror_rules=True):
    rng = random.Random(36)
    digests = Digest.objects.bulk_create(
        [
            Digest(
                digest=f"0x{i + 1:016X}",
                first_polled_at=0,
                digest_text=(
                    f"INSERT INTO t{i % 50} (a, b) VALUES (?,?) /* {i} */"
                    if i % 3 == 0
                    else f"SELECT a, b FROM t{i % 50} WHERE c{i} = ?"
                ),
            )
            for i in range(DIGESTS)
        ],
        batch_size=2000,
    )
    digests = list(Digest.objects.order_by("pk"))
    rows = []
    for node in nodes:
        if mirror_rules:
            MirrorRule.objects.create(
                proxysql_node=node, rule_id=10, match_digest="^INSERT", destination_hostgroup=100, mirror_hostgroup=101
            )
        writer = DigestSource.objects.create(node=node, hostgroup=100, username="app", schemaname="shop")
        mirror = DigestSource.objects.create(node=node, hostgroup=101, username="app", schemaname="shop")
        for ts in range(now - 3600, now, 300):
            for i, d in enumerate(digests):
                count = 1 + int(rng.paretovariate(1.2))
                rows.append(
                    DigestStat(
                        resolution=RAW,
                        ts=ts,
                        source=writer,
                        digest=d,
                        count_star=count,
                        sum_time=count * 900,
                        max_time=2000,
                    )
                )
                if i % 3 == 0:  # the copies: slower, more of them than the executions (two mirror rules' worth)
                    rows.append(
                        DigestStat(
                            resolution=RAW,
                            ts=ts,
                            source=mirror,
                            digest=d,
                            count_star=count * 4,
                            sum_time=count * 40_000,
                            max_time=90_000,
                            mirrored=mirror_rules,
                        )
                    )
                elif i % 10 == 1:
                    rows.append(
                        DigestStat(
                            resolution=RAW,
                            ts=ts,
                            source=mirror,
                            digest=d,
                            count_star=count,
                            sum_time=count * 700,
                            max_time=1500,
                        )
                    )
            if len(rows) > 50_000:
                DigestStat.objects.bulk_create(rows, batch_size=5000)
                rows = []
        polls(node, now - 3600, now, every=30)
        if mirror_rules:  # as the poll marks them (DigestStat.mirrored, DigestPoll.copy_rows)
            DigestPoll.objects.filter(node=node, ts__in=range(now - 3600, now, 300)).update(copy_rows=DIGESTS // 3)
    DigestStat.objects.bulk_create(rows, batch_size=5000)


@pytest.mark.parametrize("mirroring", [True, False], ids=["mirror-rules", "no-mirror-rule"])
def test_digest_list_server_time(db, viewer_client, mirroring):
    now = int(time.time())
    cluster, nodes = fleet(2, "shop")
    started = time.perf_counter()
    fill(nodes, now, mirror_rules=mirroring)
    print(
        f"\n{DigestStat.objects.count():,} rows, {DIGESTS:,} digests, filled in {time.perf_counter() - started:.1f} s;"
        f" load average {os.getloadavg()[0]:.1f}; mirror rules: {mirroring}"
    )
    for query in (
        {"window": "1h", "sort": "count"},
        {"window": "1h", "sort": "total"},
        {"window": "1h", "sort": "max"},
        {"window": "1h", "sort": "count", "cluster": cluster.pk},
        {"window": "1h", "sort": "count", "page": 50},
    ):
        assert viewer_client.get("/digests/", query).status_code == 200
        wall, cpu = [], []
        for _ in range(REQUESTS):
            t, c = time.perf_counter(), time.process_time()
            viewer_client.get("/digests/", query)
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
        label = "&".join(f"{k}={v if k != 'cluster' else 'c'}" for k, v in query.items())
        print(
            f"  /digests/?{label:38} p50 {statistics.median(wall) * 1000:7.1f} ms"
            f"  max {max(wall) * 1000:7.1f} ms; CPU of this process p50 {statistics.median(cpu) * 1000:7.1f} ms"
        )
