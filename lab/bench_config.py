"""Benchmark of configuration change sets: a 20-row change applied to N ProxySQL nodes (lab doubles, in their
own process) from confirm to verified runtime, and the same revert; for N = 10, 25, 50 by default.

    bin/bench-config [--nodes 10,25,50] [--rows 20]

Uses a scratch SQLite database under var/bench/. Prints the machine, and per N the plan time (every node read,
effect check, statements rendered), confirm -> verified (apply + LOAD + read back on every node), and the whole
run to the recorded version, for the change and for its revert.
"""

import argparse
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def machine():
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    mem = next((int(line.split()[1]) // 1024 for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    return f"{os.cpu_count()} cores ({cpu}), {mem} MiB RAM, Python {platform.python_version()}"


def free_ports(n):
    """n consecutive free ports on 127.0.0.1 (the doubles' CLI takes a range)."""
    for base in range(21000, 60000, 97):
        ok = True
        for port in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return list(range(base, base + n))
    raise SystemExit("no free port range")


def scratch_django(name):
    """Django set up on a new scratch SQLite database var/bench/<name>, migrated."""
    bench = REPO / "var" / "bench"
    bench.mkdir(parents=True, exist_ok=True)
    db = bench / name
    db.unlink(missing_ok=True)
    os.environ.update(
        DATABASE_URL=f"sqlite:///{db}",
        DJANGO_SETTINGS_MODULE="controlplane.settings",
        LOG_LEVEL="WARNING",
        DJANGO_DEBUG=os.environ.get("DJANGO_DEBUG", "1"),
    )
    sys.path.insert(0, str(REPO))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def start_doubles(ports):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lab.proxysql_double",
            "--ports",
            f"{ports[0]}-{ports[-1]}",
            "--user",
            "admin",
            "--password",
            "admin",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    for line in proc.stdout:
        if "endpoint(s) ready" in line:
            return proc
    raise SystemExit("the doubles did not start")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="10,25,50")
    parser.add_argument("--rows", type=int, default=20)
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.nodes.split(",")]
    scratch_django("config.sqlite3")
    print(f"machine: {machine()}; Django DB SQLite (scratch); doubles in a separate process")
    ports = free_ports(sum(counts))
    doubles = start_doubles(ports)
    try:
        for i, n in enumerate(counts):
            first = sum(counts[:i])  # each cluster its own nodes
            run_one(ports[first : first + n], args.rows, backends=(33011 + 100 * i, 33012 + 100 * i, 33013 + 100 * i))
    finally:
        doubles.terminate()
        doubles.wait(timeout=10)


def run_one(ports, rows, backends):
    from django.contrib.auth import get_user_model

    from apps.audit.actor import Actor
    from apps.clients.proxysql import ProxySQLAdmin
    from apps.configuration import adoption as adopt
    from apps.configuration import services
    from apps.fleet.models import Cluster
    from apps.configuration import change_set
    from apps.operations import executor
    from apps.operations import services as operations
    from lab import demo

    name = f"bench-{len(ports)}"
    for port in ports:
        demo.admin_sql(
            port,
            "DELETE FROM mysql_query_rules",
            "LOAD MYSQL QUERY RULES TO RUNTIME",
            *demo.seed_statements(backend_ports=backends),
        )  # backends of their own per cluster
    for i, port in enumerate(ports):
        with ProxySQLAdmin("127.0.0.1", port, "admin", "admin") as admin:
            snapshot = adopt.read_snapshot(admin)
        plan = adopt.plan_adoption(
            snapshot, cluster_name=name, node_name=f"p{i}", admin_host="127.0.0.1", admin_port=port
        )
        assert plan.ok, plan.errors
        adopt.apply_adoption(plan, admin_user="admin", admin_password="admin", actor=Actor.rule("bench"))
    cluster = Cluster.objects.get(name=name)
    user, _ = get_user_model().objects.get_or_create(username="bench")
    user.is_superuser = True
    user.save()

    def change(cs_factory, label):
        started = time.perf_counter()
        cs = cs_factory()
        op = change_set.plan_and_save(cs, actor=Actor.command(user))
        planned = time.perf_counter()
        operations.confirm(op, actor=Actor.command(user), enqueue=False)
        confirmed = time.perf_counter()
        executor.run(op.pk)
        done = time.perf_counter()
        op.refresh_from_db()
        assert op.state == "done", op.error
        steps = {s.key: s for s in op.steps.all()}
        verified_ms = sum(steps[k].duration_ms for k in ("apply", "verify"))
        print(
            f"  {label:<7} {len(ports):>3} nodes: plan {1000 * (planned - started):7.0f} ms · confirm → verified "
            f"{1000 * (confirmed - planned) + verified_ms:7.0f} ms (apply {steps['apply'].duration_ms:.0f}, "
            f"verify {steps['verify'].duration_ms:.0f}) · confirm → version recorded {1000 * (done - planned):7.0f} ms "
            f"· {sum(len(n['sql']) for n in op.plan['steps'][0]['nodes'].values())} statements"
        )

    base = services.latest(cluster)

    def forward():
        cs = services.start_change_set(cluster, actor=Actor.command(user), reason=f"{rows} rows")
        edits = []
        for k in range(rows):
            if k % 2:
                edits.append(
                    {
                        "op": "upsert",
                        "table": "mysql_query_rules",
                        "row": {
                            "rule_id": 100 + k,
                            "active": 1,
                            "match_digest": f"^SELECT .* FROM t{k}\\b",
                            "destination_hostgroup": 101,
                            "apply": 1,
                        },
                    }
                )
            else:
                edits.append(
                    {
                        "op": "upsert",
                        "table": "mysql_servers",
                        "row": {
                            "hostgroup_id": 9101,
                            "hostname": "127.0.0.1",
                            "port": backends[0] + 10 + k,
                            "status": "OFFLINE_SOFT",
                            "comment": f"spare {k}",
                        },
                    }
                )
        for edit in edits:
            services.add_edit(cs, edit, actor=Actor.command(user))
        return cs

    change(forward, "change")
    change(lambda: services.revert_to(cluster, base, actor=Actor.command(user), reason="revert"), "revert")


if __name__ == "__main__":
    main()
