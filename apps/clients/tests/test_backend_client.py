"""The backend client against the real Galera lab."""

import socket
import time

import pytest

from apps.clients.backend import BackendClient
from apps.clients.wire import AuthFailed, Unreachable


def test_reads_a_synced_galera_node(galera_lab):
    node = galera_lab.node(1)
    with BackendClient(node.host, node.port, "monitor", "monitor") as client:
        state = client.state()
    assert state.wsrep_on and state.synced_primary
    assert state.local_state_comment == "Synced" and state.cluster_size == 3
    assert state.local_recv_queue >= 0 and state.desync is False and state.reject_queries == "NONE"
    assert state.last_committed > 0
    assert (
        state.cluster_state_uuid
        and state.cluster_state_uuid
        == BackendClient("127.0.0.1", galera_lab.node(2).port, "monitor", "monitor").state().cluster_state_uuid
    )


def test_localhost_is_tcp_to_the_port_not_the_local_socket(galera_lab):
    with BackendClient("localhost", galera_lab.node(3).port, "monitor", "monitor") as client:
        assert client.state().synced_primary


def test_wrong_monitor_password(galera_lab):
    node = galera_lab.node(2)
    with pytest.raises(AuthFailed):
        BackendClient(node.host, node.port, "monitor", "nope").state()


def test_down_port_is_unreachable_within_the_deadline():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        start = time.monotonic()
        with pytest.raises(Unreachable):
            BackendClient("127.0.0.1", s.getsockname()[1], "monitor", "monitor").state()
    assert time.monotonic() - start < 0.5


def test_group_replication_promotion_sends_exactly_this_statement(proxysql_double):
    """No Group Replication server installs here: the statement is checked on the wire (the lab double
    logs what it receives and rejects the unknown function), not against a real group."""
    from apps.clients.wire import Rejected

    client = BackendClient("127.0.0.1", proxysql_double.port, proxysql_double.user, proxysql_double.password)
    with pytest.raises(Rejected):
        client.group_replication_set_as_primary("3e11fa47-71ca-11e1-9e33-c80aa9429562'; --")
    sent = proxysql_double.statements()
    assert "SELECT group_replication_set_as_primary('3e11fa47-71ca-11e1-9e33-c80aa9429562''; --')" in sent
