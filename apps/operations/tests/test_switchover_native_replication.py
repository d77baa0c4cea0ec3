"""A planned switchover on a cluster whose writer ProxySQL's replication manager places (issue 33 §4:
mysql_replication_hostgroups with Monitor), over the real async replication lab, through two ProxySQL nodes that each
run their own Monitor (the double's model of it, lab/proxysql_double/replication_monitor.py, held to
lab/reference/native-replication/; and real 2.7.1). The plan drains the old writer, flips read_only on the backends
(the GTID promotion of the product's async switchover) and waits for Monitor to place the new writer on every node; it
writes no row that moves a server, leaves memory and disk as configured, and rolls back with read_only as it was when
Monitor does not place the writer in time. Before, such a switchover was refused."""

import pytest
from django.urls import reverse

from apps.alerts.tests import test_native_galera_drift as galera
from apps.alerts.tests import test_native_replication_drift as native
from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration.services import add_edit, latest, start_change_set
from apps.configuration.tests.test_change_sets import run as run_change_set
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.operations import native_switchover
from apps.operations.choices import OnDrainTimeout
from apps.operations.switchover import notes, plan_switchover
from conftest import adopt_double
from lab import demo
from lab.real_proxysql import RealProxySQL

from .conftest import confirmed, finish, query, run_plan, seen_while, wait_for
from .insert_writer import Writer, where_the_time_went

pytestmark = pytest.mark.django_db

PORTS = native.PORTS


def layers(node):
    """Memory and disk mysql_servers of one node, whole."""
    return [
        native.admin(node, f"SELECT * FROM {table} ORDER BY hostgroup_id, hostname, port")
        for table in ("mysql_servers", "disk.mysql_servers")
    ]


def writers(node):
    return [
        (int(port), status)
        for port, status in native.admin(
            node, "SELECT port, status FROM runtime_mysql_servers WHERE hostgroup_id=10 ORDER BY port"
        )
    ]


# The seed's layout (3321 in the writer hostgroup 10, the replicas in 20) with Monitor on it: placed as configured.
SPLIT = [
    "DELETE FROM mysql_replication_hostgroups",
    "INSERT INTO mysql_replication_hostgroups (writer_hostgroup,reader_hostgroup,check_type) VALUES (10,20,'read_only')",
    "LOAD MYSQL SERVERS TO RUNTIME",
    "SAVE MYSQL SERVERS TO DISK",
]


def natively_managed(nodes, layout=native.NATIVE, replicas=(3322, 3323)):
    """The nodes laid out as the drift test does (by default every backend configured in the writer hostgroup 10,
    Monitor moving the read_only replicas to 20), adopted as one async cluster with replication credentials.
    replicas: those the layout configures."""
    for node in nodes:
        native.admin(node, *demo.plain_layout_statements(PORTS, writer=10, reader=20), *layout)
    for n, node in enumerate(nodes, 1):
        placed_as_configured(node, replicas)
        adopt_double(node, "native-async", f"n{n}", kind="async")
    Cluster.objects.filter(name="native-async").update(
        replication_user="repl", replication_password="repl", max_replication_lag=10
    )
    cluster = ProxySQLNode.objects.get(admin_port=nodes[0].port).cluster
    assert cluster.native_manager == "replication"
    return cluster


def placed_as_configured(node, replicas=(3322, 3323)):
    """Until Monitor has placed 3321 alone writing and the replicas reading. A real node is loaded again when it has
    not: a LOAD right after the lab was healed (read_only flipped back) may have moved 3321 on a stale read_only,
    which Monitor never undoes (writer_is_also_reader). The double places a LOAD on checks made after it only
    (engine._replication_monitor): one LOAD is enough there."""
    tries = 3 if isinstance(node, RealProxySQL) else 1
    expected = [(10, 3321, "ONLINE"), *[(20, port, "ONLINE") for port in replicas]]

    def placement():
        return [
            (int(hg), int(port), status)
            for hg, port, status in native.admin(
                node, "SELECT hostgroup_id, port, status FROM runtime_mysql_servers ORDER BY hostgroup_id, port"
            )
        ]

    for _ in range(tries):
        if wait_for(lambda: placement() == expected, 5):
            return
        native.admin(node, "LOAD MYSQL SERVERS TO RUNTIME")
    assert placement() == expected


def read_only(lab, n):
    return query(lab, n, "SELECT @@read_only")[0][0]


def source_port(lab, n):
    cur = lab.monitor_connection(n).cursor()
    cur.execute("SHOW SLAVE STATUS")
    row = dict(zip([d[0] for d in cur.description], cur.fetchone()))
    return row["Master_Port"], row["Slave_IO_Running"], row["Slave_SQL_Running"]


def check_switchover_through_monitor(nodes, lab, user, client):
    cluster = natively_managed(nodes)
    before = [layers(node) for node in nodes]

    plan = plan_switchover(cluster, Server.objects.get(port=3322))
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    assert [s.key for s in plan.steps] == [
        "drain",
        "wait_drain",
        "promote",
        "wait_monitor",
        "memory_back",
        "verify_memory",
        "record_writer",
    ]
    steps = {s.key: s for s in plan.steps}
    sent = [sql for s in plan.steps for spec in s.nodes.values() for sql in spec["sql"] + spec["rollback"]]
    # Monitor owns placement: what the drain loads is Monitor's placement (the new writer not in the writer hostgroup);
    # memory goes back to the configured rows without a LOAD; nothing is saved to disk
    loaded = [sql for spec in steps["drain"].nodes.values() for sql in spec["sql"]]
    assert loaded[-1] == "LOAD MYSQL SERVERS TO RUNTIME" and not [
        sql for sql in loaded if "(10,'127.0.0.1',3322" in sql
    ]
    assert not [sql for spec in steps["memory_back"].nodes.values() for sql in spec["sql"] if "LOAD" in sql]
    assert not [sql for sql in sent if "SAVE" in sql.upper()], sent
    assert any("writes no row for the move" in n["text"] for n in notes(plan))

    op = run_plan(plan, user)
    assert op.state == "done", op.error
    for node in nodes:
        assert writers(node) == [(3322, "ONLINE")]  # placed by Monitor on every node, the old writer out of it
        assert (20, 3321) in [
            (int(hg), int(p)) for hg, p in native.admin(node, "SELECT hostgroup_id, port FROM runtime_mysql_servers")
        ]
    assert [layers(node) for node in nodes] == before  # memory and disk as configured
    assert (read_only(lab, 1), read_only(lab, 2)) == (1, 0)
    for n in (1, 3):
        assert wait_for(lambda: source_port(lab, n) == (3322, "Yes", "Yes"), 10), source_port(lab, n)
    assert AuditEvent.objects.filter(
        action="writer placed by ProxySQL's replication manager", target="127.0.0.1:3322"
    ).exists()
    native.no_drift_anywhere(cluster)  # Monitor's placement after the move is no drift
    # the page offers the old writer (the inventory's configured rows do not say who Monitor made the writer)
    page = client.get(reverse("operations:switchover", args=[cluster.pk]))
    assert page.status_code == 200 and "placed by ProxySQL's own manager" in page.content.decode()
    assert {s.port for s in page.context["form"].fields["new_writer"].queryset} == set(PORTS)

    # and back, from a placement that is no longer the configured rows (3322 writer, 3321 reading)
    op = run_plan(plan_switchover(cluster, Server.objects.get(port=3321)), user)
    assert op.state == "done", op.error
    for node in nodes:
        assert writers(node) == [(3321, "ONLINE")]
    assert [layers(node) for node in nodes] == before
    assert (read_only(lab, 1), read_only(lab, 2)) == (0, 1)


def test_a_switchover_through_the_replication_manager_on_a_double_pair(
    proxysql_double_factory, replication_healthy, live_redis, operator_user, operator_client
):
    check_switchover_through_monitor(proxysql_double_factory(2), replication_healthy, operator_user, operator_client)


def test_a_switchover_through_the_replication_manager_on_a_real_pair(
    real_proxysql_factory, replication_healthy, live_redis, operator_user, operator_client
):
    check_switchover_through_monitor(
        [real_proxysql_factory("2.7.1", name=f"native-switch-{n}") for n in (1, 2)],
        replication_healthy,
        operator_user,
        operator_client,
    )


def test_a_switchover_through_the_replication_manager_under_writes_on_a_real_pair(
    real_proxysql_factory, replication_healthy, operator_user
):
    """Writes through both real 2.7.1 nodes all along: none fails, none is lost; they wait while the writer is held
    (the drain to Monitor's placement), as ProxySQL holds a query sent to a hostgroup without a usable server."""
    lab, nodes = replication_healthy, [real_proxysql_factory("2.7.1", name=f"native-load-{n}") for n in (1, 2)]
    users = [
        "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','app',10)",
        "LOAD MYSQL USERS TO RUNTIME",
        "SAVE MYSQL USERS TO DISK",
    ]
    cluster = natively_managed(nodes, [*native.NATIVE, *users])
    query(lab, 1, "DROP TABLE IF EXISTS app.native_load")
    query(lab, 1, "CREATE TABLE app.native_load (id INT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(20))")
    writers_ = [Writer(node.client_port, f"p{n}") for n, node in enumerate(nodes, 1)]
    for w in writers_:
        w.start()
    try:
        assert wait_for(lambda: all(w.rows > 50 for w in writers_), 10), [(w.rows, w.errors[:3]) for w in writers_]
        plan = plan_switchover(cluster, Server.objects.get(port=3322))
        assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
        assert plan.facts["autoinc_way"]["taken"]  # the writers' connections pinned by their insert ids
        op = run_plan(plan, operator_user)
        assert op.state == "done", op.error
        before = [w.rows for w in writers_]
        assert wait_for(lambda: all(w.rows > b + 50 for w, b in zip(writers_, before)), 10)  # writing to 3322 now
    finally:
        for w in writers_:
            w.stop.set()
        for w in writers_:
            w.join(10)
    assert [w.errors for w in writers_] == [[], []]
    steps = list(op.steps.order_by("index"))
    timings = {r.key: r.duration_ms for r in steps}
    held = sum(timings[k] for k in ("drain", "wait_drain", "promote", "wait_monitor"))
    assert max(w.slowest_ms for w in writers_) < held + 1000, where_the_time_went(steps, writers_)
    assert (read_only(lab, 1), read_only(lab, 2)) == (1, 0)
    written = sum(w.rows for w in writers_)
    assert query(lab, 2, "SELECT COUNT(*) FROM app.native_load")[0][0] == written  # none lost


def test_monitor_not_placing_the_writer_in_time_rolls_back_with_read_only_as_it_was(
    proxysql_double_factory, replication_healthy, operator_user
):
    check_rollback(proxysql_double_factory(2), replication_healthy, operator_user)


def test_monitor_not_placing_the_writer_in_time_rolls_back_on_a_real_pair(
    real_proxysql_factory, replication_healthy, operator_user
):
    check_rollback(
        [real_proxysql_factory("2.7.1", name=f"native-back-{n}") for n in (1, 2)], replication_healthy, operator_user
    )


def check_rollback(nodes, lab, operator_user):
    cluster = natively_managed(nodes, SPLIT)
    # node 2's Monitor checks super_read_only, which MariaDB lacks: every check fails and nothing moves (as captured on
    # real 2.7.1), its placement stays as configured: 3321 writing, the replicas reading
    native.admin(
        nodes[1],
        "UPDATE mysql_replication_hostgroups SET check_type='super_read_only'",
        "LOAD MYSQL SERVERS TO RUNTIME",
        "SAVE MYSQL SERVERS TO DISK",
    )
    placed_as_configured(nodes[1])
    before = [layers(node) for node in nodes]

    # a wait longer than ProxySQL holds a query without a writer (mysql-connect_timeout_server_max) is refused
    held = plan_switchover(cluster, Server.objects.get(port=3322), monitor_timeout_ms=10000)
    assert [(g.key, g.value) for g in held.failed_guards] == [("hold_budget", "n1: 10000 ms; n2: 10000 ms")]
    plan = plan_switchover(cluster, Server.objects.get(port=3322), monitor_timeout_ms=1500)
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    op = run_plan(plan, operator_user)
    assert op.state == "rolled_back", (op.state, op.error)
    assert "Monitor did not place 127.0.0.1:3322 in writer hostgroup 10" in op.error, op.error
    assert "n2: hostgroup 10 holds 127.0.0.1:3321" in op.error, op.error
    assert "within 1500 ms" in op.error and "read_only as it was" in op.error
    # read_only and replication as they were, the placement and both layers as before the drain
    assert (read_only(lab, 1), read_only(lab, 2), read_only(lab, 3)) == (0, 1, 1)
    for n in (2, 3):  # re-pointed back at 3321 (its IO thread connecting first)
        assert wait_for(lambda: source_port(lab, n) == (3321, "Yes", "Yes"), 10), source_port(lab, n)
    for node in nodes:
        assert wait_for(lambda: writers(node) == [(3321, "ONLINE")], 10), writers(node)
    assert [layers(node) for node in nodes] == before
    assert not AuditEvent.objects.filter(action="writer placed by ProxySQL's replication manager").exists()


def test_a_writer_monitor_moved_after_the_plan_refuses_it_at_start(
    proxysql_double_factory, replication_healthy, operator_user
):
    lab, nodes = replication_healthy, proxysql_double_factory(2)
    cluster = natively_managed(nodes)
    plan = plan_switchover(cluster, Server.objects.get(port=3322))
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    op = confirmed(plan, operator_user)
    try:
        query(lab, 3, "SET GLOBAL read_only=OFF")  # 3323 writable: Monitor makes it a second writer
        for node in nodes:
            assert wait_for(lambda: writers(node) == [(3321, "ONLINE"), (3323, "ONLINE")], 10), writers(node)
        op = finish(op)
    finally:
        query(lab, 3, "SET GLOBAL read_only=ON")
    assert op.state == "refused", (op.state, op.error)
    assert op.error.startswith("refused at start, nothing was changed"), op.error
    assert (
        "Monitor has placed one writer in writer hostgroup 10 (now: n1: 127.0.0.1:3321, 127.0.0.1:3323; "
        "n2: 127.0.0.1:3321, 127.0.0.1:3323)"
    ) in op.error, op.error
    assert (read_only(lab, 1), read_only(lab, 2)) == (0, 1)  # nothing ran


def writers_seen(nodes, action):
    """action() run while every node's writer hostgroup is sampled every 10 ms (and 0.5 s after): {(node index, ports)} seen."""
    return seen_while(nodes, lambda node: tuple(writers(node)), action)


def servers(node, table):
    return [
        tuple(int(v) for v in r)
        for r in native.admin(node, f"SELECT hostgroup_id, port, weight FROM {table} ORDER BY hostgroup_id, port")
    ]


def check_change_set_after_switchover(nodes, lab, user):
    """Issue 33: a change set of a weight right after a switchover. Its LOAD used to load the configured rows (every
    backend in writer hostgroup 10): until Monitor's next read_only check the old writer, read_only now, was an ONLINE
    writer on every node (real 2.7.1: 0.4-0.7 s of error 1290 for clients' writes). It loads Monitor's placement with
    the weight instead: runtime, sampled all along, never holds another writer than the new one; memory and disk
    end as configured with the weight."""
    cluster = natively_managed(nodes)
    op = run_plan(plan_switchover(cluster, Server.objects.get(port=3322)), user)
    assert op.state == "done", op.error
    seen = writers_seen(
        nodes, lambda: galera.apply_edits(cluster, user, "a weight", [galera.weight_edit(cluster, 10, 3323, 500)])
    )
    assert seen == {(n, ((3322, "ONLINE"),)) for n in range(len(nodes))}, sorted(seen)
    for node in nodes:
        assert [
            str(w) for (w,) in native.admin(node, "SELECT DISTINCT weight FROM runtime_mysql_servers WHERE port=3323")
        ] == ["500"]
        for table in ("mysql_servers", "disk.mysql_servers"):  # the configured rows, the weight changed
            assert servers(node, table) == [(10, 3321, 1000), (10, 3322, 1000), (10, 3323, 500)], table
    native.no_drift_anywhere(cluster)


def test_a_change_set_rolled_back_after_a_switchover_loads_monitors_placement_back_on_a_double_pair(
    proxysql_double_factory, replication_healthy, live_redis, operator_user
):
    """The same change set with a query rule the second node refuses: rolled back on both nodes, the undo loading the
    placement as it was (never the configured rows), memory and disk as configured."""
    nodes = proxysql_double_factory(2)
    cluster = natively_managed(nodes)
    user = operator_user
    op = run_plan(plan_switchover(cluster, Server.objects.get(port=3322)), user)
    assert op.state == "done", op.error
    before = [
        [servers(node, t) for t in ("runtime_mysql_servers", "mysql_servers", "disk.mysql_servers")] for node in nodes
    ]
    native.admin(nodes[1], 'LAB FAIL_STATEMENTS {"text": "REPLACE INTO mysql_query_rules", "message": "refused"}')
    cs = start_change_set(cluster, actor=Actor.command(user), reason="a weight and a rule")
    for edit in (
        galera.weight_edit(cluster, 10, 3323, 500),
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 70, "active": 1, "match_digest": "^DELETE", "destination_hostgroup": 10, "apply": 1},
        },
    ):
        add_edit(cs, edit, actor=Actor.command(user))
    ran = []
    seen = writers_seen(nodes, lambda: ran.append(run_change_set(cs, user)[0]))
    assert ran[0].state == "rolled_back" and "refused" in ran[0].error, (ran[0].state, ran[0].error)
    assert seen == {(n, ((3322, "ONLINE"),)) for n in range(len(nodes))}, sorted(seen)
    assert [
        [servers(node, t) for t in ("runtime_mysql_servers", "mysql_servers", "disk.mysql_servers")] for node in nodes
    ] == before


def test_a_change_set_right_after_a_switchover_loads_monitors_placement_on_a_double_pair(
    proxysql_double_factory, replication_healthy, live_redis, operator_user
):
    check_change_set_after_switchover(proxysql_double_factory(2), replication_healthy, operator_user)


def test_a_change_set_right_after_a_switchover_loads_monitors_placement_on_a_real_pair(
    real_proxysql_factory, replication_healthy, live_redis, operator_user
):
    check_change_set_after_switchover(
        [real_proxysql_factory("2.7.1", name=f"native-cs-{n}") for n in (1, 2)], replication_healthy, operator_user
    )


def check_a_new_replica_enters_as_a_reader(nodes, user):
    """Issue 33: a change set adds a replica to writer hostgroup 10, as an operator configures every backend under the
    replication manager (Monitor moves the read_only ones to 20). It was refused as a writer move (every configured
    row of 10 counted as a writer, though Monitor places the writer by read_only); loaded ONLINE in 10 it would take
    writes until Monitor's next read_only check (1290: --read-only). It enters the manager's reader hostgroup 20
    instead: runtime, sampled all along, never holds another writer than 3321; memory and disk end as configured."""
    layout = [s for s in native.NATIVE if "3323" not in s]
    cluster = natively_managed(nodes, layout, replicas=(3322,))
    row = next(r for r in latest(cluster).content["mysql_servers"] if r["hostgroup_id"] == 10 and r["port"] == 3322)
    new = {"op": "upsert", "table": "mysql_servers", "row": {**row, "port": 3323}}
    seen = writers_seen(nodes, lambda: galera.apply_edits(cluster, user, "a third replica", [new]))
    assert seen == {(n, ((3321, "ONLINE"),)) for n in range(len(nodes))}, sorted(seen)
    for node in nodes:
        placed_as_configured(node)
        assert (
            servers(node, "mysql_servers")
            == servers(node, "disk.mysql_servers")
            == [
                (10, 3321, 1000),
                (10, 3322, 1000),
                (10, 3323, 1000),
            ]
        )
    native.no_drift_anywhere(cluster)


def test_a_new_replica_enters_as_a_reader_on_a_replication_managed_double_pair(
    proxysql_double_factory, replication_healthy, live_redis, operator_user
):
    check_a_new_replica_enters_as_a_reader(proxysql_double_factory(2), operator_user)


def test_a_new_replica_enters_as_a_reader_on_a_replication_managed_real_pair(
    real_proxysql_factory, replication_healthy, live_redis, operator_user
):
    check_a_new_replica_enters_as_a_reader(
        [real_proxysql_factory("2.7.1", name=f"async-new-{n}") for n in (1, 2)], operator_user
    )


def test_the_replication_planner_reads_once_then_judges_and_builds_from_the_read_alone(
    proxysql_double_factory, replication_healthy, django_assert_num_queries
):
    """Issue 35 item 5, as the switchover's: read_replication_switchover reads every node and backend once;
    replication_guards and replication_steps make no query and open no connection (both nodes refusing), and give
    plan_native_switchover's guards, facts, steps and options."""
    nodes = proxysql_double_factory(2)
    check_reads_once(
        nodes,
        natively_managed(nodes),
        Server.objects.get(port=3322),
        (
            native_switchover.read_replication_switchover,
            native_switchover.replication_guards,
            native_switchover.replication_steps,
        ),
        django_assert_num_queries,
    )


def check_reads_once(nodes, cluster, B, parts, django_assert_num_queries, **build_options):
    """A native planner's three parts (read, judge, build): the read reads every node and backend; the judge and the
    build, with every node refusing connections, make no query, and give the planner's plan."""
    read_switchover, judge, build = parts
    read = read_switchover(cluster, B)
    assert read.A and [n.node.pk for n in read.answered] == [n.pk for n in read.nodes]
    assert all(n.own and n.statements for n in read.answered) and len(read.cluster.backends) == 3
    drain_timeout_ms, on_timeout = cluster.drain_timeout_ms, OnDrainTimeout.ROLLBACK
    for node in nodes:
        node.set_mode("refuse")
    try:
        with django_assert_num_queries(0):
            guards, facts, lower, monitor_timeout_ms = judge(
                cluster,
                B,
                read,
                drain_timeout_ms=drain_timeout_ms,
                on_timeout=on_timeout,
                longer_timeout=False,
                lower_autoinc=None,
                monitor_timeout_ms=None,
            )
            steps = build(
                cluster,
                B,
                read,
                lower_autoinc=lower,
                drain_timeout_ms=drain_timeout_ms,
                on_timeout=on_timeout,
                monitor_timeout_ms=monitor_timeout_ms,
                **build_options,
            )
            options = native_switchover.native_options(read, B, drain_timeout_ms, on_timeout, lower, monitor_timeout_ms)
    finally:
        for node in nodes:
            node.set_mode("normal")
    plan = plan_switchover(cluster, B)
    assert plan.guards_passed, [(g.key, g.value) for g in plan.failed_guards]
    assert [(g.key, g.passed, g.value) for g in guards] == [(g.key, g.passed, g.value) for g in plan.guards]
    assert [(s.key, s.title, s.nodes, s.params) for s in steps] == [
        (s.key, s.title, s.nodes, s.params) for s in plan.steps
    ]
    assert facts == plan.facts and options == plan.options
