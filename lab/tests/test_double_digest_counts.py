"""The double's stats_mysql_query_digest at a fractional query count: whole queries, never a NULL row.

The model counts queries as floats; the digest view shows digest i of a group once i whole queries ran. The weights
that share a group's queries among its digests were summed over int(q) digests while the view listed every i < q:
at q = 5.5 it showed a sixth digest the weights did not hold. For the mirrored copies of a rule matching only the
INSERTs (the sixth template of the write role) the weights summed to 0, and the row read count_star NULL: the
product's digest poll refused the table ("not a digest row"), so the first poll after mirroring started failed
and apps/digests/tests/test_list_figures.py::test_mirrored_executions_are_not_counted_but_shown_apart found no
INSERT on the list (1 run in 15 to 20 on an idle machine, depending on when the poll read the copies).
"""

import MySQLdb

from lab.proxysql_double.traffic import role_templates

INSERT = next(i for i, t in enumerate(role_templates("write")) if t[0].startswith("INSERT"))


def digest_rows(double, hostgroup):
    conn = MySQLdb.connect(**double.connect_kwargs())
    try:
        cur = conn.cursor()
        cur.execute(
            "SELECT digest_text, count_star, sum_time FROM stats_mysql_query_digest WHERE hostgroup = %d" % hostgroup
        )
        return [
            (text, None if count is None else int(count), None if total is None else int(total))
            for text, count, total in cur.fetchall()
        ]
    finally:
        conn.close()


def test_a_fractional_count_shows_the_digests_of_its_whole_queries(proxysql_double):
    traffic = proxysql_double.traffic
    traffic.set_sessions(hostgroup=100, count=0, kind="write")  # a writer hostgroup, no session running
    traffic.set_digests(queries=5.5)
    rows = digest_rows(proxysql_double, 100)
    assert all(count is not None and count >= 1 and total is not None for _, count, total in rows), rows
    assert len(rows) == 5 and sum(count for _, count, _ in rows) == 5, rows  # 5 whole queries: BEGIN ... DELETE


def test_mirrored_copies_of_the_inserts_never_read_as_a_null_count(proxysql_double_in_process):
    traffic = proxysql_double_in_process.traffic
    route = (10, 101, 100, "write", 1 << INSERT, "app", "sbtest")  # rule 10 mirrors the writer's INSERTs to 101
    with traffic.lock:
        traffic._mirror_step = {route: 5.5}
        traffic._run_mirror_queue(0.1)  # 16 slots serve them all: 5.5 copies ran
    rows = digest_rows(proxysql_double_in_process, 101)
    assert all(count is not None and count >= 1 and total is not None for _, count, total in rows), rows
    assert sum(count for _, count, _ in rows) <= 5, rows

    with traffic.lock:
        traffic._mirror_step = {route: 40.0}
        traffic._run_mirror_queue(0.1)  # 45.5 in all: the INSERTs' digests show
    rows = digest_rows(proxysql_double_in_process, 101)
    assert rows and all(text.startswith("INSERT") and count is not None and count >= 1 for text, count, _ in rows), rows
    assert sum(count for _, count, _ in rows) <= 45, rows


def test_the_first_mirrored_copy_that_ran_shows_its_digest_with_count_one(proxysql_double_in_process):
    """ProxySQL counts a mirrored copy in the mirror hostgroup under the original's digest as soon as it ran. The
    double listed a mirror-only row's first int(copies) digests of the whole role (BEGIN, COMMIT, ...) and kept only
    the rule's: the INSERTs' first digest (the sixth) showed once 6 copies had run, and 1 to 5 copies showed nothing."""
    traffic = proxysql_double_in_process.traffic
    route = (10, 101, 100, "write", 1 << INSERT, "app", "sbtest")  # rule 10 mirrors the writer's INSERTs to 101
    with traffic.lock:
        traffic._mirror_step = {route: 1.0}
        traffic._run_mirror_queue(0.1)  # one copy ran
    rows = digest_rows(proxysql_double_in_process, 101)
    assert [(text, count) for text, count, _ in rows] == [("INSERT INTO sbtest1 (id,k,c,pad) VALUES (?,?,?,?)", 1)]
    assert rows[0][2] is not None and rows[0][2] > 0, rows

    with traffic.lock:
        traffic._mirror_step = {route: 2.0}
        traffic._run_mirror_queue(0.1)  # 3 copies in all: every one counted, only the rule's digests
    rows = digest_rows(proxysql_double_in_process, 101)
    assert all(text.startswith("INSERT") for text, _, _ in rows), rows
    assert sum(count for _, count, _ in rows) == 3, rows
