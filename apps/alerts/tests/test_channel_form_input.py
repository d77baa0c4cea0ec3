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


@pytest.mark.django_db
def test_a_channel_posts_only_to_the_allowed_destinations_and_says_where(settings, client, admin_user_role):
    settings.ALERT_CHANNEL_DESTINATIONS = ["hooks.example.net:443", "10.0.0.0/8"]
    client.force_login(admin_user_role)
    for url in (
        "http://127.0.0.1:9/hook",
        "http://169.254.169.254/latest/",
        "http://hooks.example.net/x",
        "https://localhost:443/x",
        "http://10.1.2.3.example.org/",
    ):
        response = client.post(reverse("alerts:channel_create"), {**FIELDS, "url": url})
        body = response.content.decode()
        assert response.status_code == 400 and "is not among the destinations" in body, (url, response.status_code)
    assert not Channel.objects.exists()
    assert "Allowed destinations: hooks.example.net:443, 10.0.0.0/8" in body
    for name, url in (("slack", "https://hooks.example.net/services/x"), ("am", "http://10.1.2.3:9093")):
        assert client.post(reverse("alerts:channel_create"), {**FIELDS, "name": name, "url": url}).status_code == 302
    page = client.get(Channel.objects.get(name="slack").get_absolute_url()).content.decode()
    assert "posts to <strong data-destination>hooks.example.net:443</strong>" in page
    assert "Posts to hooks.example.net:443." in page  # the form too
    settings.ALERT_CHANNEL_DESTINATIONS = []  # empty: anywhere
    assert client.post(reverse("alerts:channel_create"), {**FIELDS, "name": "any"}).status_code == 302


@pytest.mark.django_db
def test_a_send_to_a_destination_no_longer_allowed_is_refused_before_any_request(settings, receiver):
    from apps.alerts import channels

    ch = Channel.objects.create(name="hook", kind="webhook", url=receiver.url)
    settings.ALERT_CHANNEL_DESTINATIONS = ["hooks.example.net"]
    result = channels.send(ch, {"alerts": []})
    assert not result.ok and not result.retry and "is not among the destinations" in result.error
    assert receiver.got == []
    settings.ALERT_CHANNEL_DESTINATIONS = ["127.0.0.0/8"]  # the receiver's address: allowed by CIDR
    assert channels.send(ch, {"alerts": []}).ok and len(receiver.got) == 1
