"""Issue 34: a cluster's TLS setting against a real MariaDB that demands TLS of the monitor user (REQUIRE SSL), with a
CA and a server certificate made here. A private server (own directory and port, as lab/tests/test_galera_lab.py's
standalone test), so no lab another test or engineer uses is changed."""

import os
import shutil
import socket
from contextlib import closing

import pytest
import trustme

from apps.clients.backend import BackendClient
from apps.clients.wire import AuthFailed, TLSFailed
from apps.fleet.models import Cluster, Server
from lab._mariadb_common import LAB_VAR, execute_all
from lab.mariadb_standalone import MariaDBStandalone

pytestmark = pytest.mark.django_db
PASSWORD = "St0red-M0nitor-Pw"


class TLSMariaDB(MariaDBStandalone):
    """A standalone MariaDB whose TLS files are in its own directory (chowned with it for the server's OS user)."""

    def _cnf_extra(self, node):
        tls = self.base_dir / "tls"
        return (
            super()._cnf_extra(node) + f"ssl-ca={tls / 'ca.pem'}\nssl-cert={tls / 'server.pem'}\n"
            f"ssl-key={tls / 'server.key'}\n"
        )


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    ca, stranger = trustme.CA(), trustme.CA()
    base = LAB_VAR / f"test-tls-mariadb-{os.getpid()}"
    (base / "tls").mkdir(parents=True, exist_ok=True)
    issued = ca.issue_cert("127.0.0.1")
    (base / "tls" / "ca.pem").write_bytes(ca.cert_pem.bytes())
    (base / "tls" / "server.pem").write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    (base / "tls" / "server.key").write_bytes(issued.private_key_pem.bytes())
    db = TLSMariaDB(base_dir=base, port=_free_port())
    try:
        db.up()
        with closing(db.root_connection()) as conn:
            execute_all(conn, [f"CREATE USER 'monitor'@'%' IDENTIFIED BY '{PASSWORD}' REQUIRE SSL"])
        yield {"port": db.port, "ca": ca.cert_pem.bytes().decode(), "stranger": stranger.cert_pem.bytes().decode()}
    finally:
        db.down()
        shutil.rmtree(base, ignore_errors=True)


def client(server, tls_ca="", tls_verify=True):
    """The backend client of a cluster whose one backend is the server, with this TLS setting."""
    cluster, _ = Cluster.objects.update_or_create(
        name="shop",
        defaults=dict(
            writer_hostgroup=100,
            reader_hostgroup=101,
            monitor_user="monitor",
            monitor_password=PASSWORD,
            tls_ca=tls_ca,
            tls_verify=tls_verify,
        ),
    )
    backend, _ = Server.objects.get_or_create(cluster=cluster, hostname="127.0.0.1", port=server["port"])
    return BackendClient.for_server(Server.objects.select_related("cluster").get(pk=backend.pk))


def test_without_the_ca_the_server_refuses_the_monitor_user(server):
    with client(server) as backend, pytest.raises(AuthFailed, match="Access denied for user 'monitor'"):
        backend.ping()


def test_with_the_clusters_ca_the_monitor_reads_over_verified_tls(server):
    with client(server, tls_ca=server["ca"]) as backend:
        assert backend.state().version  # the poll's own read
        cipher = backend.wire.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'").rows[0][1]
        assert cipher  # the session is TLS


def test_verify_on_and_another_ca_is_refused_verify_off_takes_it(server):
    with client(server, tls_ca=server["stranger"]) as backend, pytest.raises(TLSFailed, match="verified against"):
        backend.ping()
    with client(server, tls_ca=server["stranger"], tls_verify=False) as backend:
        assert backend.wire.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'").rows[0][1]
