"""Issue 34: stored passwords never leave in clear. A fake MySQL server on 127.0.0.1 asks for the authentication
plugin of its choosing; neither client (ProxySQL admin, backend monitor) sends it the password, and the refusal
says what happened."""

import pytest
from hypothesis import given, settings, strategies as st

from apps.clients.backend import BackendClient
from apps.clients.proxysql import ProxySQLAdmin
from apps.clients.wire import (
    ALLOWED_AUTH_PLUGINS,
    AUTH_OPTIONS,
    TLS_AUTH_OPTIONS,
    TLS_AUTH_PLUGINS,
    AuthFailed,
    ClientError,
    TLSFailed,
    checked_option_file,
)

from .fake_mysql import FakeMySQL

PASSWORD = "St0red-M0nitor-Pw"
CLIENTS = {"proxysql admin": (ProxySQLAdmin, lambda c: c.ping()), "backend": (BackendClient, lambda c: c.ping())}


def try_client(kind, fake):
    make, call = CLIENTS[kind]
    client = make("127.0.0.1", fake.port, "monitor", PASSWORD, connect_timeout=3, read_timeout=3)
    try:
        call(client)
    finally:
        client.close()


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("in_handshake", [False, True], ids=["auth switch", "first packet"])
def test_no_client_sends_the_password_to_a_server_asking_for_cleartext(kind, in_handshake):
    with FakeMySQL(b"mysql_clear_password", in_handshake=in_handshake) as fake:
        with pytest.raises(AuthFailed) as refused:
            try_client(kind, fake)
    assert PASSWORD.encode() not in fake.received()
    if not in_handshake:
        assert b"monitor" in fake.received()  # it answered the first packet, then kept the password
    assert (
        "the server asked for an authentication plugin that is not allowed without verified TLS: refused, the "
        "password was not sent" in refused.value.message
    )
    assert "mysql_clear_password would send it in clear" in refused.value.message and not refused.value.retryable


def test_a_missing_or_loosened_option_file_stops_the_product_not_the_restriction(tmp_path):
    """Connector/C ignores a missing option file: the clients would then answer any plugin (seen by experiment)."""
    with pytest.raises(FileNotFoundError):
        checked_option_file(tmp_path / "missing.cnf")
    loosened = tmp_path / "loose.cnf"
    loosened.write_text("[controlplane]\nrestricted-auth=mysql_native_password,mysql_clear_password\n")
    with pytest.raises(RuntimeError, match=r"group \[controlplane\] must restrict the auth plugins to "):
        checked_option_file(loosened)


def test_the_option_file_allows_what_the_code_says():
    with open(AUTH_OPTIONS["read_default_file"]) as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert lines == [
        f"[{AUTH_OPTIONS['read_default_group']}]",
        "restricted-auth=" + ",".join(ALLOWED_AUTH_PLUGINS),
        f"[{TLS_AUTH_OPTIONS['read_default_group']}]",
        "restricted-auth=" + ",".join(TLS_AUTH_PLUGINS),
    ]


PLUGINS = st.one_of(
    st.sampled_from(
        [
            b"mysql_clear_password",
            b"dialog",
            b"sha256_password",
            b"caching_sha2_password",
            b"mysql_old_password",
            b"auth_gssapi_client",
            b"client_ed25519",
            b"mysql_native_password",
            b"../../../../tmp/evil",
            b"mysql_clear_password\x00x",
            b"",
        ]
    ),
    st.binary(max_size=40).filter(lambda b: b"\x00" not in b),
)


@settings(max_examples=40, deadline=None)
@given(
    plugin=PLUGINS,
    in_handshake=st.booleans(),
    kind=st.sampled_from(sorted(CLIENTS)),
    data=st.sampled_from([None, b"", b"\x00", b"x" * 300]),
)
def test_fuzz_whatever_plugin_the_server_asks_for_the_password_stays_here(plugin, in_handshake, kind, data):
    with FakeMySQL(plugin, data, in_handshake=in_handshake) as fake:
        try:
            try_client(kind, fake)
        except ClientError:
            pass  # refused or failed: both fine, as long as the password stayed here
    assert PASSWORD.encode() not in fake.received()


# -- with a CA: TLS, verified, or nothing sent ----------------------------------------------------------------------
@pytest.mark.parametrize("kind", CLIENTS)
def test_over_tls_verified_with_the_clusters_ca_the_cleartext_plugin_is_allowed(kind, tls):
    with FakeMySQL(b"mysql_clear_password", tls=tls["server"]) as fake:
        make, call = CLIENTS[kind]
        client = make("127.0.0.1", fake.port, "monitor", PASSWORD, connect_timeout=3, read_timeout=3, tls_ca=tls["ca"])
        try:
            call(client)
        finally:
            client.close()
    assert PASSWORD.encode() in fake.received()  # over TLS, to the server whose certificate the CA signed


@pytest.mark.parametrize("kind", CLIENTS)
@pytest.mark.parametrize("server", ["another CA's certificate", "no TLS"])
def test_with_a_ca_a_server_that_cannot_prove_itself_gets_nothing(kind, server, tls):
    with FakeMySQL(b"mysql_clear_password", tls=tls["server"] if server != "no TLS" else None) as fake:
        make, call = CLIENTS[kind]
        client = make(
            "127.0.0.1",
            fake.port,
            "monitor",
            PASSWORD,
            connect_timeout=3,
            read_timeout=3,
            tls_ca=tls["stranger"] if server != "no TLS" else tls["ca"],
        )
        with pytest.raises(TLSFailed) as refused:
            call(client)
    assert PASSWORD.encode() not in fake.received()
    assert refused.value.message.startswith("TLS verified against the CA failed, nothing was sent: ")
