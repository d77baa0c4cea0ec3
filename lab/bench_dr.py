"""DR channel failover times on the DR lab (a command, not a test).

    bin/bench-dr [--runs 3] [--interval 2] [--after-polls 1]

The DR lab (lab/dr.py: dc1 and dc2, three Galera nodes each, the channel dc1 -> dc2) in a scratch inventory
(SQLite under var/bench/), a private redis-server, and the channel polled in this process every --interval
seconds exactly as the backend task does it (apps.dr.polling.run_shard, then the automatic move): the beat
and the Celery worker are left out, the poll-and-move code is the product's. A write load runs on a dc1 node
that is not the source. Each run kills one end's node (SIGKILL) and measures from the kill:

- "moved": the channel-move operation finished (re-pointed or restarted elsewhere, both threads running);
- "caught up": moved, and dc2 holds every transaction dc1 had committed at the kill (the channel's own part:
  from then on it applies whatever dc1 commits);
- "applying": dc2 has applied a dc1 transaction committed after the kill (the channel applies again);
- for context, when dc1 committed its first transaction after the kill, and how long after it dc2 had it
  ("behind dc1": the delay the channel adds once dc1 commits again).

Galera itself stalls a cluster's commits for ~5 s after a member is SIGKILLed, until it evicts it: dc1's
commits after a source kill, and dc2's applies after a replica kill, wait for that; "applying" includes it.
After each run the data of both sides is compared (identical, or the run fails) and the dead node rejoins.
"""

import argparse
import os
import sys
import threading
import time

from lab import bench_monitoring as bm

REPO = bm.REPO


def _dc_seq(site, exclude=None):
    """Domain 1's sequence in the binlog of a running node of `site` (not node `exclude`)."""
    from contextlib import closing

    from lab.dr import gtid_map

    for node in site.nodes:
        if node.n != exclude and site.is_running(node.n):
            with closing(site.root_connection(node.n, timeout=1, read_timeout=2)) as conn:
                cur = conn.cursor()
                cur.execute("SELECT @@gtid_binlog_pos")
                return gtid_map(cur.fetchone()[0] or "").get(1, 0)
    return 0


def _galera_timeouts(lab):
    """evs.suspect_timeout and evs.inactive_timeout as a dc1 node runs them: how long a SIGKILLed member stalls
    its cluster's commits before it is evicted."""
    from contextlib import closing

    with closing(lab.dc1.root_connection(1)) as conn:
        cur = conn.cursor()
        cur.execute("SELECT @@wsrep_provider_options")
        options = {k.strip(): v.strip() for k, _, v in (p.partition(" = ") for p in cur.fetchone()[0].split(";"))}
    return ", ".join(f"{k} {options.get(k)}" for k in ("evs.suspect_timeout", "evs.inactive_timeout"))


def one_run(lab, side, interval):
    from apps.dr import polling
    from apps.dr.models import ReplicationChannel
    from apps.operations.models import Operation
    from lab.dr import WriteLoad, compare

    channel = ReplicationChannel.objects.select_related("source_server", "replica_server").get()
    site = lab.site("dc1" if side == "source" else "dc2")
    victim = next(
        n.n
        for n in site.nodes
        if n.port == (channel.source_server if side == "source" else channel.replica_server).port
    )
    writer = next(n.n for n in lab.dc1.nodes if n.port != channel.source_server.port)
    last_op = Operation.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    stop = threading.Event()

    rounds = []  # (seconds after the kill, how long the round took)

    def beat():  # the backend task's channel part, every interval, in this process
        while not stop.is_set():
            started = time.monotonic()
            polling.run_shard(0, 1)
            rounds.append((started - t0 if t0 else None, time.monotonic() - started))
            stop.wait(max(0.0, interval - (time.monotonic() - started)))

    t0 = None

    with WriteLoad(lab, node=writer) as load:
        time.sleep(1.0)
        poller = threading.Thread(target=beat, daemon=True)
        poller.start()
        time.sleep(interval * 0.37)  # the kill lands somewhere inside a poll interval
        t0, t0_wall = time.monotonic(), time.time()
        site.kill(victim)
        # Read just after the kill: whatever dc1 commits from now on reaches dc2 only through the moved channel
        # (the dead end neither serves nor applies it).
        before = _dc_seq(lab.dc1, exclude=victim if side == "source" else None)
        moved = caught_up = applying = committing = None
        while time.monotonic() - t0 < 60 and (moved is None or applying is None or caught_up is None):
            if committing is None and _dc_seq(lab.dc1, exclude=victim if side == "source" else None) > before:
                committing = time.monotonic() - t0
            applied = _dc_seq(lab.dc2, exclude=victim if side == "replica" else None)
            if caught_up is None and moved is not None and applied >= before:
                caught_up = time.monotonic() - t0
            if applying is None and applied > before:
                applying = time.monotonic() - t0
            if (
                moved is None
                and Operation.objects.filter(pk__gt=last_op, kind="channel_move")
                .exclude(state__in=["planned", "pending", "running"])
                .exists()
            ):
                moved = time.monotonic() - t0
            time.sleep(0.01)
        stop.set()
        poller.join()
        time.sleep(0.5)
    op = Operation.objects.filter(pk__gt=last_op, kind="channel_move").first()
    if op is None or op.state != "done":
        raise SystemExit(f"{side} run: the channel did not move ({op and op.state}: {op and op.error})")
    if None in (moved, caught_up, applying, committing):
        raise SystemExit(
            f"{side} run: not seen within 60 s: moved {moved}, caught up {caught_up}, applying {applying}, "
            f"dc1 committing {committing}"
        )
    result = compare(lab)
    if not result.identical:
        raise SystemExit(f"{side} run: the two sides differ: {result.line()}")
    lab.site("dc1" if side == "source" else "dc2").start(victim)
    # Where the time goes: the poll that saw the dead end planned the move at `detected`; the move itself took op_ms.
    return {
        "rounds": [(round(a, 2), round(b, 2)) for a, b in rounds if a is not None and a > -interval],
        "moved": moved,
        "caught_up": caught_up,
        "applying": applying,
        "committing": committing,
        "committed": load.committed,
        "op_ms": op.timings.get("total_ms"),
        "detected": op.created_at.timestamp() - t0_wall,
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--interval", type=float, default=2.0, help="poll interval (s)")
    parser.add_argument("--after-polls", type=int, default=1, help="failing polls before the channel moves")
    args = parser.parse_args(argv)

    work = REPO / "var" / "bench" / "dr"
    work.mkdir(parents=True, exist_ok=True)
    db = work / "dr.sqlite3"
    db.unlink(missing_ok=True)
    procs = bm.Lab(work)
    try:
        redis_url = bm.start_redis(procs)
        os.environ.update(
            DATABASE_URL=f"sqlite:///{db}",
            DJANGO_SETTINGS_MODULE="controlplane.settings",
            LOG_LEVEL="WARNING",
            DJANGO_DEBUG=os.environ.get("DJANGO_DEBUG", "1"),
            REDIS_URL=redis_url,
        )
        sys.path.insert(0, str(REPO))
        import django

        django.setup()
        from django.core.management import call_command

        from apps.dr.models import ReplicationChannel
        from apps.fleet.models import Cluster
        from lab.dr import DrLab, register_in_inventory

        call_command("migrate", verbosity=0)
        lab = DrLab()
        lab.up()
        lab.heal()
        register_in_inventory(lab)
        Cluster.objects.update(backend_poll_interval_s=args.interval)
        ReplicationChannel.objects.update(auto_failover_enabled=True, failover_after_polls=args.after_polls)
        m = bm.machine()
        print(f"Galera: {_galera_timeouts(lab)}")
        print(
            f"machine: {m['nproc']} x {m['cpu']}, {m['ram_gib']:.0f} GiB, Python {m['python']}; DR lab: 2 x 3 "
            f"MariaDB Galera nodes on this machine; poll every {args.interval:g} s, move after "
            f"{args.after_polls} failing poll(s); Django DB SQLite (scratch), redis-server private"
        )
        for side in ("source", "replica"):
            runs = [one_run(lab, side, args.interval) for _ in range(args.runs)]
            for i, r in enumerate(runs, 1):
                print(
                    f"  {side:<7} run {i}: detected and planned {r['detected']:.2f} s after the kill, "
                    f"moved {r['moved']:.2f} s after it (operation {r['op_ms']:.0f} ms), caught up {r['caught_up']:.2f} s, "
                    f"applying again {r['applying']:.2f} s after it (dc1 committed again {r['committing']:.2f} s after it, "
                    f"dc2 behind dc1 {r['applying'] - r['committing']:.2f} s); "
                    f"{r['committed']} transactions written, "
                    f"both sides identical; rounds (start after the kill, duration): {r['rounds']}"
                )
            moved = sorted(r["moved"] for r in runs)
            caught_up = sorted(r["caught_up"] for r in runs)
            applying = sorted(r["applying"] for r in runs)
            behind = sorted(r["applying"] - r["committing"] for r in runs)
            print(
                f"{side} death: moved median {moved[len(moved) // 2]:.2f} s (max {moved[-1]:.2f}), caught up median "
                f"{caught_up[len(caught_up) // 2]:.2f} s (max {caught_up[-1]:.2f}), applying again "
                f"median {applying[len(applying) // 2]:.2f} s (max {applying[-1]:.2f}), dc2 behind dc1's first commit "
                f"after the kill max {behind[-1]:.2f} s"
            )
    finally:
        procs.stop_all()


if __name__ == "__main__":
    main()
