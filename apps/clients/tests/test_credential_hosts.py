"""Issue 34: hosts that may receive stored credentials (credential_hosts.py). The one test every door asks, over the
shapes a host takes (IPv4, IPv6 in brackets, with a zone, IPv4-mapped, names in any case with a trailing dot), and the
backend client that refuses before connecting: the fake MySQL server outside the list receives nothing."""

import ipaddress
from types import SimpleNamespace

import pytest
from django.core.exceptions import ValidationError
from hypothesis import given, settings, strategies as st

from apps.clients.backend import BackendClient
from apps.clients.credential_hosts import credentials_allowed
from apps.clients.wire import NotAllowed
from apps.fleet.validators import validate_credential_hosts

from .fake_mysql import FakeMySQL


class Cluster(SimpleNamespace):
    def __str__(self):
        return "shop"

    def client_tls(self):  # as fleet.Cluster's without a CA
        return {"tls_ca": None, "tls_verify": True}


def cluster(hosts):
    return Cluster(credential_hosts=hosts, monitor_user="monitor", monitor_password="St0red-M0nitor-Pw", pk=None)


def allowed(hosts, host):
    return credentials_allowed(cluster(hosts), host, 3306)[0]


@pytest.mark.parametrize(
    "host, verdict",
    [
        ("10.1.2.3", True),
        ("10.0.0.0", True),
        ("10.255.255.255", True),
        ("11.0.0.0", False),
        ("9.255.255.255", False),
        ("10.1", False),  # a resolver's shorthand for 10.0.0.1 is no address: names match name patterns only
        ("::ffff:10.9.9.9", True),
        ("[fd00::1]", True),
        ("FD00::AB", True),
        ("fe80::1%eth0", False),
        ("fd01::1", False),
        ("db-1.example.net", True),
        ("DB-1.Example.NET.", True),
        ("db-.example.net", True),
        ("db-1.eu.example.net", False),
        ("db-1.example.net.evil.com", False),
        ("xdb-1.example.net", False),
        ("127.0.0.1", False),
        ("localhost", False),
    ],
)
def test_a_list_allows_its_addresses_networks_and_name_patterns_only(host, verdict):
    assert allowed("10.0.0.0/8, fd00::/16\n db-*.example.net", host) is verdict


def test_an_empty_list_without_a_cluster_allows_loopback_only():
    assert all(credentials_allowed(None, h, 1)[0] for h in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "LOCALHOST."))
    ok, reason = credentials_allowed(None, "db1.example.net", 3306)
    assert not ok and "db1.example.net:3306 is not a host of a new cluster's" in reason


@pytest.mark.parametrize(
    "entry, said",
    [
        ("10.0.0.1/8", "has host bits set"),
        ("db?.example.net", "not a host name"),
        ("300.1.1.1/32", "not an address or network"),
        ("-db.x", "not a host name"),
    ],
)
def test_the_setting_refuses_what_it_cannot_read(entry, said):
    with pytest.raises(ValidationError, match=said):
        validate_credential_hosts(f"10.0.0.0/8 {entry}")


@settings(max_examples=200, deadline=None)
@given(
    network=st.one_of(
        st.ip_addresses(v=4).flatmap(
            lambda a: st.integers(0, 32).map(lambda n: ipaddress.ip_network(f"{a}/{n}", strict=False))
        ),
        st.ip_addresses(v=6).flatmap(
            lambda a: st.integers(0, 128).map(lambda n: ipaddress.ip_network(f"{a}/{n}", strict=False))
        ),
    ),
    host=st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)),
    edge=st.sampled_from([None, 0, -1, "below", "above"]),
)
def test_fuzz_an_address_is_allowed_exactly_when_it_is_in_a_listed_network(network, host, edge):
    if edge in (0, -1):
        host = network[edge]  # the network's first and last address
    elif edge == "below" and int(network[0]) > 0:
        host = network[0] - 1
    elif edge == "above" and int(network[-1]) < (2**network.max_prefixlen - 1):
        host = network[-1] + 1
    expected = host.version == network.version and host in network
    if host.version == 6 and host.ipv4_mapped is not None:
        expected = network.version == 4 and host.ipv4_mapped in network  # ::ffff:a.b.c.d is a.b.c.d
    shown = f"[{host}]" if host.version == 6 else str(host)
    assert allowed(str(network), shown) is expected
    assert allowed(str(network), str(host).upper()) is expected


LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    prefix=LABEL,
    middle=LABEL,
    extra=st.lists(LABEL, min_size=0, max_size=2),
    upper=st.booleans(),
    dot=st.booleans(),
    other=st.lists(LABEL, min_size=1, max_size=3),
)
def test_fuzz_a_name_pattern_star_stays_within_one_label(prefix, middle, extra, upper, dot, other):
    pattern = f"{prefix}-*.example.net"
    host = ".".join([f"{prefix}-{middle}", *extra, "example", "net"])
    shown = (host.upper() if upper else host) + ("." if dot else "")
    assert allowed(pattern, shown) is (not extra)
    assert not allowed(pattern, ".".join([*other, "evil", "com"]))
    assert not allowed(pattern, host + ".evil.com")


def test_the_backend_client_sends_nothing_to_a_host_outside_the_list():
    with FakeMySQL(b"mysql_native_password") as fake:
        server = SimpleNamespace(hostname="127.0.0.1", port=fake.port, cluster=cluster("10.0.0.0/8"))
        with pytest.raises(NotAllowed) as refused:
            BackendClient.for_server(server, connect_timeout=3, read_timeout=3).ping()
        assert fake.received() == b""
        assert f"127.0.0.1:{fake.port} is not in shop's credential hosts" in refused.value.message
        server.cluster.credential_hosts = "127.0.0.1"  # allowed: it does log in (the fake server sees the user)
        client = BackendClient.for_server(server, connect_timeout=3, read_timeout=3)
        try:
            client.ping()
        except Exception:
            pass
        finally:
            client.close()
        assert b"monitor" in fake.received()
