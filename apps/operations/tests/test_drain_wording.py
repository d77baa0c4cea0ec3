"""The reader drain's form speaks of the backend drained, not of "the old writer" (the switchover's words)."""

import pytest
from django.urls import reverse

from apps.fleet.models import Server

pytestmark = pytest.mark.django_db


def test_the_drain_form_does_not_borrow_the_switchover_wording(adopted_lab, operator_client):
    cluster, _ = adopted_lab
    server = Server.objects.filter(cluster=cluster).order_by("pk").last()
    page = operator_client.get(reverse("operations:drain", args=[server.pk])).content.decode()
    assert "old writer" not in page and "cuts the sessions still on this backend" in page
