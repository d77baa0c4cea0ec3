"""What a real ProxySQL 2.7.1 lists in stats_mysql_query_digest for a mirror rule's copies (issue 33 §2, the real tier):
the mirror hostgroup's row of the copied digest shows from the first copy that ran, count_star 1, and counts each copy
after it. The reference captures (../shared/proxysql-reference/samples/mirror.jsonl) hold only the mirror's
Mirror_concurrency / Mirror_queue_length, no digest rows: this measures it. The double is held to the same fact by
lab/tests/test_double_digest_counts.py (it listed the INSERTs' copies only once 6 of them had run)."""

import time

import MySQLdb

MIRROR_RULE = [
    "INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'127.0.0.1',3311),(101,'127.0.0.1',3312)",
    "LOAD MYSQL SERVERS TO RUNTIME",
    "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','app',100)",
    "LOAD MYSQL USERS TO RUNTIME",
    "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,mirror_hostgroup,apply) "
    "VALUES (10,1,'^INSERT',100,101,1)",
    "LOAD MYSQL QUERY RULES TO RUNTIME",
]


def mirror_digests(node, expected_count, timeout=5.0):
    """The mirror hostgroup's digest rows, read until their count is expected_count (the copy runs after the client's
    INSERT returns) or the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        rows = node.admin("SELECT digest_text, count_star FROM stats_mysql_query_digest WHERE hostgroup=101")
        if sum(int(n) for _, n in rows) >= expected_count or time.monotonic() > deadline:
            return [(text, int(n)) for text, n in rows]
        time.sleep(0.05)


def test_a_real_node_lists_the_first_mirrored_copy_with_count_one(real_proxysql_factory, galera_healthy):
    node = real_proxysql_factory("2.7.1", name="mirror-digest")
    node.admin(*MIRROR_RULE)
    conn = MySQLdb.connect(host="127.0.0.1", port=node.client_port, user="app", passwd="app", db="app", autocommit=True)
    try:
        cur = conn.cursor()
        cur.execute("CREATE TABLE IF NOT EXISTS app.mirror_probe (id INT AUTO_INCREMENT PRIMARY KEY, tag VARCHAR(20))")
        cur.execute("INSERT INTO app.mirror_probe (tag) VALUES ('first')")
        assert mirror_digests(node, 1) == [("INSERT INTO app.mirror_probe (tag) VALUES (?)", 1)]
        for _ in range(2):
            cur.execute("INSERT INTO app.mirror_probe (tag) VALUES ('more')")
        assert mirror_digests(node, 3) == [("INSERT INTO app.mirror_probe (tag) VALUES (?)", 3)]
    finally:
        conn.close()
