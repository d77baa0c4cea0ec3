"""Helpers to read what the ProxySQL doubles hold at runtime, and to run a plan here as the worker would
(the adopted lab is in the root conftest)."""

import threading
import time
from contextlib import contextmanager

import MySQLdb
import pytest

from apps.audit.actor import Actor
from apps.fleet.models import Cluster, HostgroupMembership
from conftest import adopt_double
from lab import demo

ASYNC_PORTS = (3321, 3322, 3323)


def wait_for(predicate, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def seen_while(nodes, read, action, every=0.01, after=0.5):
    """action() run while read(node) is sampled on every node every `every` s (and `after` s past its end): the set of
    (node index, what was read) seen. What native switchover tests assert Monitor's placement never left."""
    stop, seen = threading.Event(), set()

    def sample():
        while not stop.is_set():
            for n, node in enumerate(nodes):
                seen.add((n, read(node)))
            time.sleep(every)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        action()
        time.sleep(after)
    finally:
        stop.set()
        sampler.join()
    return seen


def runtime(double, hostgroup):
    rows = demo.admin_sql(
        double.port,
        f"SELECT hostname, port, status FROM runtime_mysql_servers WHERE hostgroup_id={hostgroup} ORDER BY port",
        user=double.user,
        password=double.password,
    )
    return [(h, int(p), s) for h, p, s in rows]


def extended_processlist(doubles):
    """ProxySQL says why each session is pinned (the extended processlist's reasons)."""
    for double in doubles:
        demo.admin_sql(
            double.port,
            "SET mysql-show_processlist_extended=1",
            "LOAD MYSQL VARIABLES TO RUNTIME",
            user=double.user,
            password=double.password,
        )


def variable(double, name):
    rows = demo.admin_sql(
        double.port,
        f"SELECT variable_value FROM runtime_global_variables WHERE variable_name='{name}'",
        user=double.user,
        password=double.password,
    )
    return rows[0][0]


def servers(double):
    """Every runtime_mysql_servers row of a double, whole: to compare two nodes, or a node before and after."""
    return demo.admin_sql(
        double.port,
        "SELECT * FROM runtime_mysql_servers ORDER BY hostgroup_id, hostname, port",
        user=double.user,
        password=double.password,
    )


def fail_statements(double, text=None):
    """The double refuses statements containing `text` (as a node of another version would); None: accept all."""
    import json

    arg = json.dumps({"text": text, "message": "refused by the lab"}) if text else "{}"
    demo.admin_sql(double.port, f"LAB FAIL_STATEMENTS {arg}", user=double.user, password=double.password)


def confirmed(plan, user, **confirm):
    """The plan saved and confirmed by `user` (not enqueued: finish() runs it here)."""
    from apps.operations import services

    op = services.save_plan(plan, actor=Actor.command(user))
    services.confirm(op, actor=Actor.command(user), enqueue=False, **confirm)
    return op


def finish(op):
    """Run a confirmed operation here, as the worker would; the operation afterwards."""
    from apps.operations import executor

    executor.run(op.pk)
    op.refresh_from_db()
    return op


def run_plan(plan, user, **confirm):
    return finish(confirmed(plan, user, **confirm))


def layout(double):
    """Every runtime mysql_servers row of one double with the columns that say who is who; the configured
    status (a SHUNNED row is ProxySQL's own verdict on a dead backend, configured ONLINE)."""
    rows = demo.admin_sql(
        double.port,
        "SELECT hostgroup_id, hostname, port, status, weight, max_connections, comment FROM runtime_mysql_servers",
        user=double.user,
        password=double.password,
    )
    return sorted(
        (hg, host, port, "ONLINE" if status == "SHUNNED" else status, *rest) for hg, host, port, status, *rest in rows
    )


def inventory_layout(cluster):
    return sorted(
        (m.hostgroup_id, m.server.port, m.status, m.weight, m.max_connections, m.comment)
        for m in HostgroupMembership.objects.filter(server__cluster=cluster).select_related("server")
    )


def mirrored(rows, a, b, port_at):
    """The same rows with servers a and b exchanged (the port is column `port_at`)."""
    swap = {str(a): str(b), str(b): str(a), a: b, b: a}
    return sorted(tuple(swap.get(v, v) if i == port_at else v for i, v in enumerate(row)) for row in rows)


@pytest.fixture
def async_lab(db, proxysql_double_pair, replication_healthy):
    """(cluster, doubles, lab): the async replication lab (3321 primary, 3322 and 3323 replicas) adopted through
    two ProxySQL doubles, writers pinned by auto-increment, replication credentials set."""
    for i, double in enumerate(proxysql_double_pair, 1):
        demo.admin_sql(
            double.port, *demo.seed_statements(backend_ports=ASYNC_PORTS), user=double.user, password=double.password
        )
        adopt_double(double, "async-lab", f"proxysql-{i}", kind="async")
        double.traffic.set_sessions(hostgroup=100, count=2, kind="write", pinned_reason="auto_increment")
    Cluster.objects.filter(name="async-lab").update(
        replication_user="repl", replication_password="repl", max_replication_lag=10
    )
    return Cluster.objects.get(name="async-lab"), proxysql_double_pair, replication_healthy


def query(lab, n, sql):
    conn = lab.root_connection(n)
    try:
        cur = conn.cursor()
        cur.execute(sql)
        return cur.fetchall()
    finally:
        conn.close()


def write_load(port, seconds, stop):
    conn = MySQLdb.connect(host="127.0.0.1", port=port, user="app", passwd="app", db="app", autocommit=True)
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS load_t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64))")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not stop.is_set():
        cur.execute("INSERT INTO load_t (v) VALUES (REPEAT('x', 64))")
    conn.close()


@contextmanager
def applier_stopped(galera, node, writer_port=3311, seconds=20):
    """Galera node `node` desynced and not applying (FLUSH TABLES WITH READ LOCK) under a write load on the
    writer: its recv queue grows until the block ends."""
    galera.set_desync(node, True)
    locker = galera.root_connection(node)
    locker.cursor().execute("FLUSH TABLES WITH READ LOCK")
    stop = threading.Event()
    load = threading.Thread(target=write_load, args=(writer_port, seconds, stop))
    load.start()
    try:
        yield
    finally:
        locker.cursor().execute("UNLOCK TABLES")
        locker.close()
        stop.set()
        load.join()
