"""Benchmark of a configuration file's import: a YAML file with N query rules through the path the upload and
`manage.py config apply` take before the confirm (parse and validate, diff against the current version, the
change set, its plan saved as an operation); for N = 1,250, 2,500, 5,000 and 10,000 by default.

    bin/bench-config-file [--rules 1250,2500,5000,10000] [--nodes 1] [--profile N]

Uses a scratch SQLite database under var/bench/ and ProxySQL admin doubles in their own process (one cluster
of --nodes nodes, adopted). Prints the machine, then per N the file's size and the time of each stage:
read (files.read: YAML, every row typed and checked), diff (the edits from the current version), change set
(start_change_set: the edits applied once more, saved), plan (change_set.plan_and_save: nodes read, effect check,
statements per node, operation saved and audited), and the whole path again as the product runs it
(services.start_from_file + plan_and_save). --profile N prints the cProfile of the whole path at N rules.
Target: 10,000 rules under 5 s for the whole path.
"""

import argparse
import cProfile
import pstats
import time

import yaml

from lab.bench_config import free_ports, machine, scratch_django, start_doubles

TARGET_S = 5


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", default="1250,2500,5000,10000")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--profile", type=int, default=0, help="print the profile of the whole path at this N")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.rules.split(",")]

    scratch_django("config_file.sqlite3")
    print(f"machine: {machine()}; Django DB SQLite (scratch); {args.nodes} ProxySQL double(s) in a separate process")
    ports = free_ports(args.nodes)
    doubles = start_doubles(ports)
    try:
        cluster, user = adopt(ports)
        for n in counts:
            run_one(cluster, user, n, profile=n == args.profile)
    finally:
        doubles.terminate()
        doubles.wait(timeout=10)


def adopt(ports):
    from django.contrib.auth import get_user_model

    from apps.audit.actor import Actor
    from apps.clients.proxysql import ProxySQLAdmin
    from apps.configuration import adoption
    from lab import demo

    for port in ports:
        demo.admin_sql(
            port,
            "DELETE FROM mysql_query_rules",
            "LOAD MYSQL QUERY RULES TO RUNTIME",
            *demo.seed_statements(backend_ports=(33011, 33012, 33013)),
        )
    for i, port in enumerate(ports):
        with ProxySQLAdmin("127.0.0.1", port, "admin", "admin") as admin:
            snapshot = adoption.read_snapshot(admin)
        plan = adoption.plan_adoption(
            snapshot, cluster_name="bench-file", node_name=f"p{i}", admin_host="127.0.0.1", admin_port=port
        )
        assert plan.ok, plan.errors
        cluster, _ = adoption.apply_adoption(
            plan, admin_user="admin", admin_password="admin", actor=Actor.rule("bench")
        )
    user, _ = get_user_model().objects.get_or_create(username="bench")
    user.is_superuser = True
    user.save()
    return cluster, user


def file_text(cluster, rules):
    """The current version exported, with `rules` query rules in place of its own."""
    from apps.configuration import files, services

    doc = yaml.safe_load(files.export(services.latest(cluster)))
    doc["mysql_query_rules"] = [
        {
            "rule_id": k,
            "active": 1,
            "username": f"app{k % 50}",
            "match_digest": f"^SELECT .* FROM t{k}\\b",
            "destination_hostgroup": 101,
            "apply": 1,
            "comment": f"rule {k}",
        }
        for k in range(1, rules + 1)
    ]
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, width=120)


def run_one(cluster, user, rules, *, profile=False):
    from apps.audit.actor import Actor
    from apps.configuration import content as C
    from apps.configuration import files, services
    from apps.configuration.models import ChangeSet
    from apps.configuration import change_set
    from apps.operations.models import Operation

    text = file_text(cluster, rules)
    reason = f"{rules} rules"
    times = {}
    started = time.perf_counter()
    _, file_content = files.read(text, cluster)
    times["read"] = time.perf_counter() - started

    started = time.perf_counter()
    current = services.latest(cluster)
    edits = C.edits_between(current.content, files.target_from_file(current.content, file_content))
    times["diff"] = time.perf_counter() - started

    started = time.perf_counter()
    cs = services.start_change_set(
        cluster, actor=Actor.command(user), reason=reason, source="file", edits=edits, base=current
    )
    times["change set"] = time.perf_counter() - started

    started = time.perf_counter()
    change_set.plan_and_save(cs, actor=Actor.command(user))
    times["plan"] = time.perf_counter() - started

    profiler = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if profiler:
        profiler.enable()
    cs = services.start_from_file(cluster, text, actor=Actor.command(user), reason=reason)
    op = change_set.plan_and_save(cs, actor=Actor.command(user))
    if profiler:
        profiler.disable()
    whole = time.perf_counter() - started
    statements = sum(len(n["sql"]) for n in op.plan["steps"][0]["nodes"].values())
    print(
        f"  {rules:>6,} rules ({len(text) / 1024:6.0f} KiB, {len(edits):,} edits, {statements:,} statements): "
        + " · ".join(f"{k} {v:6.2f} s" for k, v in times.items())
        + f" · whole path {whole:6.2f} s{'' if rules < 10_000 else ' (target under %d s)' % TARGET_S}"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(40)
    # the next N starts from the same version: nothing planned here is confirmed
    Operation.objects.filter(cluster=cluster, state="planned").update(state="cancelled")
    ChangeSet.objects.filter(cluster=cluster, state=ChangeSet.State.PLANNED).update(state=ChangeSet.State.DISCARDED)


if __name__ == "__main__":
    main()
