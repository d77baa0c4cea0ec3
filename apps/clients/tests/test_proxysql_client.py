"""The ProxySQL admin client over the real wire protocol, against the lab double and hostile peers."""

import socket
import time

import pytest

from apps.clients.proxysql import ProxySQLAdmin, QueryRule, ServerRow, UserRow, _typed
from apps.clients.wire import AuthFailed, Rejected, Timeout, Unreachable, UnexpectedResult
from apps.fleet.tests.conftest import admin_sql, seed_layout


def client_for(double, **kw):
    return ProxySQLAdmin("127.0.0.1", double.port, double.user, double.password, name="p1", **kw)


def test_reads_typed_rows(proxysql_double):
    seed_layout(proxysql_double)
    with client_for(proxysql_double) as admin:
        rows = admin.servers("runtime")
        assert all(isinstance(r, ServerRow) for r in rows)
        writer = [r for r in rows if r.hostgroup_id == 100]
        assert writer[0].port == 3311 and writer[0].weight == 1000000 and writer[0].status == "ONLINE"
        assert admin.servers("memory") == rows
        assert {r.hostgroup for r in admin.connection_pool()} == {100, 101, 102}
        assert admin.conn_used(100, "127.0.0.1", 3311) == 0
        variables = admin.global_variables(["mysql-mirror_max_concurrency", "mysql-mirror_max_queue_length"])
        assert variables == {"mysql-mirror_max_concurrency": "16", "mysql-mirror_max_queue_length": "32000"}


def test_reads_users_and_query_rules_as_typed_rows(proxysql_double):
    admin_sql(
        proxysql_double,
        "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','secret',100)",
        "INSERT INTO mysql_users (username,password,default_hostgroup,active) VALUES ('old','x',101,0)",
        "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply)"
        " VALUES (10,1,'^SELECT.*FOR UPDATE',100,1),(20,1,'^SELECT',101,1)",
        "LOAD MYSQL USERS TO RUNTIME",
        "LOAD MYSQL QUERY RULES TO RUNTIME",
    )
    with client_for(proxysql_double) as admin:
        users = admin.users()
        rules = admin.query_rules()
    # One row per user (the frontend one), only the active ones (as ProxySQL's runtime keeps them), no password.
    assert users == [
        UserRow(username="app", active=1, default_hostgroup=100, transaction_persistent=1, fast_forward=0, comment="")
    ]
    assert all(isinstance(r, QueryRule) for r in rules)
    assert [(r.rule_id, r.match_digest, r.destination_hostgroup, r.apply, r.username) for r in rules] == [
        (10, "^SELECT.*FOR UPDATE", 100, 1, None),
        (20, "^SELECT", 101, 1, None),
    ]


def test_hostile_text_travels_as_an_escaped_value(proxysql_double):
    hostile = 'it\'s "quoted"; DROP TABLE mysql_servers; -- é中 \\ back\\slash'
    with client_for(proxysql_double) as admin:
        admin.run(
            "INSERT INTO mysql_servers (hostgroup_id,hostname,port,comment) VALUES (%s,%s,%s,%s)",
            (7, "127.0.0.1", 3399, hostile),
        )
        assert [r.comment for r in admin.servers("memory") if r.port == 3399] == [hostile]
        assert admin.render("SELECT %s", ("a'b",)) == "SELECT 'a''b'"  # SQLite quoting, no backslashes


def test_statement_errors_are_rejected_not_unreachable(proxysql_double):
    seed_layout(proxysql_double)
    with client_for(proxysql_double) as admin:
        with pytest.raises(Rejected, match="CHECK constraint failed"):
            admin.run("UPDATE mysql_servers SET weight=-5")
        admin.ping()  # the connection is still usable after a statement error


def test_load_and_save_modules(proxysql_double):
    admin_sql(proxysql_double, "INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (1,'127.0.0.1',3311)")
    with client_for(proxysql_double) as admin:
        assert admin.servers("runtime") == []
        admin.load_to_runtime("MYSQL SERVERS")
        assert len(admin.servers("runtime")) == 1
        admin.save_to_disk("MYSQL SERVERS")
        assert len(admin.servers("disk")) == 1
        with pytest.raises(ValueError):
            admin.load_to_runtime("MYSQL SERVERS; DROP")


def test_wrong_password_is_an_auth_error(proxysql_double):
    admin = ProxySQLAdmin("127.0.0.1", proxysql_double.port, proxysql_double.user, "wrong", name="p1")
    with pytest.raises(AuthFailed) as err:
        admin.ping()
    assert not err.value.retryable and "p1" in str(err.value)


def test_localhost_is_tcp_to_the_port_not_the_local_socket(proxysql_double):
    with ProxySQLAdmin("localhost", proxysql_double.port, proxysql_double.user, proxysql_double.password) as admin:
        assert admin.version().startswith("2.7.1")


def test_refused_port_is_unreachable_quickly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        start = time.monotonic()
        with pytest.raises(Unreachable) as err:
            ProxySQLAdmin("127.0.0.1", port, "admin", "admin", name="p9").ping()
    assert time.monotonic() - start < 0.5 and err.value.retryable


def test_host_that_accepts_tcp_and_never_answers_times_out_within_the_deadline():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(5)  # the kernel completes the TCP handshake; nobody ever speaks
        start = time.monotonic()
        with pytest.raises(Timeout):
            ProxySQLAdmin("127.0.0.1", s.getsockname()[1], "admin", "admin", name="p9", connect_timeout=0.3).ping()
        assert time.monotonic() - start < 0.6


def test_garbage_values_are_unexpected_results():
    good = dict(
        hostgroup_id="1",
        hostname="h",
        port="3306",
        gtid_port="0",
        status="ONLINE",
        weight="1",
        compression="0",
        max_connections="1000",
        max_replication_lag="0",
        use_ssl="0",
        max_latency_ms="0",
        comment="",
    )
    assert _typed(ServerRow, good, "p1", "t").port == 3306
    with pytest.raises(UnexpectedResult, match="weight"):
        _typed(ServerRow, {**good, "weight": "lots"}, "p1", "t")
    missing = dict(good)
    del missing["status"]
    with pytest.raises(UnexpectedResult, match="status"):
        _typed(ServerRow, missing, "p1", "t")


def test_processlist_of_session_0_is_no_session_not_every_session(proxysql_double):
    """Session ids start at 1: the client read every session for id 0 (`if session_id`), and the kill page then
    described the first of them (issue 34)."""
    admin_sql(
        proxysql_double,
        "INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (101,'127.0.0.1',3306)",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    proxysql_double.traffic.set_sessions(hostgroup=101, count=3, kind="read", busy=1.0, reconnect=False)
    with client_for(proxysql_double) as admin:
        every = admin.processlist()
        assert len(every) >= 3
        assert admin.processlist(0) == []
        first = every[0]["SessionID"]
        assert [row["SessionID"] for row in admin.processlist(first)] == [first]
