"""Serve one or more ProxySQL admin LAB DOUBLES from one process.

    python -m lab.proxysql_double --port 16032 --port 16033 --user admin --password admin \
        [--datadir var/proxysql-double] [--host 127.0.0.1] [--ports 17000-17999] [--version 2.5|2.6|2.7|3.0]

Prints one line per endpoint when it is ready, then serves until SIGTERM/SIGINT. With --datadir,
each endpoint keeps its disk layer in <datadir>/<port>/proxysql.db.
"""

import argparse
import asyncio
import os
import resource
import signal
import sys

from .versions import DEFAULT, FULL
from .server import DoubleServer


def parse_ports(args):
    ports = list(args.port or [])
    for spec in args.ports or []:
        for part in spec.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                ports.extend(range(int(lo), int(hi) + 1))
            elif part:
                ports.append(int(part))
    return ports or [6032]


def raise_fd_limit(needed):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, needed))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


async def main_async(args):
    ports = parse_ports(args)
    raise_fd_limit(len(ports) * 4 + 256)
    server = DoubleServer()
    server.loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        server.loop.add_signal_handler(sig, stop.set)
    variables = {}
    for item in args.set or []:
        k, _, v = item.partition("=")
        variables[k] = v
    for port in ports:
        eng = await server.add(
            port=port,
            host=args.host,
            user=args.user,
            password=args.password,
            datadir=args.datadir,
            variables=variables,
            datadir_per_port=True,
            version=args.version,
        )
        print(
            f"proxysql-double {eng.profile.banner} (lab double of the ProxySQL admin interface) "
            f"ready on {eng.host}:{eng.port} user={args.user}" + (f" datadir={eng.datadir}" if eng.datadir else ""),
            flush=True,
        )
    print(f"proxysql-double: {len(ports)} endpoint(s) ready, pid {os.getpid()}", flush=True)
    await stop.wait()
    await server.close_all()
    print("proxysql-double: stopped", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m lab.proxysql_double", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--port", type=int, action="append", help="an endpoint port (repeatable; 0 = any free)")
    ap.add_argument("--ports", action="append", help="port ranges, e.g. 17000-17999 or 17000,17002")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--user", default="admin")
    ap.add_argument("--password", default="admin")
    ap.add_argument("--datadir", default=None, help="disk layer per endpoint in DATADIR/<port>/proxysql.db")
    ap.add_argument(
        "--set",
        action="append",
        metavar="VAR=VALUE",
        help="initial variable, like proxysql.cnf (e.g. --set mysql-threads=2)",
    )
    ap.add_argument(
        "--version",
        choices=sorted(FULL),
        default=DEFAULT,
        help="the ProxySQL version the endpoints answer as (tables, columns, variables: lab/reference/versions/)",
    )
    args = ap.parse_args(argv)
    try:
        asyncio.run(main_async(args))
    except OSError as e:
        print(f"proxysql-double: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
