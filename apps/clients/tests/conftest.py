import ssl

import pytest
import trustme


@pytest.fixture(scope="module")
def tls():
    """A CA and a server certificate for 127.0.0.1 it signed; another CA that signed nothing here."""
    ca, stranger = trustme.CA(), trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    return {"ca": ca.cert_pem.bytes().decode(), "stranger": stranger.cert_pem.bytes().decode(), "server": server}
