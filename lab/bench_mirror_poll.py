"""What measuring mirror loss adds to the query digest poll (a command, not a test).

    .venv/bin/python -m lab.bench_mirror_poll [--nodes 200] [--rounds 20]

The 2-5 s monitoring poll is unchanged (bin/bench-monitoring's figures stand). The digest poll, every
MONITOR_DIGEST_INTERVAL_S per node, adds one read of the mirroring rules and, on a node with mirror
rules, one read of their hit counters; the window's figures are computed from the digests that poll reads
anyway. This starts N ProxySQL admin lab doubles in one process (seeded like the seeds' pair; half of them
mirror the writer's INSERTs, saturated, under writer traffic), times those reads over the wire per node
next to the stats_mysql_global read the poll already makes, times the computation of a window with
100,000 digest deltas, and prints the machine.
"""

import argparse
import os
import statistics
import time


def _p(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    os.environ.setdefault("DJANGO_DEBUG", "1")
    import django

    django.setup()

    from apps.clients.proxysql import ProxySQLAdmin
    from apps.digests import mirroring
    from apps.monitoring import mirror
    from lab import demo
    from lab.bench_monitoring import machine
    from lab.proxysql_double import DoubleServer, ProxySQLDouble

    server = DoubleServer().start_background()
    doubles = [ProxySQLDouble(port=0, server=server).start() for _ in range(args.nodes)]
    try:
        for i, d in enumerate(doubles):
            statements = list(demo.seed_statements())
            if i % 2 == 0:
                statements += [
                    "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,"
                    "mirror_hostgroup,apply) VALUES (10,1,'^INSERT',100,101,1)",
                    "LOAD MYSQL QUERY RULES TO RUNTIME",
                    "SET mysql-mirror_max_concurrency=1",
                    "LOAD MYSQL VARIABLES TO RUNTIME",
                ]
            demo.admin_sql(d.port, *statements, user=d.user, password=d.password)
            d.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="auto_increment")
        admins = [ProxySQLAdmin("127.0.0.1", d.port, d.user, d.password) for d in doubles]
        times = {
            "stats_mysql_global (already read)": [],
            "mirror reads, node with a mirror rule": [],
            "mirror reads, node without": [],
        }
        for _ in range(args.rounds):
            for i, admin in enumerate(admins):
                t0 = time.perf_counter()
                stats = admin.stats_global()
                t1 = time.perf_counter()
                state = mirroring.read(admin, stats)
                t2 = time.perf_counter()
                times["stats_mysql_global (already read)"].append(t1 - t0)
                times[
                    "mirror reads, node with a mirror rule" if state["hits"] else "mirror reads, node without"
                ].append(t2 - t1)
        for admin in admins:
            admin.close()

        rules = [
            {
                "rule_id": 10 * k,
                "active": 1,
                "username": None,
                "schemaname": None,
                "flagIN": 0,
                "match_digest": f"^(INSERT|UPDATE) INTO t{k}",
                "match_pattern": None,
                "negate_match_pattern": 0,
                "re_modifiers": "CASELESS",
                "destination_hostgroup": 100,
                "mirror_hostgroup": 200 + k % 2,
                "mirror_flagOUT": None,
                "apply": 1,
            }
            for k in range(1, 6)
        ]
        deltas = [
            (200 + i % 2 if i < 2000 else 100, "app", "app", f"INSERT INTO t{i % 7} VALUES (?)", 3)
            for i in range(100_000)
        ]
        started = time.perf_counter()
        window = mirror.measure(
            rules,
            {r["rule_id"]: 1000 for r in rules},
            {},
            {"questions": 10**6, "stmt_execute": 0},
            {"questions": 0, "stmt_execute": 0},
            [d for d in deltas if d[0] in (200, 201)],
            30.0,
        )
        measure_ms = (time.perf_counter() - started) * 1000
    finally:
        for d in doubles:
            d.stop()
        server.stop()

    m = machine()
    print(
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), {m['ram_gib']:.1f} GiB RAM, Linux {m['kernel']}, "
        f"Python {m['python']}, Django {m['django']}; load average {os.getloadavg()[0]:.1f}"
    )
    print(f"{args.nodes} ProxySQL admin doubles in one process, {args.rounds} rounds, one read after another:")
    for name, values in times.items():
        print(
            f"  {name}: p50 {_p(values, 0.5):.2f} ms, p95 {_p(values, 0.95):.2f} ms, mean "
            f"{statistics.mean(values) * 1000:.2f} ms ({len(values)} reads)"
        )
    print(
        f"  one window's figures from 2,000 mirror-hostgroup deltas (of 100,000) and 5 rules: {measure_ms:.1f} ms "
        f"({sum(w.digests for w in window.rules)} digests attributed)"
    )


if __name__ == "__main__":
    main()
