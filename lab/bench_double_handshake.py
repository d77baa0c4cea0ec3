"""How long the product's connect (TimedConnection: TCP probe, then the MySQL handshake on a thread) takes
against an in-process ProxySQL admin double, as the tests use it, and what delays it.

    .venv/bin/python -m lab.bench_double_handshake [--n 300] [--busy-threads 1] [--reader] [--host-process] [--json]

--busy-threads K: K threads of this process spin in pure Python meanwhile (a test process doing CPU work:
                  they compete with the double's loop thread and the connect thread for the GIL);
--own-process:    the double connected to runs in a process of its own (python -m lab.proxysql_double), not in
                  this one: what is left is the client's side of the connect;
--host-process:   both doubles are served by the tests' host process (lab.proxysql_double.host, what
                  TEST_DOUBLES=process gives the fixtures), not by a thread of this one;
--reader:         another thread reads the second double over the wire in a loop meanwhile (the executor's
                  pool on the other node: its statements run on the double's one loop thread).
Prints the connect time's distribution (ms), the answer time of one read on the connection just made
(`runtime_mysql_servers`, ms) and, for an in-process double, its loop lag (how late a 10 ms timer on its
loop fires). Run several at once, and with the machine loaded, to see the suite's conditions.
"""

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import statistics
import threading
import time

import django


def spin(stop):
    x = 0
    while not stop.is_set():
        for i in range(1000):
            x += i * i


def percentiles(values):
    values = sorted(values)
    pick = lambda q: values[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    return {
        "n": len(values),
        "median": round(statistics.median(values), 1),
        "p90": round(pick(0.9), 1),
        "p99": round(pick(0.99), 1),
        "max": round(values[-1], 1),
        "over_500": sum(v > 500 for v in values),
    }


async def lag_probe(lags, stop):
    while not stop.is_set():
        t = time.monotonic()
        await asyncio.sleep(0.01)
        lags.append((time.monotonic() - t - 0.01) * 1000)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--busy-threads", type=int, default=0)
    ap.add_argument("--reader", action="store_true")
    ap.add_argument("--own-process", action="store_true")
    ap.add_argument("--host-process", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings_tests")
    django.setup()
    from apps.clients.proxysql import ProxySQLAdmin
    from lab.proxysql_double import DoubleServer, ProxySQLDouble
    from lab.proxysql_double.host import ProcessDouble

    if args.host_process:
        server = None
        a, b = (ProcessDouble(port=0).start() for _ in range(2))
    else:
        server = DoubleServer().start_background()
        a, b = (ProxySQLDouble(port=0, server=server).start() for _ in range(2))
    port, elsewhere = a.port, None
    if args.own_process:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        elsewhere = subprocess.Popen(
            [sys.executable, "-m", "lab.proxysql_double", "--port", str(port)], stdout=subprocess.PIPE, text=True
        )
        while "ready, pid" not in elsewhere.stdout.readline():
            pass
    stop = threading.Event()
    lags = []
    probing = None if server is None else asyncio.run_coroutine_threadsafe(lag_probe(lags, stop), server.loop)
    helpers = [threading.Thread(target=spin, args=(stop,), daemon=True) for _ in range(args.busy_threads)]
    if args.reader:

        def read():
            with ProxySQLAdmin("127.0.0.1", b.port, "admin", "admin", connect_timeout=10, read_timeout=10) as admin:
                while not stop.is_set():
                    admin.servers("runtime")
                    admin.processlist()

        helpers.append(threading.Thread(target=read, daemon=True))
    for t in helpers:
        t.start()
    took, answered = [], []
    for _ in range(args.n):
        admin = ProxySQLAdmin("127.0.0.1", port, "admin", "admin", connect_timeout=10, read_timeout=10)
        t = time.monotonic()
        admin.wire.connect()
        took.append((time.monotonic() - t) * 1000)
        t = time.monotonic()
        admin.servers("runtime")
        answered.append((time.monotonic() - t) * 1000)
        admin.close()
        time.sleep(0.01)
    stop.set()
    if probing is not None:
        probing.result(5)
    out = {
        "pid": os.getpid(),
        "busy_threads": args.busy_threads,
        "reader": args.reader,
        "own_process": args.own_process,
        "host_process": args.host_process,
        "connect_ms": percentiles(took),
        "answer_ms": percentiles(answered),
        "loop_lag_ms": percentiles(lags) if lags else None,
    }
    print(json.dumps(out) if args.json else out)
    if elsewhere is not None:
        elsewhere.terminate()
        elsewhere.wait()
    a.stop()
    b.stop()
    if server is not None:
        server.stop()


if __name__ == "__main__":
    main()
