"""The writer watch's targets and its pace, without a lab: which clusters' writers it watches, and a writer it cannot
connect to is tried once per refresh, never in a loop (a real listening socket that hangs up on every connection)."""

import socket
import threading
import time

import pytest
from django.db import connection

from apps.fleet.choices import NativeManager
from apps.fleet.models import Cluster, HostgroupMembership, Server
from apps.operations.switchover import current_writer
from apps.operations.writer_watch import WriterWatch, target_key, writer_targets

pytestmark = pytest.mark.django_db(transaction=True)  # the watch's loop reads the clusters on a thread of its own


def cluster_with_writer(name, port, **fields):
    cluster = Cluster.objects.create(name=name, writer_hostgroup=100, reader_hostgroup=101, **fields)
    writer = Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=port)
    HostgroupMembership.objects.create(server=writer, hostgroup_id=100, weight=1000)
    return cluster, writer


def test_the_targets_are_the_writers_of_the_clusters_the_product_fails_over_itself():
    watched, writer = cluster_with_writer("watched", 1, auto_failover_enabled=True)
    lighter = Server.objects.create(cluster=watched, hostname="127.0.0.1", port=2)
    HostgroupMembership.objects.create(server=lighter, hostgroup_id=100, weight=1)
    cluster_with_writer("failover off", 3)
    cluster_with_writer("native", 4, auto_failover_enabled=True, native_manager=NativeManager.GALERA)
    gone, gone_writer = cluster_with_writer("writer hard offline", 5, auto_failover_enabled=True)
    HostgroupMembership.objects.filter(server=gone_writer).update(status="OFFLINE_HARD")

    targets = writer_targets()
    assert {pk: s.port for pk, s in targets.items()} == {watched.pk: 1}  # current_writer's choice: the heavier
    assert target_key(targets[watched.pk])[:3] == (writer.pk, "127.0.0.1", 1)
    Cluster.objects.filter(pk=watched.pk).update(credential_hosts="127.0.0.1")
    assert target_key(writer_targets()[watched.pk]) != target_key(targets[watched.pk])  # opened again on a change


def test_the_targets_are_read_in_two_queries_and_name_current_writers_choice(django_assert_num_queries):
    """Read every second: two queries whatever the number of clusters, each cluster's writer the one current_writer
    gives (the heaviest member of the writer hostgroup not OFFLINE_HARD; a tie to the lower port)."""
    clusters = []
    for i in range(6):
        cluster, _ = cluster_with_writer(f"c{i}", 10 * i + 1, auto_failover_enabled=True)
        tie = Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=10 * i + 2 - 2 * (i % 2))
        HostgroupMembership.objects.create(server=tie, hostgroup_id=100, weight=1000)  # a tie: the lower port
        heavier_reader = Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=10 * i + 3)
        HostgroupMembership.objects.create(server=heavier_reader, hostgroup_id=101, weight=99999)
        clusters.append(cluster)
    HostgroupMembership.objects.filter(server__cluster=clusters[2], server__port=21).update(status="OFFLINE_HARD")
    with django_assert_num_queries(2):
        targets = writer_targets()
    assert (
        {pk: s.port for pk, s in targets.items()}
        == {c.pk: current_writer(c).server.port for c in clusters}
        == {c.pk: p for c, p in zip(clusters, (1, 10, 22, 30, 41, 50))}
    )


def test_a_writer_it_cannot_connect_to_is_tried_once_per_refresh():
    hangs_up = socket.create_server(("127.0.0.1", 0))
    accepted, stop = [], threading.Event()

    def accept():
        hangs_up.settimeout(0.1)
        while not stop.is_set():
            try:
                peer, _ = hangs_up.accept()
            except TimeoutError:
                continue
            accepted.append(time.monotonic())
            peer.close()

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    cluster_with_writer("watched", hangs_up.getsockname()[1], auto_failover_enabled=True)
    fired = []
    watch = WriterWatch(fired.append, refresh_s=0.25)

    def loop():
        try:
            watch.run()
        finally:
            connection.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    time.sleep(2.0)
    watch.stop()
    thread.join(10)
    stop.set()
    acceptor.join(5)
    hangs_up.close()
    assert not thread.is_alive(), "the watch did not stop"
    # Each try is the client's TCP probe and its handshake's connection: two accepts, once per refresh (8 in 2 s).
    print(f"\n{len(accepted)} connections in 2 s at a refresh of 0.25 s")
    assert 2 <= len(accepted) <= 2 * (2.0 / 0.25 + 2)
    assert not watch.watched and fired == []  # never connected, so nothing closed: no trigger
