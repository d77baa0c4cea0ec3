"""A synthetic fleet for scale tests of the pages: clusters, ProxySQL nodes, backends and memberships in
the database (bulk inserts), and latest-state documents in Redis shaped exactly like pollers.py writes
them (copied from a real poll of the lab in shape, with figures varied per node). No network besides Redis.

fleet(clusters, nodes_per_cluster, backends_per_cluster) -> (cluster ids, node ids, server ids)
publish(node_ids, server_ids, ...)                        writes the documents (one pipeline per kind)
"""

import time

from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.fleet.secrets import encrypt
from apps.monitoring import live

WRITER, READER, BACKUP = 100, 101, 102


def fleet(clusters, nodes_per_cluster=2, backends_per_cluster=6, prefix="synth"):
    Cluster.objects.bulk_create(
        [
            Cluster(
                name=f"{prefix}-{i:04d}",
                writer_hostgroup=WRITER,
                reader_hostgroup=READER,
                backup_writer_hostgroup=BACKUP,
                monitor_user="monitor",
            )
            for i in range(clusters)
        ]
    )
    cluster_ids = list(
        Cluster.objects.filter(name__startswith=f"{prefix}-").order_by("name").values_list("id", flat=True)
    )
    password = encrypt("admin")  # encrypted once; every node shares it
    nodes, servers = [], []
    for i, cid in enumerate(cluster_ids):
        for n in range(nodes_per_cluster):
            nodes.append(
                ProxySQLNode(
                    cluster_id=cid,
                    name=f"px-{i:04d}-{n}",
                    admin_host=f"{prefix}-px-{i}-{n}.example",
                    admin_port=6032,
                    admin_user="admin",
                )
            )
        for b in range(backends_per_cluster):
            servers.append(Server(cluster_id=cid, hostname=f"{prefix}-db-{i:04d}-{b}.example", port=3306))
    ProxySQLNode.objects.bulk_create(nodes, batch_size=500)
    ProxySQLNode.objects.filter(cluster_id__in=cluster_ids).update(admin_password=password)
    Server.objects.bulk_create(servers, batch_size=500)
    server_rows = list(
        Server.objects.filter(cluster_id__in=cluster_ids).values_list("id", "cluster_id", "hostname", "port")
    )
    memberships = []
    for sid, cid, host, port in server_rows:
        first = host.endswith("-0.example")
        memberships.append(HostgroupMembership(server_id=sid, hostgroup_id=READER, weight=100 if first else 10000))
        if first:
            memberships.append(HostgroupMembership(server_id=sid, hostgroup_id=WRITER, weight=1000000))
        else:
            memberships.append(HostgroupMembership(server_id=sid, hostgroup_id=BACKUP, weight=1000))
    HostgroupMembership.objects.bulk_create(memberships, batch_size=1000)
    node_ids = list(ProxySQLNode.objects.filter(cluster_id__in=cluster_ids).values_list("id", flat=True))
    return cluster_ids, node_ids, [r[0] for r in server_rows]


def _runtime_rows(cluster_id):
    rows = []
    for sid, host, port, hg, weight, status in HostgroupMembership.objects.filter(
        server__cluster_id=cluster_id
    ).values_list("server_id", "server__hostname", "server__port", "hostgroup_id", "weight", "status"):
        rows.append(
            {
                "hostgroup_id": hg,
                "hostname": host,
                "port": port,
                "gtid_port": 0,
                "status": status,
                "weight": weight,
                "compression": 0,
                "max_connections": 1000,
                "max_replication_lag": 0,
                "use_ssl": 0,
                "max_latency_ms": 0,
                "comment": "",
            }
        )
    return sorted(rows, key=lambda r: (r["hostgroup_id"], r["hostname"], r["port"]))


def proxysql_doc(runtime_rows, ts, i=0, *, ok=True, mirror_queue=0, threads=4):
    pool = [
        {
            "key": [r["hostgroup_id"], r["hostname"], r["port"]],
            "status": r["status"],
            "conn_used": (i + j) % 5,
            "conn_free": 3,
            "latency_us": 250 + j,
            "counters": {"ConnERR": 0, "Queries": 1000 * j, "Bytes_data_sent": 1, "Bytes_data_recv": 2},
            "conn_err_ps": 0.0,
            "queries_ps": 1000.0 + j,
            "bytes_sent_ps": 24000.0,
            "bytes_recv_ps": 2.1e6,
        }
        for j, r in enumerate(runtime_rows)
    ]
    figures = {
        "questions_ps": 8000.0 + i,
        "slow_queries_ps": 0.0,
        "prepared_ps": 0.0,
        "client_connections_created_ps": 0.0,
        "client_connections_aborted_ps": 0.0,
        "server_connections_aborted_ps": 0.0,
        "client_connections_connected": 12,
        "server_connections_connected": 12,
        "active_transactions": 4,
        "mirror_concurrency": 0,
        "mirror_queue_length": mirror_queue,
        "mirror_max_concurrency": 16,
        "mirror_max_queue_length": 32000,
        "mysql_threads": threads,
        "conn_used": sum(p["conn_used"] for p in pool),
        "conn_free": sum(p["conn_free"] for p in pool),
        "conn_err_ps": 0.0,
    }
    doc = {
        "ts": ts,
        "ok": True,
        "error": None,
        "error_since": None,
        "last_ok": ts,
        "uptime": 1000,
        "counters": {
            "Questions": 123456789,
            "Slow_queries": 1,
            "Com_frontend_stmt_execute": 0,
            "Client_Connections_created": 10,
            "Client_Connections_aborted": 0,
            "Server_Connections_aborted": 0,
        },
        "counters_ts": ts,
        "figures": figures,
        "pool": pool,
        "runtime_servers": runtime_rows,
        "variables": {
            "mysql-mirror_max_concurrency": "16",
            "mysql-mirror_max_queue_length": "32000",
            "mysql-threads": str(threads),
        },
        "variables_ts": ts,
        "poll_s": 0.0042,
        "query_stats": query_stats_doc(ts, i),
    }
    if not ok:
        doc.update(
            ok=False, error="ProxySQL px: connect timed out after 0.5 s", error_kind="timeout", error_since=ts - 30
        )
    return doc


def query_stats_doc(ts, i=0):
    """query_stats.py's reading as a node with 7 users (more than /metrics labels), 3 kinds of session, a sysbench-like
    mix of 12 commands and one backend error kind."""
    users = [[f"app{u}", (i + u) % 9, 100] for u in range(7)]
    commands = {
        c: [1000 * (k + 1) + i, 250_000 * (k + 1)]
        for k, c in enumerate(
            (
                "SELECT",
                "INSERT",
                "UPDATE",
                "DELETE",
                "BEGIN",
                "COMMIT",
                "ROLLBACK",
                "SET",
                "SHOW",
                "REPLACE",
                "CALL",
                "DESCRIBE",
            )
        )
    }
    return {
        "ts": ts,
        "error": None,
        "users": users,
        "sessions": {"Sleep": [8, 0], "Query": [3, 12], "Execute": [1, 3]},
        "errors": [
            [
                100,
                "10.0.0.1",
                3306,
                "app0",
                "shop",
                2013,
                4 + i,
                int(ts) - 600,
                int(ts) - 60,
                "Lost connection to MySQL server during query",
            ]
        ],
        "error_totals": [[100, 2013, 4 + i]],
        "commands": commands,
    }


def backend_doc(ts, *, local_state=4, recv_queue=0, ok=True):
    comment = {4: "Synced", 2: "Donor/Desynced", 3: "Joined", 1: "Joining"}.get(local_state)
    doc = {
        "ts": ts,
        "ok": True,
        "error": None,
        "error_since": None,
        "last_ok": ts,
        "state": {
            "version": "10.11.19-MariaDB-0+deb12u1",
            "read_only": False,
            "wsrep_on": True,
            "local_state": local_state,
            "local_state_comment": comment,
            "cluster_status": "Primary",
            "cluster_size": 3,
            "ready": True,
            "local_recv_queue": recv_queue,
            "flow_control_paused": 0.0,
            "last_committed": 142,
            "desync": local_state == 2,
            "sync_wait": 0,
            "reject_queries": "NONE",
            "pxc_maint_mode": None,
        },
        "synced_primary": local_state == 4,
        "lag_seconds": None,
        "poll_s": 0.0015,
    }
    if not ok:
        doc.update(ok=False, error="backend db: connect refused", error_kind="refused", error_since=ts - 30)
    return doc


def publish(node_ids, server_ids, *, now=None, trouble_every=0):
    """Fresh documents for every node and backend. With trouble_every=N, every Nth node is unreachable and
    every Nth backend is Donor/Desynced with a long recv queue (attention items)."""
    now = now or time.time()
    runtime = {}
    px_docs = {}
    for i, (pk, cid) in enumerate(ProxySQLNode.objects.filter(pk__in=node_ids).values_list("id", "cluster_id")):
        if cid not in runtime:
            runtime[cid] = _runtime_rows(cid)
        px_docs[pk] = proxysql_doc(runtime[cid], now, i, ok=not (trouble_every and i % trouble_every == 0))
    be_docs = {
        pk: (
            backend_doc(now, local_state=2, recv_queue=500)
            if trouble_every and i % trouble_every == 0
            else backend_doc(now)
        )
        for i, pk in enumerate(server_ids)
    }
    live.write_many(live.PROXYSQL, px_docs)
    live.write_many(live.BACKEND, be_docs)
    return px_docs, be_docs
