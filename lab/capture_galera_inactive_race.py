"""Does a real ProxySQL's Galera manager act right after a LOAD that makes its row inactive? (issue 33: the product's
native Galera drain loads the drained placement, the weights swapped, with the mysql_galera_hostgroups row inactive;
twice in a few runs under load a node then showed the new writer placed by Monitor while the old one's session still
held the drain). Run by hand, never a test, as lab/capture_native_galera_switch.py (whose node and layout it uses):

    LAB_SET=h-race unshare --net sh -c 'ip link set lo up && .venv/bin/python -m lab.galera up &&
        .venv/bin/python -m lab.capture_galera_inactive_race ../shared/proxysql/2.7.1/proxysql --trials 30;
        .venv/bin/python -m lab.galera down'

Each trial starts from the layout placed by Monitor (3311 the writer, the row active), waits a random part of a
second (the LOAD lands anywhere in Monitor's cycle), then per variant:
- together: the drained placement (placed_soft_swapped) loaded with the row inactive in one LOAD (the product's drain);
- off_first: the current placement loaded unchanged with the row inactive, 0.3 s, then the drained placement;
- variables_first: LOAD MYSQL VARIABLES TO RUNTIME (an active manager checks at once), 0-50 ms (the product until now:
  its autoinc_off step, then the drain), then as together;
- variables_off_first: the same, then as off_first;
- drain_then_variables: as together, then at once SET mysql-auto_increment_delay_multiplex=0 and LOAD MYSQL VARIABLES
  TO RUNTIME (the product's native Galera drain since this capture: the delay lowered after the servers' LOAD).
It samples runtime hostgroup 100 every 10 ms for 1.5 s after the drained LOAD and reads Monitor's Galera log: a trial
is "moved" when hostgroup 100 ever held anything but 3311 OFFLINE_SOFT. One JSON line per trial, then a summary.
"""

import argparse
import json
import random
import time
from pathlib import Path

from lab.capture_native_galera_switch import CASES, GALERA, LAYOUT, load, settle
from lab.real_proxysql import RealProxySQL

PLACED_NOW = [(100, 3311, 1000, "ONLINE")] + [r for r in CASES["placed_soft"] if r[0] != 100]


def writer_hostgroup(proxy):
    return tuple(
        (int(port), status)
        for port, status in proxy.sql(
            "SELECT port, status FROM runtime_mysql_servers WHERE hostgroup_id=100 ORDER BY port"
        )
    )


def checks_since(proxy, since_us):
    return [
        (int(port), round((int(us) - since_us) / 1000, 1))
        for port, us in proxy.sql(
            f"SELECT port, time_start_us FROM monitor.mysql_server_galera_log WHERE time_start_us >= {since_us} "
            "ORDER BY time_start_us"
        )
    ]


def trial(proxy, variant):
    if variant == "drain_then_variables":  # each trial starts from the default, as a product's switchover would
        proxy.sql("SET mysql-auto_increment_delay_multiplex=5", "LOAD MYSQL VARIABLES TO RUNTIME")
    load(proxy, LAYOUT)
    settle(proxy, 3311)
    time.sleep(random.random())
    if variant.startswith("variables_"):
        proxy.sql("LOAD MYSQL VARIABLES TO RUNTIME")
        time.sleep(random.random() * 0.05)  # the product: its autoinc_off step, then the drain at once
    off_checks = None
    if variant.endswith("off_first"):
        off_at = int(time.time() * 1e6)
        load(proxy, PLACED_NOW, active=0)
        time.sleep(0.3)
        off_checks = checks_since(proxy, off_at)
    loaded_at = int(time.time() * 1e6)
    load(proxy, CASES["placed_soft_swapped"], active=0)
    if variant == "drain_then_variables":
        proxy.sql("SET mysql-auto_increment_delay_multiplex=0", "LOAD MYSQL VARIABLES TO RUNTIME")
    seen, t0 = [], time.monotonic()
    while time.monotonic() - t0 < 1.5:
        rows = writer_hostgroup(proxy)
        if not seen or seen[-1][1] != rows:
            seen.append((round((time.monotonic() - t0) * 1000), rows))
        time.sleep(0.01)
    return {
        "variant": variant,
        "moved": any(rows != ((3311, "OFFLINE_SOFT"),) for _, rows in seen),
        "hostgroup_100": seen,
        "checks_after_drain_ms": checks_since(proxy, loaded_at),
        "checks_after_off_ms": off_checks,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("binary")
    parser.add_argument("--workdir", default="/tmp/galera-inactive-race")
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--variants", nargs="*", default=["together", "off_first"])
    args = parser.parse_args()
    proxy = RealProxySQL(args.binary, Path(args.workdir), 16432, 16433, name="inactive-race")
    summary = {}
    try:
        version = proxy.start(fresh=True)
        proxy.sql("DELETE FROM mysql_galera_hostgroups", GALERA)
        print(json.dumps({"version": version, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}), flush=True)
        for n in range(args.trials):
            for variant in args.variants:
                line = trial(proxy, variant)
                summary.setdefault(variant, [0, 0])
                summary[variant][0] += line["moved"]
                summary[variant][1] += 1
                print(json.dumps(line), flush=True)
        print(json.dumps({"moved_of_trials": summary}), flush=True)
    finally:
        print("proxysql:", proxy.stop())


if __name__ == "__main__":
    main()
