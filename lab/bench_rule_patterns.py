"""CPU time of one change set's effect check over the stored traffic (configuration.findings.traffic_findings: every
stored digest row walked through the draft's query rules), for ordinary rule sets and hostile ones (issue 34: the
per-request budget of rule pattern searches, settings.RULE_WALK_BUDGET_S).

    .venv/bin/python -m lab.bench_rule_patterns [--rows 5000] [--repeat 3]

Prints, per case, the CPU seconds of one effect check (the median of --repeat) and what it said: how many rules were
measured and how many were reported as not measured.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ.setdefault("DJANGO_DEBUG", "1")

import django  # noqa: E402

django.setup()

from apps.configuration import content as C  # noqa: E402
from apps.configuration.findings import traffic_findings  # noqa: E402
from apps.configuration.tables import MYSQL_QUERY_RULES, MYSQL_USERS, typed_row  # noqa: E402
from apps.digests.selectors import Traffic, TrafficRow  # noqa: E402

_SYSBENCH = [
    "SELECT c FROM sbtest{t} WHERE id=?",
    "SELECT c FROM sbtest{t} WHERE id BETWEEN ? AND ?",
    "SELECT SUM(k) FROM sbtest{t} WHERE id BETWEEN ? AND ?",
    "SELECT c FROM sbtest{t} WHERE id BETWEEN ? AND ? ORDER BY c",
    "SELECT DISTINCT c FROM sbtest{t} WHERE id BETWEEN ? AND ? ORDER BY c",
    "UPDATE sbtest{t} SET k=k+? WHERE id=?",
    "UPDATE sbtest{t} SET c=? WHERE id=?",
    "DELETE FROM sbtest{t} WHERE id=?",
    "INSERT INTO sbtest{t} (id,k,c,pad) VALUES (?,?,?,?)",
    "SELECT o.id,o.total,c.name FROM orders{t} o JOIN customers c ON c.id=o.customer_id WHERE o.status IN (?,?,?,...)",
]
# Ordinary routing patterns, as operators write them: anchored verbs, table names, FOR UPDATE, a few alternations.
ORDINARY = [
    r"^SELECT.*FOR UPDATE$",
    r"^SELECT",
    r"^(UPDATE|DELETE|INSERT)",
    r"sbtest{i}\b",
    r"FROM orders{i} ",
    r"^SELECT c FROM sbtest{i} WHERE id=\?$",
    r"(?i)^select .* from customers",
    r"JOIN customers c ON",
    r"^SELECT SUM\(k\) FROM sbtest{i}",
    r"WHERE id BETWEEN \? AND \? ORDER BY c$",
]
# Just under PCRE's match limit (about 2.4 ms a search): each copy is made distinct so that none shares another's
# per-pattern budget.
COSTLY = r"^(((\w)+|(\w)*)+|\w)+(;|=|$|{i}z)"
AT_THE_LIMIT = r"^(\w+\s?)*$|^{i}z"


def rows(n):
    texts = [q.format(t=t) for t in range(1, 10_000) for q in _SYSBENCH]
    return [TrafficRow(f"0x{i:016X}", texts[i], "app", "sbtest", "10.0.0.5", 100 + i % 7, 10_000) for i in range(n)]


def target(patterns):
    rules = [
        typed_row(
            MYSQL_QUERY_RULES,
            {"rule_id": 1000 + i, "active": 1, "match_digest": p, "apply": 0, "destination_hostgroup": 101},
            strict=False,
        )
        for i, p in enumerate(patterns)
    ]
    out = C.empty()
    out["mysql_query_rules"] = rules
    out["mysql_users"] = [typed_row(MYSQL_USERS, {"username": "app", "default_hostgroup": 100}, strict=False)]
    return out, {(r["rule_id"],) for r in rules}


def run(name, patterns, traffic, repeat):
    content, changed = target(patterns)
    times = []
    for _ in range(repeat):
        started = time.thread_time()
        found = traffic_findings(content, changed, traffic, {})
        times.append(time.thread_time() - started)
    shares = sum(f.key == "rule_traffic_share" for f in found)
    unmeasured = [f for f in found if f.key in ("regex_match_limit", "rules_not_measured")]
    print(
        f"{name:<44} {statistics.median(times):7.3f} s CPU  {shares:5} share findings  "
        f"{len(unmeasured):5} not-measured/limit findings" + (f"  first: {unmeasured[0].label}" if unmeasured else "")
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    traffic = Traffic(rows=rows(args.rows), seconds=3600)
    print(f"{args.rows} stored rows; load average {os.getloadavg()[0]:.1f}")
    for count in (50, 200, 500):
        run(
            f"{count} ordinary rules",
            [ORDINARY[i % len(ORDINARY)].format(i=i) for i in range(count)],
            traffic,
            args.repeat,
        )
    for count in (10, 100, 1000):
        run(f"{count} costly rules (just under the limit)", [COSTLY.format(i=i) for i in range(count)], traffic, 1)
    run("1000 rules at the match limit", [AT_THE_LIMIT.format(i=i) for i in range(1000)], traffic, 1)


if __name__ == "__main__":
    main()
