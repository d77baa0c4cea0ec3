"""The MySQL 8.0.22+ native source list (apps/dr/native.py): the statement builders against the documented syntax
(MySQL 8.0 Reference Manual: CHANGE MASTER TO in 8.0.22, CHANGE REPLICATION SOURCE TO from 8.0.23,
asynchronous_connection_failover_add_source(channel, host, port, network_namespace, weight) and _delete_source(
channel, host, port, network_namespace), START/STOP REPLICA ... FOR CHANNEL). Pure: no MySQL 8 server installs
here, so these are checked as text only; values are escaped by mysqlclient's own literal escaping, as the node's
driver does."""

import re

import MySQLdb._mysql
import pytest

from apps.dr import native


def render(sql, params=()):
    """What BackendClient.render does, without a connection: mysqlclient's literal escaping of each value."""

    def literal(v):
        return str(v) if isinstance(v, int) else MySQLdb._mysql.string_literal(str(v).encode()).decode()

    return sql % tuple(literal(p) for p in params) if params else sql


@pytest.mark.parametrize(
    "version, expected",
    [
        ("8.0.22", True),
        ("8.0.36-log", True),
        ("8.4.0", True),
        ("9.1.0-commercial", True),
        ("8.0.21", False),
        ("5.7.44-log", False),
        ("10.11.6-MariaDB-log", False),
        ("11.4.2-MariaDB", False),
        ("", False),
        ("garbage", False),
    ],
)
def test_only_mysql_8_0_22_or_later_has_the_native_failover(version, expected):
    assert native.has_native_failover(version) is expected


def test_from_8_0_23_the_channel_is_set_with_change_replication_source_to():
    sql = native.change_source(render, "8.0.36", host="db-2.dc1", port=3306, user="repl", password="s'cret")
    assert sql == (
        "CHANGE REPLICATION SOURCE TO SOURCE_HOST='db-2.dc1', SOURCE_PORT=3306, SOURCE_USER='repl', "
        "SOURCE_PASSWORD='s\\'cret', SOURCE_AUTO_POSITION=1, SOURCE_CONNECTION_AUTO_FAILOVER=1, "
        "SOURCE_RETRY_COUNT=3, SOURCE_CONNECT_RETRY=10 FOR CHANNEL ''"
    )


def test_in_8_0_22_it_is_change_master_to_with_the_one_new_option_under_its_source_name():
    sql = native.change_source(
        render, "8.0.22-log", host="h", port=3307, user="repl", password="p", auto_failover=False, channel="dc1"
    )
    assert sql == (
        "CHANGE MASTER TO MASTER_HOST='h', MASTER_PORT=3307, MASTER_USER='repl', MASTER_PASSWORD='p', "
        "MASTER_AUTO_POSITION=1, SOURCE_CONNECTION_AUTO_FAILOVER=0, MASTER_RETRY_COUNT=3, "
        "MASTER_CONNECT_RETRY=10 FOR CHANNEL 'dc1'"
    )


def test_the_source_list_functions_take_the_documented_arguments():
    assert (
        native.add_source(render, host="db-1", port=3306, weight=80)
        == "SELECT asynchronous_connection_failover_add_source('', 'db-1', 3306, '', 80)"
    )
    assert (
        native.delete_source(render, host="db-1", port=3306, channel="ch")
        == "SELECT asynchronous_connection_failover_delete_source('ch', 'db-1', 3306, '')"
    )
    for weight in (0, 101):
        with pytest.raises(ValueError, match="1 to 100"):
            native.add_source(render, host="db-1", port=3306, weight=weight)
    # A hostile host name stays one quoted value.
    assert (
        native.add_source(render, host="x', 1, '', 1); DROP TABLE t; --", port=1, weight=1)
        == "SELECT asynchronous_connection_failover_add_source('', 'x\\', 1, \\'\\', 1); DROP TABLE t; --', 1, '', 1)"
    )


def test_configure_gives_the_list_turns_failover_on_and_its_rollback_restores_what_was():
    previous = [("db-1", 3306, 90), ("old", 3306, 50)]
    candidates = [("db-1", 3306, 90), ("db-2", 3306, 80), ("db-3", 3306, 0)]  # weight 0 -> MySQL's least, 1
    sql, rollback = native.configure(
        render,
        "8.0.36",
        source=("db-1", 3306),
        candidates=candidates,
        user="repl",
        password="'__SECRET__dr-channel-1__SECRET__'"[1:-1],
        previous=previous,
        was_on=False,
    )
    assert sql[0] == "STOP REPLICA FOR CHANNEL ''" and sql[-1] == "START REPLICA FOR CHANNEL ''"
    assert "SOURCE_HOST='db-1'" in sql[1] and "SOURCE_CONNECTION_AUTO_FAILOVER=1" in sql[1]
    assert "SOURCE_PASSWORD='__SECRET__dr-channel-1__SECRET__'" in sql[1]  # the plan's secret marker, sent filled in
    assert sql[2:-1] == [
        "SELECT asynchronous_connection_failover_delete_source('', 'old', 3306, '')",
        "SELECT asynchronous_connection_failover_add_source('', 'db-2', 3306, '', 80)",
        "SELECT asynchronous_connection_failover_add_source('', 'db-3', 3306, '', 1)",
    ]  # db-1 is listed already with its weight: left alone
    assert rollback == [
        "STOP REPLICA FOR CHANNEL ''",
        "SELECT asynchronous_connection_failover_delete_source('', 'db-2', 3306, '')",
        "SELECT asynchronous_connection_failover_delete_source('', 'db-3', 3306, '')",
        "SELECT asynchronous_connection_failover_add_source('', 'old', 3306, '', 50)",
        sql[1].replace("SOURCE_CONNECTION_AUTO_FAILOVER=1", "SOURCE_CONNECTION_AUTO_FAILOVER=0"),
        "START REPLICA FOR CHANNEL ''",
    ]
    for statement in sql + rollback:  # every statement one of the documented forms
        assert re.fullmatch(
            r"(STOP|START) REPLICA FOR CHANNEL '[^']*'|CHANGE REPLICATION SOURCE TO .* FOR CHANNEL '[^']*'"
            r"|SELECT asynchronous_connection_failover_(add|delete)_source\('[^']*', '[^']*', \d+, ''"
            r"(, \d+)?\)",
            statement,
        ), statement


def test_a_weight_change_is_a_delete_and_an_add():
    sql, rollback = native.configure(
        render,
        "8.0.23",
        source=("a", 1),
        candidates=[("a", 1, 70)],
        user="r",
        password="p",
        previous=[("a", 1, 50)],
        was_on=True,
    )
    assert sql[2:-1] == [
        "SELECT asynchronous_connection_failover_delete_source('', 'a', 1, '')",
        "SELECT asynchronous_connection_failover_add_source('', 'a', 1, '', 70)",
    ]
    assert rollback[1:3] == [
        "SELECT asynchronous_connection_failover_delete_source('', 'a', 1, '')",
        "SELECT asynchronous_connection_failover_add_source('', 'a', 1, '', 50)",
    ]
    assert "SOURCE_CONNECTION_AUTO_FAILOVER=1" in rollback[3]  # it was on: it stays on


# -- what the product does around a native replica (documents as a MySQL 8.0.22+ replica's poll writes them) --------
@pytest.fixture
def channel(db):
    from apps.dr.models import ChannelCandidate, ReplicationChannel
    from apps.fleet.models import Cluster, Server

    dc1 = Cluster.objects.create(name="mysql-dc1", writer_hostgroup=10, reader_hostgroup=11)
    dc2 = Cluster.objects.create(name="mysql-dc2", writer_hostgroup=20, reader_hostgroup=21)
    sources = [Server.objects.create(cluster=dc1, hostname=f"db{i}.dc1", port=3306) for i in (1, 2)]
    replica = Server.objects.create(cluster=dc2, hostname="db1.dc2", port=3306)
    ch = ReplicationChannel.objects.create(
        name="mysql",
        source_cluster=dc1,
        replica_cluster=dc2,
        source_server=sources[0],
        replica_server=replica,
        replication_user="repl",
        auto_failover_enabled=True,
        failover_after_polls=1,
    )
    for server, weight in zip(sources, (90, 80)):
        ChannelCandidate.objects.create(channel=ch, side="source", server=server, weight=weight)
    return ch, sources


def test_a_native_replica_that_moved_its_source_is_followed_in_the_inventory_and_audited(channel):
    from apps.audit.models import AuditEvent
    from apps.dr import failover
    from apps.dr.models import ReplicationChannel

    ch, (first, second) = channel
    doc = {
        "state": "misdirected",
        "replica": {"ok": True, "native_failover": True, "source_host": "db2.dc1", "source_port": 3306},
    }
    assert failover.follow_native(ch, doc) == second
    assert ReplicationChannel.objects.get(pk=ch.pk).source_server == second
    event = AuditEvent.objects.get(action="channel source followed")
    assert event.details["new_source"] == "db2.dc1:3306" and "MySQL 8.0.22+" in event.details["why"]
    # Not a native replica, or replicating from a node that is no candidate: the inventory is not touched.
    assert failover.follow_native(ch, {**doc, "replica": {**doc["replica"], "native_failover": False}}) is None
    assert failover.follow_native(ch, {**doc, "replica": {**doc["replica"], "source_host": "elsewhere"}}) is None


def test_a_native_replica_fails_its_source_over_itself_the_product_plans_nothing(channel, live_redis):
    from apps.audit.models import AuditEvent
    from apps.dr import failover
    from apps.operations.models import Operation

    ch, _ = channel
    doc = {
        "state": "connecting",
        "failing_polls": {"source": 3, "replica": 0},
        "source": {"ok": False, "error": "refused"},
        "replica": {"ok": True, "native_failover": True, "io_running": "Connecting", "last_io_error": "lost"},
    }
    assert failover.after_poll(ch, doc) is None
    assert failover.after_poll(ch, doc) is None
    assert not Operation.objects.exists()
    [event] = AuditEvent.objects.filter(action="channel_move refused")  # said once, not at every poll
    assert "asynchronous connection failover" in event.details["reason"]


def test_only_the_password_the_planner_placed_is_filled_in_a_user_named_like_its_marker_stays_text():
    """Issue 22: the replication user's name equal to the channel's secret marker is sent as that name; the
    password goes where the plan placed it, and only there."""
    from apps.plans.vocabulary import Plan, Secret, place, secret_marker

    placed = {}
    sql, rollback = native.configure(
        lambda s, p=(): place(render, s, p, placed),
        "8.0.36",
        source=("db-1", 3306),
        candidates=[("db-1", 3306, 90)],
        user=secret_marker("dr-channel-1"),
        password=Secret("dr-channel-1"),
    )
    plan = Plan("channel_move", 1, "t", [], [], secrets=placed)
    sent = plan.to_send(sql[1], {"dr-channel-1": "s'cret"}, render)
    assert sent.startswith(
        "CHANGE REPLICATION SOURCE TO SOURCE_HOST='db-1', SOURCE_PORT=3306, "
        "SOURCE_USER='__SECRET__dr-channel-1__SECRET__', SOURCE_PASSWORD='s\\'cret',"
    )
    assert sent.endswith(" FOR CHANNEL ''") and sent.count("s\\'cret") == 1
    assert [plan.to_send(s, {}, render) for s in sql if s != sql[1]] == [s for s in sql if s != sql[1]]
