"""The query tools on the node and cluster pages (issue 23 §4): users against their max_connections, sessions,
backend errors and command counters, polled from the ProxySQL doubles under the adopted lab's sessions; the
processlist read from the node now, and the guarded, audited kill of one session."""

import pytest
from django.test import Client
from django.urls import reverse

from apps.audit.models import AuditEvent
from apps.fleet.models import ProxySQLNode
from apps.monitoring import live
from apps.monitoring.tests.test_pages import html, poll
from lab import demo

pytestmark = pytest.mark.django_db


def app_user_with_a_limit(double, limit):
    demo.admin_sql(
        double.port,
        "INSERT INTO mysql_users (username,password,default_hostgroup,max_connections)"
        f" VALUES ('app','papp',100,{limit})",
        "LOAD MYSQL USERS TO RUNTIME",
        user=double.user,
        password=double.password,
    )


def writer_offline_hard_and_back(double):
    """The pinned writer sessions lose their backend connection: backend errors (2013) on that node."""
    for status in ("OFFLINE_HARD", "ONLINE"):
        demo.admin_sql(
            double.port,
            f"UPDATE mysql_servers SET status='{status}' WHERE hostgroup_id=100",
            "LOAD MYSQL SERVERS TO RUNTIME",
            user=double.user,
            password=double.password,
        )


def test_node_and_cluster_pages_show_users_sessions_errors_and_command_counters(adopted_lab, live_redis, viewer_client):
    cluster, (first, second) = adopted_lab
    app_user_with_a_limit(first, 12)  # the lab's 12 sessions (4 writers, 8 readers) of user app: at its limit
    app_user_with_a_limit(second, 100)
    writer_offline_hard_and_back(first)
    poll()
    node = ProxySQLNode.objects.get(admin_port=first.port)
    stats = live.read_one(live.PROXYSQL, node.pk)["query_stats"]
    assert stats["users"] == [["app", 12, 12]] and sum(n for n, _ in stats["sessions"].values()) == 12
    assert stats["errors"][0][:7] == [100, "127.0.0.1", 3311, "app", "sbtest", 2013, 4]
    assert stats["commands"]["SELECT"][0] > 0

    page = html(viewer_client, node.get_absolute_url())
    section = page[page.index('id="query-stats"') : page.index('id="sessions"')]
    assert '<tr data-user="app" class="warn" data-near-limit>' in section and "100 %" in section
    assert "data-sessions-total>12<" in section
    assert "Lost connection to MySQL server during query" in section and ">2013<" in section
    assert 'data-command="SELECT"' in section and 'data-command="INSERT"' in section
    assert f'hx-get="/monitoring/proxysql/{node.pk}/query-stats/"' in section
    fragment = html(viewer_client, reverse("monitoring:proxysql_query_stats", args=[node.pk]))
    assert "<html" not in fragment and 'data-user="app"' in fragment

    # The processlist, read from the node now: its 12 sessions; a viewer has no kill button.
    assert f'hx-get="/monitoring/proxysql/{node.pk}/sessions/"' in page
    sessions = html(viewer_client, reverse("monitoring:proxysql_sessions", args=[node.pk]))
    assert sessions.count("<tr data-session=") == 12 and "Kill…" not in sessions

    cluster_page = html(viewer_client, cluster.get_absolute_url())
    section = cluster_page[cluster_page.index('id="cluster-query-stats"') :]
    assert section.count("<tr data-node=") == 2 and '<tr data-user="app" class="warn">' in section
    assert '<td class="num">24</td><td>12, 100</td><td>proxysql-1</td>' in section  # both nodes; at its limit on one
    fragment = html(viewer_client, reverse("monitoring:cluster_query_stats", args=[cluster.pk]))
    assert "<html" not in fragment and "data-query-nodes" in fragment


def test_killing_a_session_needs_an_operator_and_a_confirmation_naming_it_and_is_audited(
    adopted_lab, viewer_user, operator_user
):
    cluster, (first, _) = adopted_lab
    node = ProxySQLNode.objects.get(admin_port=first.port)
    first.traffic.set_sessions(hostgroup=101, count=8, kind="read", reconnect=False)
    victim = next(r for r in first.traffic.processlist_rows(0) if r[6] == 101)
    session_id, user, cli_port = victim[1], victim[2], victim[5]
    url = reverse("monitoring:proxysql_kill_session", args=[node.pk, session_id])
    form = {"user": user, "cli_host": "127.0.0.1", "cli_port": str(cli_port), "confirm": "yes"}

    viewer, operator = Client(), Client()
    viewer.force_login(viewer_user)
    operator.force_login(operator_user)
    assert viewer.get(url).status_code == 403 and viewer.post(url, form).status_code == 403
    assert AuditEvent.objects.filter(action="refused proxysql_kill_session", actor=viewer_user.username).exists()

    confirmation = html(operator, url)
    assert f'<td data-field="session">{session_id}</td>' in confirmation
    assert f'<td data-field="user">{user}</td>' in confirmation
    assert f'<td data-field="host">127.0.0.1:{cli_port}</td>' in confirmation
    assert '<td data-field="command">' in confirmation and '<td data-field="time">' in confirmation
    assert f"KILL CONNECTION {session_id}" in confirmation

    unconfirmed = operator.post(url, {**form, "confirm": ""})
    assert unconfirmed.status_code == 400 and b"Tick the confirmation" in unconfirmed.content
    other_client = operator.post(url, {**form, "cli_port": "1"}, follow=True)  # not the session confirmed
    assert b"was not killed: the id now belongs to another client" in other_client.content
    assert session_id in {r[1] for r in first.traffic.processlist_rows(0)}
    assert not any(f"KILL CONNECTION {session_id}" in s for s in first.statements())

    done = operator.post(url, form, follow=True)
    assert f"Killed session {session_id} of user {user} from 127.0.0.1:{cli_port}".encode() in done.content
    assert session_id not in {r[1] for r in first.traffic.processlist_rows(0)}
    assert f"KILL CONNECTION {session_id}" in first.statements()
    event = AuditEvent.objects.filter(action="proxysql.kill_session", outcome="success").get()
    assert event.actor == operator_user.username and event.cluster_name == cluster.name
    assert event.details["session_id"] == session_id and event.details["user"] == user
    assert event.details["statement"] == f"KILL CONNECTION {session_id}" and event.details["gone_after"] is True
    assert AuditEvent.objects.filter(action="proxysql.kill_session", outcome="refused").exists()
    # Gone now: the confirmation says so and offers nothing to kill.
    assert "is not open on" in html(operator, url)


def test_metrics_carry_sessions_users_commands_and_backend_errors_with_bounded_labels(adopted_lab, live_redis, client):
    from apps.monitoring import exporter
    from apps.monitoring.tests.synthetic import query_stats_doc
    from apps.monitoring.tests.test_metrics import scrape, series, value

    cluster, (first, second) = adopted_lab
    app_user_with_a_limit(first, 12)
    writer_offline_hard_and_back(first)
    poll()
    parsed = series(scrape(client))
    labels = {"cluster": "galera-lab", "node": "proxysql-1"}
    assert value(parsed, "proxysql_fleet_proxysql_user_connections", **labels, user="app") == 12
    assert value(parsed, "proxysql_fleet_proxysql_user_max_connections", **labels, user="app") == 12
    sessions = {
        dict(k)["command"]: v
        for n, k in parsed
        if n == "proxysql_fleet_proxysql_sessions" and dict(k)["node"] == "proxysql-1"
        for v in [parsed[(n, k)]]
    }
    assert sum(sessions.values()) == 12 and set(sessions) <= {"Sleep", "Query", "Execute"}
    assert value(parsed, "proxysql_fleet_proxysql_command_queries_total", **labels, command="SELECT") > 0
    assert value(parsed, "proxysql_fleet_proxysql_command_time_seconds_total", **labels, command="INSERT") > 0
    assert value(parsed, "proxysql_fleet_proxysql_backend_errors_total", **labels, hostgroup="100", errno="2013") == 4
    assert not [k for n, k in parsed if dict(k).get("node") == "proxysql-2" and "errno" in dict(k)]

    # Bounded: the busiest USERS_EXPORTED users by name, the rest summed; commands outside the list summed.
    families = exporter._families()
    exporter._query_stats(
        exporter._Adder(families), {"node": "n"}, exporter.msgspec.convert(query_stats_doc(0.0), exporter.QueryStats)
    )
    users = {s.labels["user"]: s.value for s in families["proxysql_user_connections"].samples}
    assert len(users) == exporter.USERS_EXPORTED + 1  # app0..app6 hold 0..6 connections: the rest summed
    assert users[exporter.OTHER] == sum(range(7 - exporter.USERS_EXPORTED)) and users["app6"] == 6
    commands = {s.labels["command"] for s in families["proxysql_command_queries"].samples}
    assert commands == set(exporter.COMMANDS_EXPORTED) | {exporter.OTHER}


def test_a_mirrored_copy_is_labelled_offers_no_kill_and_is_no_client_session(
    adopted_lab, live_redis, viewer_client, operator_user
):
    """Issue 36: a mirror rule's copy runs as ProxySQL's own session (client mirror_internal, no port, in the mirror
    hostgroup: lab/tests/test_real_mirror_processlist.py). The page listed it as 'mirror_internal:None' with a Kill
    button and counted it among the client sessions."""
    cluster, (first, _) = adopted_lab
    node = ProxySQLNode.objects.get(admin_port=first.port)
    demo.admin_sql(
        first.port,
        "INSERT INTO mysql_query_rules (rule_id,active,match_digest,mirror_hostgroup,apply)"
        " VALUES (1,1,'^INSERT',101,0)",
        "LOAD MYSQL QUERY RULES TO RUNTIME",
        "SET mysql-mirror_max_concurrency=2",
        "LOAD MYSQL VARIABLES TO RUNTIME",
        user=first.user,
        password=first.password,
    )
    first.traffic.set_mirror(latency_ms=1000)  # each copy runs a second: both slots always busy
    copies = [r for r in first.traffic.processlist_rows(0) if r[4] == "mirror_internal"]
    assert len(copies) == 2, copies
    copy_id = copies[0][1]

    poll()
    stats = live.read_one(live.PROXYSQL, node.pk)["query_stats"]
    assert sum(n for n, _ in stats["sessions"].values()) == 12  # the lab's 12 client sessions, no copy

    sessions = html(viewer_client, reverse("monitoring:proxysql_sessions", args=[node.pk]))
    assert "12 client session(s) and 2 mirrored copies run by ProxySQL, read from the node now." in sessions
    assert sessions.count("data-mirror-copy>") == 2 and sessions.count("mirrored copy of ") == 2
    assert "mirror_internal:None" not in sessions

    operator = Client()
    operator.force_login(operator_user)
    sessions = html(operator, reverse("monitoring:proxysql_sessions", args=[node.pk]))
    rows = sessions.split("<tr data-session=")[1:]
    assert len(rows) == 14 and all(("Kill…" in r) != ("data-mirror-copy" in r) for r in rows)

    url = reverse("monitoring:proxysql_kill_session", args=[node.pk, copy_id])
    confirmation = html(operator, url)
    assert "data-mirror-copy" in confirmation and "Kill" not in confirmation and "KILL CONNECTION" not in confirmation
    refused = operator.post(
        url, {"user": "app", "cli_host": "mirror_internal", "cli_port": "", "confirm": "yes"}, follow=True
    )
    assert b"was not killed: it is a mirror rule&#x27;s copy of a query" in refused.content
    assert not any(f"KILL CONNECTION {copy_id}" in s for s in first.statements())
    assert AuditEvent.objects.filter(action="proxysql.kill_session", outcome="refused").exists()
