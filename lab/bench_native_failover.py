"""The failover of ProxySQL's own manager measured on two real ProxySQL nodes (issue 33 §4): the writer backend killed
(SIGKILL) or stopped, then the time until every node's Monitor has placed a new writer ONLINE in the writer hostgroup
(Galera manager), or until the writer's row has left the writer hostgroup on every node (replication manager: it
promotes nobody; a new primary is the DBA's or their tooling's). Also when the writer stopped being ONLINE there (the
connection pool shuns it at the clients' first errors). Run by hand, never a test, in a network namespace of its own
over the lab of a lab set:

    LAB_SET=h-native-x unshare --net sh -c 'ip link set lo up && .venv/bin/python -m lab.galera up &&
        .venv/bin/python -m lab.bench_native_failover ../shared/proxysql/2.7.1/proxysql --manager galera;
        .venv/bin/python -m lab.galera down'
    (the same with lab.replication and --manager replication)

Two real ProxySQL nodes (admin 16432 and 16442), each with its own Monitor at its defaults, the layout of the
product's tests (galera: apps/alerts/tests/test_native_galera_drift.NATIVE, writer_is_also_reader --wiar; replication:
3321 in 10, the replicas in 20, check_type read_only), and one client inserting through each node's client port all
along (autocommit). Each round: the writer is killed at a random moment, both admin ports are read every 20 ms, the
figures printed as one JSON line; then the backend is started again and the first placement awaited.
"""

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

from lab.capture_native_galera_switch import Writer
from lab.real_proxysql import RealProxySQL

SERVER = "INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections) VALUES ({hg},'127.0.0.1',{port},{weight},2000)"
LAYOUTS = {
    "galera": {
        "writer": 100,
        "promotes": True,
        "ports": (3311, 3312, 3313),
        "rows": [(100, 3311, 1000), (100, 3312, 900), (100, 3313, 800)],
        "manager": (
            "INSERT INTO mysql_galera_hostgroups (writer_hostgroup,backup_writer_hostgroup,reader_hostgroup,"
            "offline_hostgroup,active,max_writers,writer_is_also_reader,max_transactions_behind) "
            "VALUES (100,102,101,9101,1,1,{wiar},100)"
        ),
    },
    "replication": {
        "writer": 10,
        "promotes": False,
        "ports": (3321, 3322, 3323),
        "rows": [(10, 3321, 1000), (20, 3322, 1000), (20, 3323, 1000)],
        "manager": "INSERT INTO mysql_replication_hostgroups (writer_hostgroup,reader_hostgroup,check_type) "
        "VALUES (10,20,'read_only')",
    },
}


def writers(proxy, W):
    return sorted(
        int(port)
        for (port,) in proxy.sql(f"SELECT port FROM runtime_mysql_servers WHERE hostgroup_id={W} AND status='ONLINE'")
    )


def anywhere(proxy, W):
    """Every row of the writer hostgroup, whatever its status (SHUNNED by the connection pool included)."""
    return sorted(int(port) for (port,) in proxy.sql(f"SELECT port FROM runtime_mysql_servers WHERE hostgroup_id={W}"))


def wait_writer(proxies, W, port, limit=60):
    deadline = time.monotonic() + limit
    while [writers(p, W) for p in proxies] != [[port]] * len(proxies):
        if time.monotonic() > deadline:
            raise RuntimeError(f"not placed: {[writers(p, W) for p in proxies]}")
        time.sleep(0.2)


def one_kill(lab, proxies, layout, how):
    """Kill (or stop) the writer at a random moment; read both nodes every 20 ms until the case is over."""
    W, old, promotes = layout["writer"], layout["ports"][0], layout["promotes"]
    time.sleep(random.uniform(0, 5))
    t0 = time.monotonic()
    (lab.kill if how == "kill" else lab.stop)(1)
    killed_in = time.monotonic() - t0
    left, removed, placed = {}, {}, {}
    deadline = t0 + 60
    while time.monotonic() < deadline:
        for n, proxy in enumerate(proxies):
            now = writers(proxy, W)
            t = round((time.monotonic() - t0) * 1000, 1)
            if old not in now:
                left.setdefault(n, t)
                if not promotes and old not in anywhere(proxy, W):  # Monitor moved it out (the pool only shuns)
                    removed.setdefault(n, t)
            if len(now) == 1 and now[0] != old:
                placed.setdefault(n, [now[0], t])
        if len(left) == len(proxies) and (len(placed) if promotes else len(removed)) == len(proxies):
            break
        time.sleep(0.02)
    return {
        "how": how,
        "kill_call_ms": round(killed_in * 1000, 1),
        "left_every_node_ms": max(left.values()) if len(left) == len(proxies) else None,
        "removed_every_node_ms": max(removed.values()) if len(removed) == len(proxies) else None,
        "new_writer_every_node_ms": max(t for _, t in placed.values()) if len(placed) == len(proxies) else None,
        "new_writer": sorted({w for w, _ in placed.values()}),
        "load": round(os.getloadavg()[0], 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--manager", choices=list(LAYOUTS), default="galera")
    parser.add_argument("--wiar", type=int, default=1, help="galera: writer_is_also_reader")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--how", choices=("kill", "stop"), default="kill")
    parser.add_argument("--workdir", default="/tmp/native-failover-bench")
    args = parser.parse_args()
    layout = LAYOUTS[args.manager]
    if args.manager == "galera":
        from lab.galera import GaleraLab as Lab
    else:
        from lab.replication import ReplicationLab as Lab
    lab = Lab()
    with lab.root_connection(1) as conn:
        conn.cursor().execute(
            "CREATE TABLE IF NOT EXISTS app.switch_load (id INT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(20), port INT)"
        )  # Writer's
    proxies = [
        RealProxySQL(
            args.binary, Path(args.workdir) / f"n{n}", 16432 + 10 * n, 16433 + 10 * n, name=f"native-failover-{n}"
        )
        for n in (0, 1)
    ]
    clients, results = [], []
    try:
        for proxy in proxies:
            proxy.start(fresh=True)
            proxy.sql(
                "DELETE FROM mysql_servers",
                "DELETE FROM mysql_galera_hostgroups",
                "DELETE FROM mysql_replication_hostgroups",
                *[SERVER.format(hg=hg, port=port, weight=w) for hg, port, w in layout["rows"]],
                layout["manager"].format(wiar=args.wiar),
                f"INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','app',{layout['writer']})",
                "LOAD MYSQL USERS TO RUNTIME",
                "LOAD MYSQL SERVERS TO RUNTIME",
            )
        wait_writer(proxies, layout["writer"], layout["ports"][0])
        clients = [Writer(p.client_port, f"failover-{n}") for n, p in enumerate(proxies)]
        for c in clients:
            c.start()
        for _ in range(args.rounds):
            before = [len(c.errors) for c in clients]
            line = one_kill(lab, proxies, layout, args.how)
            line["client_errors"] = sum(len(c.errors) for c in clients) - sum(before)
            print(json.dumps(line), flush=True)
            results.append(line)
            lab.start(1)
            wait_writer(proxies, layout["writer"], layout["ports"][0], limit=90)
            time.sleep(2)
        key = "new_writer_every_node_ms" if args.manager == "galera" else "removed_every_node_ms"
        figures = [r[key] for r in results if r[key] is not None]
        print(
            json.dumps(
                {
                    "manager": args.manager,
                    "wiar": args.wiar,
                    "measure": key,
                    "rounds": len(results),
                    "figures": figures,
                    "median": statistics.median(figures) if figures else None,
                    "rows": sum(c.rows for c in clients),
                    "errors": sum(len(c.errors) for c in clients),
                }
            )
        )
    finally:
        for c in clients:
            c.stop.set()
        for proxy in proxies:
            print("proxysql:", proxy.stop())


if __name__ == "__main__":
    main()
