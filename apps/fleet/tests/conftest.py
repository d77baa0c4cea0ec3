"""Fleet fixtures: ProxySQL doubles configured like the seeds' Galera layout, in front of the lab.

seed_layout(double)  writes the seeds' mysql_servers (writer 100, reader 101, backup writer 102) into a
                     double through its admin port and loads it to runtime, as an operator would have.
lab_pair             two doubles with that layout: the two ProxySQL nodes of one cluster.
"""
import MySQLdb
import pytest

GALERA_PORTS = (3311, 3312, 3313)
SEED_ROWS = [  # (hostgroup, port, weight, comment): DOMAIN.md's Galera example
    (100, 3311, 1000000, "writer"),
    (101, 3311, 100, "writer, reads elsewhere first"),
    (101, 3312, 10000, "reader"),
    (101, 3313, 10000, "reader"),
    (102, 3312, 1000, "backup writer 1"),
    (102, 3313, 100, "backup writer 2"),
]


def admin_sql(double, *statements):
    conn = MySQLdb.connect(host="127.0.0.1", port=double.port, user=double.user, passwd=double.password,
                           connect_timeout=2)
    try:
        cur = conn.cursor()
        for sql in statements:
            cur.execute(sql)
        return cur.fetchall()
    finally:
        conn.close()


def seed_layout(double, ports=GALERA_PORTS):
    rows = [(hg, p, w, c) for hg, p, w, c in SEED_ROWS if p in ports or hg != 100]
    statements = ["DELETE FROM mysql_servers"]
    for hg, port, weight, comment in rows:
        statements.append("INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections,comment)"
                          f" VALUES ({hg},'127.0.0.1',{port},{weight},2000,'{comment}')")
    statements += ["LOAD MYSQL SERVERS TO RUNTIME", "SAVE MYSQL SERVERS TO DISK"]
    admin_sql(double, *statements)
    return double


@pytest.fixture
def lab_pair(proxysql_double_pair):
    """Two ProxySQL doubles fronting the Galera lab's ports with the seeds' hostgroups."""
    return [seed_layout(d) for d in proxysql_double_pair]
