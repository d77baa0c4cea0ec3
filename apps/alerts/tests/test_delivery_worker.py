"""Delivery by a real Celery worker: the receiver is down when the alert fires, the worker retries with
backoff (each try in the delivery log) and delivers once it is back; a receiver that refuses the payload
(HTTP 400) is not retried; "send a test" from the channel page goes through the same path."""

import time

import pytest
from django.urls import reverse

from apps.alerts.models import Channel, DeliveryAttempt, Notification
from apps.audit.models import AuditEvent

from .conftest import firing, set_rule, until

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout, step=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


@pytest.fixture
def worker(redis_server, live_redis, celery_broker, celery_factory):
    proc = celery_factory("worker", redis_server, ALERTS_RETRY_BASE_S=0.4, ALERTS_GROUP_WAIT_S=0.5)
    yield proc
    proc.log.seek(0)
    print(proc.log.read()[-3000:])


def test_a_receiver_outage_is_retried_until_it_answers(adopted_lab, worker, receiver, settings):
    cluster, (first, second) = adopted_lab
    settings.ALERTS_GROUP_WAIT_S = 0.5
    ch = Channel.objects.create(name="on-call webhook", kind="webhook", url=receiver.url)
    set_rule("proxysql_unreachable", for_s=0)
    receiver.down()  # the receiver is down when the alert fires
    first.set_mode("hang")
    try:
        assert until(lambda: firing("proxysql_unreachable"), 10, kinds=["proxysql"])
        assert wait_for(lambda: DeliveryAttempt.objects.filter(ok=False).count() >= 3, 20), "no failed tries logged"
        n = Notification.objects.get(channel=ch)
        assert n.state == "retrying" and "ConnectionError" in n.last_error
        receiver.up()
        assert wait_for(lambda: Notification.objects.get(pk=n.pk).state == "sent", 20)
    finally:
        first.set_mode("normal")
    [msg] = receiver.messages()
    assert msg["status"] == "firing" and msg["alerts"][0]["labels"]["alertname"] == "proxysql_unreachable"
    tries = list(DeliveryAttempt.objects.filter(notification=n).order_by("at"))
    assert [t.ok for t in tries][-1] is True and not any(t.ok for t in tries[:-1]) and len(tries) >= 4
    gaps = [(b.at - a.at).total_seconds() for a, b in zip(tries, tries[1:-1])]
    assert all(later >= earlier * 1.5 for earlier, later in zip(gaps, gaps[1:]))  # the backoff doubles


def test_a_refused_payload_is_not_retried(adopted_lab, worker, receiver, settings):
    cluster, (first, second) = adopted_lab
    ch = Channel.objects.create(name="strict receiver", kind="webhook", url=receiver.url)
    receiver.status = 400
    set_rule("proxysql_unreachable", for_s=0)
    second.set_mode("hang")
    try:
        assert until(lambda: firing("proxysql_unreachable"), 10, kinds=["proxysql"])
        assert wait_for(lambda: Notification.objects.filter(channel=ch, state="failed").exists(), 20)
    finally:
        second.set_mode("normal")
    n = Notification.objects.get(channel=ch)
    assert n.attempts == 1 and "HTTP 400" in n.last_error and len(receiver.got) == 1
    assert AuditEvent.objects.filter(action="alert notification not delivered", details__notification=n.pk).exists()


def test_send_a_test_from_the_channel_page(db, worker, receiver, operator_user, client):
    ch = Channel.objects.create(name="chat", kind="slack", url=receiver.url)
    client.force_login(operator_user)
    response = client.post(reverse("alerts:channel_test", args=[ch.pk]))
    assert response.status_code == 302
    assert wait_for(lambda: receiver.got, 15)
    [msg] = receiver.messages()
    assert msg["text"].startswith("[FIRING:1] (test): info") and "otto-operator" in msg["attachments"][0]["text"]
    log = client.get(reverse("alerts:channel_log", args=[ch.pk])).content.decode()
    assert 'data-delivery="sent"' in log and "test by otto-operator" in log and "HTTP 200" in log
    assert AuditEvent.objects.filter(action="send test notification", actor="otto-operator").exists()
