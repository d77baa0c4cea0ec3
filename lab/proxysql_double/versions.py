"""The ProxySQL versions the double can answer as (`--version 2.5|2.6|2.7|3.0`).

2.7 is the captured 2.7.1 schema (schema/). The other versions differ from it as ProxySQL's own source says
at their tags (lab/reference/versions/proxysql-<v>.json, read from source, not from a running binary):
admin tables they lack or add, tables whose columns differ, variables they lack or add, the checksum rows
of runtime_checksums_values. Only the admin (main) schema and the variables differ here; stats tables stay 2.7.1's.
2.5 was also checked on a real 2.5.5 (proxysql-2.5.5-captured.json): the variables' defaults and the
stats_mysql_global names come from that capture, and admin-hash_passwords (2.5 only) hashes passwords at LOAD
MYSQL USERS TO RUNTIME (engine.py). 3.0 was checked on a real 3.0 built from the v3.0 branch head
(proxysql-3.0-captured.json): its variables (the pgsql- ones too, which the source facts do not read) and their
defaults, the pgsql_* rows of runtime_checksums_values, the stats_mysql_global names and the pgsql tables of stats and
monitor come from that capture, and LOAD MYSQL QUERY RULES TO RUNTIME swaps mirror_flagOUT and mirror_hostgroup as
that build does (engine.py).
"""

import json
from pathlib import Path

FACTS_DIR = Path(__file__).resolve().parent.parent / "reference" / "versions"
DEFAULT = "2.7"
# what `SELECT @@version` answers, by version (the source ref each was read from: see the facts' "source")
FULL = {"2.5": "2.5.5", "2.6": "2.6.6", "2.7": "2.7.1", "3.0": "3.0.0"}
# Defaults of variables that 2.7.1 lacks (not captured from a binary: read from the source's defaults).
EXTRA_DEFAULTS = {
    "mysql-default_tx_isolation": "READ-COMMITTED",  # 2.5: MYSQL_DEFAULT_TX_ISOLATION (include/MySQL_Thread.h)
    "admin-hash_passwords": "true",  # 2.5: lib/ProxySQL_Admin.cpp variables.hash_passwords=true
    "admin-pgsql_ifaces": "0.0.0.0:6132",  # 3.0: lib/ProxySQL_Admin.cpp strdup("0.0.0.0:6132"); a real
    # 3.0 started without it showed the same
}
# mysql-* variables ProxySQL adds outside mysql_thread_variables_names (MySQL_Variables), seen in the 2.7.1
# capture; assumed in every version.
TRACKED = ("mysql-default_charset", "mysql-default_collation_connection")
# What a real binary of the version showed (capture.py), where one was built: its variables' defaults and its
# stats_mysql_global names are taken from there.
CAPTURED = {"2.5": "proxysql-2.5.5-captured.json", "3.0": "proxysql-3.0-captured.json"}
# one node's own values (its version string, listeners, the admin credentials it was started with): the double's own
NODE_VALUES = (
    "admin-version",
    "admin-mysql_ifaces",
    "mysql-interfaces",
    "admin-admin_credentials",
    "admin-pgsql_ifaces",
    "pgsql-interfaces",
)
# 3.0's PostgreSQL listener when none is configured, as a real 3.0 started without one showed it (it listens on
# 0.0.0.0:6133 all the same: lib/PgSQL_Thread.cpp sets that default after global_variables is filled)
NODE_DEFAULTS = {"pgsql-interfaces": ""}
_FACTS = {}


def facts(version):
    if version not in FULL:
        raise ValueError(f"unknown ProxySQL version {version!r}: one of {', '.join(FULL)}")
    if version not in _FACTS:
        _FACTS[version] = json.loads((FACTS_DIR / f"proxysql-{version}.json").read_text())
    return _FACTS[version]


class Profile:
    """What one version changes in the double's 2.7.1 schema."""

    def __init__(self, version, schema):
        self.version = version or DEFAULT
        self.full = FULL[self.version]
        self.banner = f"{self.full}-lab-double"
        self.ddl = dict(schema.ddl)
        self.variables = dict(schema.variables)
        self.main_tables = list(schema.tables["main"])
        # runtime_checksums_values has a mysql_servers_v2 row from 2.6 on (v2.6.6 lib/ProxySQL_Admin.cpp; none in v2.5.5)
        self.has_mysql_servers_v2 = self.version != "2.5"
        self.status_names = None  # stats_mysql_global's names, when they are not 2.7.1's
        # runtime_checksums_values rows of modules the double does not sync (3.0's pgsql_*): (name, version, checksum)
        self.other_checksums = []
        # stats and monitor tables 2.7.1 lacks (3.0's stats_pgsql_*, pgsql_server_*_log): (schema, table) -> columns
        self.other_tables = {}
        # LOAD MYSQL QUERY RULES TO RUNTIME puts mirror_hostgroup in mirror_flagOUT and mirror_flagOUT in
        # mirror_hostgroup: the real 3.0 built from the v3.0 branch head does (its lib/ProxySQL_Admin.cpp passes the
        # two columns to MySQL_Query_Processor::new_query_rule in the other order), and so routes by the swapped
        # values; sysown/proxysql#4867, fixed by #4872 (2025-03), after the snapshot
        self.swaps_mirror_columns = self.version == "3.0"
        if self.version == DEFAULT:
            return
        mine, base = facts(self.version), facts(DEFAULT)
        tables, base_tables = mine["tables"]["admin"], base["tables"]["admin"]
        for table in list(self.main_tables):
            if table not in tables:
                self.main_tables.remove(table)
                self.ddl.pop(("main", table), None)
            elif tables[table] != base_tables.get(table):
                self.ddl[("main", table)] = mine["create"][table]
        for table in sorted(set(tables) - set(base_tables)):
            self.main_tables.append(table)
            self.ddl[("main", table)] = mine["create"][table]
        self.main_tables.sort()
        names = {f"mysql-{n}" for n in mine["variables"]["mysql"]} | {f"admin-{n}" for n in mine["variables"]["admin"]}
        names |= set(TRACKED)
        self.variables = {n: v for n, v in self.variables.items() if n in names}
        for name in sorted(names - set(self.variables)):
            self.variables[name] = EXTRA_DEFAULTS.get(name, "")
        if self.version in CAPTURED:
            real = json.loads((FACTS_DIR / CAPTURED[self.version]).read_text())
            # 2.5.5's own defaults (mysql-server_version 5.5.30, have_ssl false... changed in 2.6.0)
            self.variables.update(
                {n: v for n, v in real["global_variables"].items() if n in self.variables and n not in NODE_VALUES}
            )
            # 3.0's pgsql- variables (lib/PgSQL_Thread.cpp: not in the source facts), with the capture's defaults
            for name, value in real["global_variables"].items():
                if name.startswith("pgsql-") and name not in self.variables:
                    self.variables[name] = NODE_DEFAULTS.get(name, value) if name in NODE_VALUES else value
            self.status_names = set(real["stats_mysql_global"])  # 2.5.5 has no mysql_listener_paused
            self.other_checksums = [
                (name, int(ver), csum)
                for name, ver, _epoch, csum in real["runtime_checksums_values"]["rows"]
                if name.startswith("pgsql_")
            ]
            for table_schema in ("stats", "monitor"):
                for table, columns in real["tables"].get(table_schema, {}).items():
                    if table not in schema.tables[table_schema]:
                        self.other_tables[(table_schema, table)] = columns
