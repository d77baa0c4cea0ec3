"""CPU time of planning a change set for a cluster of N ProxySQL nodes (issue 40's "a change set planned for 50
nodes"), in one process: lab doubles served by another process (so their CPU is not counted), a private Redis, a
scratch SQLite database; the cluster adopted from its first node through the product's adopt service, the other
nodes added as rows of the inventory; a change set of four edits (a server's weight, a new server, a mirror rule, a
variable) planned with configuration.change_set.plan_change_set: every node read, its SQL and undo, the effect check,
the per-node diffs.

    .venv/bin/python -m lab.bench_plan_cost [--nodes 50] [--plans 5]

Prints the CPU ms of one plan (the median of --plans, after one plan left out: it opens the connections' modules
and fills the per-process caches). lab/tests/test_budgets.py runs it against docs/budgets.json.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lab import bench_monitoring as bm
from lab import demo
from lab.cpu_calibration import calibration_ms

REPO = bm.REPO


def setup(lab, nodes, workdir):
    """The doubles seeded as the seeds' pair, Redis, the scratch database with the cluster; returns the change set."""
    redis_url = bm.start_redis(lab)
    db = Path(workdir) / "plan-cost.sqlite3"
    env = {
        **bm.BENCH_ENV,
        "DATABASE_URL": f"sqlite:///{db}",
        "REDIS_URL": redis_url,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    ports = bm.pick_ports(21000 + (os.getpid() % 50) * 60, nodes, bm.port_free)
    bm.start_doubles(lab, ports, 1)
    for port in ports:
        bm.admin_sql(port, *demo.seed_statements(), "LOAD MYSQL SERVERS TO RUNTIME", "SAVE MYSQL SERVERS TO DISK")
    bm.reset_database(env["DATABASE_URL"])
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from apps.audit.actor import Actor
    from apps.clients.proxysql import ProxySQLAdmin
    from apps.configuration import adoption, services
    from apps.fleet.models import ProxySQLNode

    call_command("migrate", verbosity=0)
    with ProxySQLAdmin("127.0.0.1", ports[0], *bm.ADMIN, connect_timeout=5, read_timeout=10) as admin:
        snapshot = adoption.read_snapshot(admin)
        monitor = adoption.read_monitor_credentials(admin)
    plan = adoption.plan_adoption(
        snapshot, cluster_name="plan-bench", node_name="proxysql-1", admin_host="127.0.0.1", admin_port=ports[0]
    )
    assert plan.ok, plan.errors
    adoption.apply_adoption(
        plan,
        admin_user=bm.ADMIN[0],
        admin_password=bm.ADMIN[1],
        monitor=monitor,
        actor=Actor.command(label="plan benchmark"),
    )
    first = ProxySQLNode.objects.select_related("cluster").get(admin_port=ports[0])
    cluster = first.cluster
    for i, port in enumerate(ports[1:], start=2):
        ProxySQLNode.objects.create(
            cluster=cluster,
            name=f"proxysql-{i}",
            admin_host="127.0.0.1",
            admin_port=port,
            admin_user=bm.ADMIN[0],
            admin_password=bm.ADMIN[1],
            version=first.version,
        )
    user = get_user_model().objects.create_user("plan-bench", is_superuser=True)
    v1 = services.latest(cluster)
    row = next(r for r in v1.content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3312)
    edits = [
        {"op": "upsert", "table": "mysql_servers", "key": [101, "127.0.0.1", 3312], "row": {**row, "weight": 20000}},
        {
            "op": "upsert",
            "table": "mysql_servers",
            "row": {"hostgroup_id": 200, "hostname": "127.0.0.1", "port": 3313, "comment": "mirror target"},
        },
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 5, "active": 1, "match_digest": "^INSERT", "mirror_hostgroup": 200, "apply": 0},
        },
        {"op": "set", "table": "global_variables", "name": "mysql-mirror_max_concurrency", "value": "100"},
    ]
    return services.start_change_set(cluster, actor=Actor.command(user), reason="plan benchmark", edits=edits)


def measure(cs, plans):
    """CPU ms of one plan_change_set (median of `plans`, the first plan left out), with the plan's node count."""
    from apps.configuration.change_set import plan_change_set

    plan, _ = plan_change_set(cs)
    planned_nodes = len(plan.steps[0].nodes)
    spent = []
    for _ in range(plans):
        started = time.process_time()
        plan_change_set(cs)
        spent.append(time.process_time() - started)
    return {"nodes planned": planned_nodes, "cpu_ms_per_plan": round(statistics.median(spent) * 1000, 1)}


def run(nodes, plans, workdir=None):
    workdir = Path(
        workdir or tempfile.mkdtemp(prefix="plan-cost-", dir=bm.BENCH_DIR if bm.BENCH_DIR.exists() else None)
    )
    lab = bm.Lab(workdir)
    try:
        cs = setup(lab, nodes, workdir)
        return {**measure(cs, plans), "calibration_ms": calibration_ms()}
    finally:
        lab.stop_all()


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python -m lab.bench_plan_cost", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--plans", type=int, default=5)
    ap.add_argument(
        "--workdir", help="where the scratch database and the processes' logs go (default: var/bench/plan-cost-*)"
    )
    args = ap.parse_args(argv)
    sys.path.insert(0, str(REPO))
    print(json.dumps(run(args.nodes, args.plans, args.workdir)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
