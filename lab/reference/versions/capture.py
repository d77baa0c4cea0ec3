"""Captures what a running ProxySQL admin endpoint shows about its version, into one small JSON file.

Hand-run against a REAL ProxySQL (or, to compare, a double), never by the test suite:

    python lab/reference/versions/capture.py HOST PORT USER PASSWORD OUT.json [--describe TEXT] [--command TEXT]
    python lab/reference/versions/capture.py HOST PORT USER PASSWORD OUT.json --transcript FILE.jsonl [--replay replay.py]

Run it on a fresh node (a new datadir, nothing loaded): it reads `SELECT @@version`, `SHOW DATABASES`,
`SHOW TABLES FROM <schema>` for main, disk, stats, monitor, stats_history and each table's columns (the column
names of `SELECT * FROM <schema>.<table> LIMIT 0`), `SHOW CREATE TABLE` of the main tables (a digest of each), every
`global_variables` row (name and value), `runtime_checksums_values`, the names in `stats_mysql_global`, and what a
few statements answer (PROBES), then runs SEQUENCES (which change the node and put it back) and records every answer.
With --transcript it instead replays one of ../shared/proxysql-reference's transcripts on the (fresh) node with
replay.py's own run/judge and adds, under "replay", the number of steps passed and each failing step with the node's
full answer, to OUT.json.
"""

import argparse
import datetime
import hashlib
import importlib.util
import json
import os
import re

import MySQLdb

SCHEMAS = ("main", "disk", "stats", "monitor", "stats_history")
# statements whose answer (rows, affected rows, info message or error) is recorded as the node gave it
PROBES = (
    "SET mysql-handle_warnings=1",  # 2.6+ variable: unknown to 2.5
    "SELECT COUNT(*) FROM global_variables WHERE variable_name='mysql-handle_warnings'",
    "SET admin-cluster_mysql_servers_sync_algorithm=1",  # 2.6+ variable
    "SELECT * FROM mysql_servers_ssl_params",  # 2.6+ table
    "SELECT * FROM runtime_mysql_servers_ssl_params",
    "SELECT hostgroup_settings FROM mysql_hostgroup_attributes",  # 2.6+ column
    "SHOW CREATE TABLE mysql_servers_ssl_params",
    "SHOW TABLES LIKE 'mysql_servers%'",
    "SHOW CREATE TABLE no_such_table",
    "SET mysql-default_tx_isolation='READ-COMMITTED'",  # 2.5 variable (2.6 dropped it)
)
# statement sequences run in order after the read-only part (they change the node, and put back what they change):
# every answer is recorded
SEQUENCES = {
    # admin-hash_passwords (2.5 only): what LOAD MYSQL USERS TO RUNTIME does to each kind of password, what SAVE
    # MYSQL USERS TO MEMORY brings back, and the same with the variable off
    "hash_passwords": (
        "DELETE FROM mysql_users",
        "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('u_clear','secret1',100)",
        "INSERT INTO mysql_users (username,password,default_hostgroup) "
        "VALUES ('u_hashed','*2470C0C06DEE42FD1618BB99005ADCA2EC9D1E19',100)",
        "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('u_empty','',100)",
        "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('u_null',NULL,100)",
        "INSERT INTO mysql_users (username,password,default_hostgroup,active) VALUES ('u_inactive','secret3',100,0)",
        "LOAD MYSQL USERS TO RUNTIME",
        "SELECT username, password, active, frontend, backend FROM runtime_mysql_users ORDER BY username, frontend",
        "SELECT username, password FROM mysql_users ORDER BY username, frontend",
        "SAVE MYSQL USERS TO DISK",
        "SELECT username, password FROM disk.mysql_users ORDER BY username, frontend",
        "SAVE MYSQL USERS TO MEMORY",
        "SELECT username, password, frontend, backend FROM mysql_users ORDER BY username, frontend",
        "SET admin-hash_passwords='false'",
        "LOAD ADMIN VARIABLES TO RUNTIME",
        "SELECT variable_value FROM runtime_global_variables WHERE variable_name='admin-hash_passwords'",
        "DELETE FROM mysql_users",
        "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('u_clear','secret1',100)",
        "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('u_null',NULL,100)",
        "LOAD MYSQL USERS TO RUNTIME",
        "SELECT username, password, frontend, backend FROM runtime_mysql_users ORDER BY username, frontend",
        "SET admin-hash_passwords='true'",
        "LOAD ADMIN VARIABLES TO RUNTIME",
        "DELETE FROM mysql_users",
        "LOAD MYSQL USERS TO RUNTIME",
        "SAVE MYSQL USERS TO DISK",
    ),
}


def text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def run(conn, sql):
    cur = conn.cursor()
    try:
        cur.execute(sql)
    except MySQLdb.MySQLError as e:
        return {"error": [e.args[0], str(e.args[1]) if len(e.args) > 1 else str(e)]}
    out = {"error": None}
    if cur.description:
        out["columns"] = [d[0] for d in cur.description]
        out["rows"] = [[text(v) for v in r] for r in cur.fetchall()]
    else:
        out["affected"] = cur.rowcount
        out["info"] = text(conn.info())
    cur.close()
    return out


def create_digest(text):
    """sha1 of a CREATE TABLE text without its whitespace and a trailing ';' (the double's DDL files end with one)."""
    return hashlib.sha1(re.sub(r"\s+", "", text).rstrip(";").encode()).hexdigest()


def rows(conn, sql):
    got = run(conn, sql)
    if got["error"]:
        raise RuntimeError(f"{sql}: {got['error']}")
    return got["rows"]


def capture(conn):
    version = rows(conn, "SELECT @@version")[0][0]
    databases = [
        [seq, name, re.sub(r"^.*/", "<datadir>/", path) if path else path]
        for seq, name, path in rows(conn, "SHOW DATABASES")
    ]
    tables, errors = {}, {}
    for schema in SCHEMAS:
        got = run(conn, f"SHOW TABLES FROM {schema}")
        if got["error"]:
            errors[f"SHOW TABLES FROM {schema}"] = got["error"]
            continue
        tables[schema] = {}
        for (table,) in got["rows"]:
            cols = run(conn, f"SELECT * FROM {schema}.{table} LIMIT 0")
            if cols["error"]:
                errors[f"{schema}.{table}"] = cols["error"]
                continue
            tables[schema][table] = cols["columns"]
    create = {}  # not the text (it is the source's, proxysql-<v>.json "create"): its digest, see create_digest()
    for table in tables.get("main", {}):
        got = run(conn, f"SHOW CREATE TABLE {table}")
        create[table] = create_digest(got["rows"][0][1]) if not got["error"] and got["rows"] else None
    variables = dict(rows(conn, "SELECT variable_name, variable_value FROM global_variables ORDER BY variable_name"))
    checksums = rows(conn, "SELECT name, version, epoch, checksum FROM runtime_checksums_values ORDER BY name")
    status = sorted(r[0] for r in rows(conn, "SELECT Variable_Name FROM stats_mysql_global"))
    probes = [{"sql": sql, **run(conn, sql)} for sql in PROBES]
    sequences = {name: [{"sql": sql, **run(conn, sql)} for sql in statements] for name, statements in SEQUENCES.items()}
    return {
        "server_info": conn.get_server_info(),
        "sequences": sequences,
        "version": version,
        "admin-version": variables.get("admin-version"),
        "databases": databases,
        "show_tables": [r[0] for r in rows(conn, "SHOW TABLES")],
        "tables": tables,
        "table_errors": errors,
        "create_sha1": create,
        "global_variables": variables,
        "runtime_checksums_values": {"columns": ["name", "version", "epoch", "checksum"], "rows": checksums},
        "stats_mysql_global": status,
        "probes": probes,
    }


def replay_transcript(conn, transcript, replay_py):
    spec = importlib.util.spec_from_file_location("replay", replay_py)
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    passed, failed = 0, {}
    for line in open(transcript):
        step = json.loads(line)
        cur = conn.cursor()
        cols, rows, rowcount, error = replay.run(cur, step["sql"])
        cur.close()
        problem = replay.judge(step, cols or [], rows, rowcount, error)
        if problem:
            failed[str(step["step"])] = {
                "sql": step["sql"],
                "compare": step["compare"],
                "problem": problem,
                "columns": [c[0] for c in cols or []],
                "rows": rows,
                "rowcount": rowcount,
                "error": error,
            }
        else:
            passed += 1
    return {"passed": passed, "failed": failed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("host")
    ap.add_argument("port", type=int)
    ap.add_argument("user")
    ap.add_argument("password")
    ap.add_argument("out")
    ap.add_argument("--describe", default="", help="`git describe` of the binary")
    ap.add_argument("--command", default="", help="how the node was started")
    ap.add_argument("--transcript", help="replay this transcript instead (on a fresh node)")
    ap.add_argument(
        "--replay",
        default=os.path.join(
            os.path.dirname(os.path.abspath(__file__)),
            "..",
            "..",
            "..",
            "..",
            "shared",
            "proxysql-reference",
            "replay.py",
        ),
    )
    a = ap.parse_args()
    conn = MySQLdb.connect(host=a.host, port=a.port, user=a.user, passwd=a.password, connect_timeout=3)
    if a.transcript:
        try:
            result = replay_transcript(conn, a.transcript, a.replay)
        finally:
            conn.close()
        with open(a.out) as f:
            facts = json.load(f)
        facts.setdefault("replay", {})[os.path.basename(a.transcript)] = result
        with open(a.out, "w") as f:
            f.write(json.dumps(facts, indent=1, sort_keys=True) + "\n")
        print(
            os.path.basename(a.transcript),
            result["passed"],
            "passed,",
            len(result["failed"]),
            "failed:",
            sorted(result["failed"], key=int),
        )
        return
    try:
        facts = capture(conn)
    finally:
        conn.close()
    facts["source"] = {
        "read_from": "a running node's admin interface (lab/reference/versions/capture.py)",
        "git_describe": a.describe,
        "command": a.command,
        "captured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    with open(a.out, "w") as f:
        f.write(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    print(a.out, {s: len(t) for s, t in facts["tables"].items()}, len(facts["global_variables"]), "variables")


if __name__ == "__main__":
    main()
