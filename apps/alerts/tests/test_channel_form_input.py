"""The channel form (issue 22): a 20-digit cluster id is a form error, not an OverflowError 500; two admins adding
a channel of one name at the same moment get a channel and a form error, not an IntegrityError 500."""
import threading

import pytest
from django.test import Client
from django.urls import reverse

from apps.alerts.forms import ChannelForm
from apps.alerts.models import Channel
from apps.fleet.models import Cluster

FIELDS = {"name": "ops", "kind": "webhook", "url": "http://127.0.0.1:9/hook", "min_severity": "warning"}


@pytest.mark.django_db
def test_a_huge_or_odd_cluster_id_is_a_form_error():
    cluster = Cluster.objects.create(name="c", writer_hostgroup=100, reader_hostgroup=101)
    for bad in ("99999999999999999999", str(2**63), "²", "-1"):
        form = ChannelForm(data={**FIELDS, "clusters": [str(cluster.pk), bad]})
        assert not form.is_valid() and "clusters" in form.errors, bad
    assert ChannelForm(data={**FIELDS, "clusters": [str(cluster.pk)]}).is_valid()


@pytest.mark.django_db(transaction=True)
def test_two_admins_adding_one_name_at_once_get_one_channel_and_a_message(admin_user_role):
    barrier, statuses = threading.Barrier(6), []

    def add():
        client = Client(raise_request_exception=False)  # a 500 is counted, not raised in the thread
        client.force_login(admin_user_role)
        barrier.wait()
        statuses.append(client.post(reverse("alerts:channel_create"), FIELDS).status_code)

    threads = [threading.Thread(target=add) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert Channel.objects.filter(name="ops").count() == 1
    assert len(statuses) == 6 and statuses.count(302) == 1 and statuses.count(400) == 5, statuses
