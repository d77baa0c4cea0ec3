"""What a real ProxySQL 2.7.1 lists in stats_mysql_processlist while a mirror rule's copy runs (issue 36; measured, the
reference captures hold no mirror session): the copy is a session of its own in the mirror hostgroup, its query text
the application's, its client 'mirror_internal' with no port. The digest poll samples example queries from this table
(ProxySQLAdmin.running_queries): a copy's session is not the application's query and is left out."""

import threading
import time

import MySQLdb

from apps.clients.proxysql import ProxySQLAdmin
from apps.monitoring.sessions import mark_mirror_copies

from .test_real_mirror_digest import MIRROR_RULE

SLOW_SELECT_MIRRORED = [
    "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,mirror_hostgroup,apply) "
    "VALUES (20,1,'^SELECT SLEEP',100,101,1)",
    "LOAD MYSQL QUERY RULES TO RUNTIME",
]


def test_a_mirrored_copy_runs_as_a_mirror_internal_session_and_is_no_example(real_proxysql_factory, galera_healthy):
    node = real_proxysql_factory("2.7.1", name="mirror-processlist")
    node.admin(*MIRROR_RULE, *SLOW_SELECT_MIRRORED)
    conn = MySQLdb.connect(host="127.0.0.1", port=node.client_port, user="app", passwd="app", db="app", autocommit=True)
    client = threading.Thread(target=lambda: conn.cursor().execute("SELECT SLEEP(2) AS probe"))
    client.start()
    try:
        deadline = time.monotonic() + 1.5
        while True:  # the copy starts beside the original: both run for 2 s
            sessions = node.admin(
                "SELECT hostgroup, cli_host, cli_port, info FROM stats_mysql_processlist"
                " WHERE info LIKE 'SELECT SLEEP%'"
            )
            if len(sessions) == 2 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with ProxySQLAdmin("127.0.0.1", node.admin_port, "admin", "admin") as admin:
            running = admin.running_queries(100)
            counts = admin.session_counts()
            listed = mark_mirror_copies(admin.processlist())
    finally:
        client.join()
        conn.close()
    assert sorted(sessions) == [
        ("100", "127.0.0.1", sorted(sessions)[0][2], "SELECT SLEEP(2) AS probe"),
        ("101", "mirror_internal", None, "SELECT SLEEP(2) AS probe"),
    ]
    assert [(hostgroup, info) for hostgroup, _, _, _, _, _, info in running] == [(100, "SELECT SLEEP(2) AS probe")]
    # The node page: the copy is no client session (not counted) and is labelled a copy of the client's session.
    assert set(counts) == {"Query"} and counts["Query"][0] == 1, counts
    client = next(r for r in listed if r["hostgroup"] == 100)
    copy = next(r for r in listed if r["hostgroup"] == 101)
    assert (client["mirror_copy"], copy["mirror_copy"], copy["mirror_of"]) == (False, True, client["SessionID"])
