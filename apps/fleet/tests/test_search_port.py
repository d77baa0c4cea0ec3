"""The header's search finds a backend by its port alone, as a DBA types it ("3312")."""

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_a_port_alone_finds_the_backend_and_the_node_on_it(adopted_lab, viewer_client):
    cluster, (first, _) = adopted_lab
    page = viewer_client.get(reverse("search") + "?q=3312").content.decode()
    assert "127.0.0.1:3312" in page
    page = viewer_client.get(reverse("search") + f"?q={first.port}").content.decode()
    assert f"127.0.0.1:{first.port}" in page
