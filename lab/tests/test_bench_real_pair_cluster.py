"""bin/bench-real-pair --cluster's own logic, on the lab doubles (the benchmark itself needs a real ProxySQL and is
never part of the suite; its figures are in docs/benchmarks.md): the config file that makes two real nodes one
ProxySQL Cluster, the after-operation check (three layers, both nodes, sync settings back) that must find each
kind of difference, and the propagation measurement."""

import io
import re

from lab.management.commands.bench_real_pair import Command
from lab.real_proxysql import RealProxySQL, config_text


def test_the_config_makes_a_cluster_member_only_when_peers_are_given(tmp_path):
    member = config_text(tmp_path, 16132, 16133, {"proxysql-1": 16132, "proxysql-2": 26132})
    assert 'admin_credentials="admin:admin;cluster:cluster"' in member
    assert 'cluster_username="cluster"' in member and 'cluster_password="cluster"' in member
    assert re.search(r"proxysql_servers=\n\(\n.*port=16132.*,\n.*port=26132.*\n\)", member)
    alone = config_text(tmp_path, 16132, 16133)
    assert "proxysql_servers" not in alone and "cluster" not in alone and 'admin_credentials="admin:admin"' in alone


def test_the_config_gives_a_3_0_node_its_own_postgresql_listeners_and_an_older_one_none(tmp_path):
    # 3.0 listens for PostgreSQL on 0.0.0.0:6132 and 6133 by default: two nodes on one host would contend for them
    for peers in (None, {"proxysql-1": 16132, "proxysql-2": 26132}):
        new = config_text(tmp_path, 26132, 26133, peers, version=(3, 0))
        assert 'pgsql_ifaces="127.0.0.1:26134"' in new
        assert re.search(r'^pgsql_variables=\n\{\n    interfaces="127.0.0.1:26135"\n\}$', new, re.M)
        for old in ((2, 5), (2, 7), None):
            assert "pgsql" not in config_text(tmp_path, 26132, 26133, peers, version=old)


def bench_over(doubles, tmp_path):
    command = Command(stdout=io.StringIO())
    command.o = {"cluster": True}
    command.nodes = [
        RealProxySQL(None, tmp_path / f"n{i}", d.port, 0, name=f"proxysql-{i + 1}") for i, d in enumerate(doubles)
    ]
    return command


def test_the_after_operation_check_finds_each_kind_of_difference(proxysql_cluster_pair, tmp_path):
    a, b = proxysql_cluster_pair
    for d in (a, b):  # the same writer on both, in every layer
        d.query("INSERT INTO mysql_servers (hostgroup_id, hostname, port) VALUES (100, '127.0.0.1', 3311)")
        d.query("LOAD MYSQL SERVERS TO RUNTIME")
        d.query("SAVE MYSQL SERVERS TO DISK")
    command = bench_over((a, b), tmp_path)
    command.sync_before = {n.name: command.sync_settings(n) for n in command.nodes}
    assert command.sync_before["proxysql-1"]["disk"]["admin-cluster_mysql_servers_diffs_before_sync"] == "3"
    assert command.cluster_problems() == []
    a.query("UPDATE mysql_servers SET weight=weight+1")  # memory only: a restart would not load it
    assert any("proxysql-1: mysql_servers layers differ" in p for p in command.cluster_problems())
    a.query("LOAD MYSQL SERVERS TO RUNTIME")
    a.query("SAVE MYSQL SERVERS TO DISK")  # equal in a's layers; b has not pulled yet (3 checks of 1 s)
    assert [p for p in command.cluster_problems() if "runtime mysql_servers differ" in p]
    b.query("SET admin-cluster_mysql_servers_diffs_before_sync=0")
    b.query("LOAD ADMIN VARIABLES TO RUNTIME")  # a hold left behind on b
    assert any(p.startswith("proxysql-2: sync settings") for p in command.cluster_problems())


def test_the_propagation_is_measured_as_the_peer_pulls(proxysql_cluster_pair, tmp_path):
    command = bench_over(proxysql_cluster_pair, tmp_path)
    command.bench_propagation(loads=1, modules=["mysql_query_rules"])
    line = command.stdout.getvalue().splitlines()[-1]
    ms = float(re.search(r"mysql_query_rules: median ([\d.]+) ms", line).group(1))
    assert 1000 < ms < 6000, line  # pulled after diffs_before_sync (3) checks of 1 s, as a real peer does
