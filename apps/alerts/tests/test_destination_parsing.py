"""The destination allow-list judges a URL as it is sent (issue 34): `http://127.0.0.1:P\\@hooks.slack.com/` passed
Python's urlsplit (host hooks.slack.com) while requests opened 127.0.0.1:P. Hypothesis builds URL shapes (userinfo,
backslashes, encoded characters, IPv6, ports) from an allowed receiver and a forbidden one, both listening: every URL
the check lets through reaches the allowed one, none reaches the forbidden one."""

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

from apps.alerts import channels, destinations
from apps.alerts.models import Channel
from apps.api.tests.conftest import token_client

from .conftest import Receiver


@pytest.fixture(scope="module")
def two_receivers():
    allowed, forbidden = Receiver(), Receiver()
    yield allowed, forbidden
    allowed.down()
    forbidden.down()


def url_shapes(allowed, forbidden):
    good = st.sampled_from([f"127.0.0.1:{allowed}", f"localhost:{allowed}", f"[::ffff:127.0.0.1]:{allowed}"])
    bad = st.sampled_from(
        [
            f"127.0.0.1:{forbidden}",
            f"localhost:{forbidden}",
            f"127.1:{forbidden}",
            f"[::1]:{forbidden}",
            f"2130706433:{forbidden}",
        ]
    )
    glue = st.sampled_from(
        [
            "@",
            "\\@",
            "\\",
            "%40",
            "%5C@",
            "/",
            "#",
            "?",
            ":",
            "%2F",
            "%00",
            " ",
            "\t",
            "\n",
            "@@",
            ":x@",
            "%252F",
            "\u3002",
            "\uff0f",
        ]
    )
    return st.builds(
        lambda scheme, parts, path: scheme + "".join(parts) + path,
        st.sampled_from(["http://", "HTTP://", "http:/", "http:\\\\", "https://", "http:///"]),
        st.lists(st.one_of(good, bad, glue), min_size=1, max_size=4),
        st.sampled_from(["", "/hook", "/h?x=1", "/%2e%2e/", "/\\@x"]),
    )


@pytest.mark.django_db
def test_what_the_check_judged_is_where_the_request_goes(settings, two_receivers):
    allowed, forbidden = two_receivers
    settings.ALERT_CHANNEL_DESTINATIONS = [f"127.0.0.1:{allowed.port}"]
    settings.ALERTS_HTTP_TIMEOUT_S = 1.0
    channel = Channel.objects.create(name="hook", kind="webhook", url="http://127.0.0.1/")
    seen = {"passed": 0}

    @hypothesis_settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
    @given(url_shapes(allowed.port, forbidden.port))
    def check(url):
        before = len(allowed.got)
        result = channels._post(url, {"alerts": []}, channel)
        assert forbidden.got == [], (url, forbidden.got)
        if destinations.refusal(url) is None:
            seen["passed"] += 1
            if destinations.target(url).scheme == "https":  # the allowed receiver speaks plain HTTP: no TLS handshake
                assert "SSLError" in result.error and len(allowed.got) == before, (url, result.error)
            else:
                assert result.ok and len(allowed.got) == before + 1, (url, result.error)
            assert destinations.destination(url)[1] == allowed.port
        else:
            assert not result.ok and len(allowed.got) == before, url

    check()
    assert seen["passed"] > 0  # the shapes reach the allowed receiver too, not only refusals


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9\\@hooks.slack.com/",
        "http://hooks.slack.com@127.0.0.1:9/",
        "http://user:pw@hooks.slack.com/",
        "http://hooks.slack.com\\.evil.net/",
        "http://hooks.slack.com%2F@127.0.0.1/",
        "http://hooks.slack.com /x",
    ],
)
def test_userinfo_and_backslashes_are_refused(settings, url):
    settings.ALERT_CHANNEL_DESTINATIONS = ["hooks.slack.com"]
    assert destinations.refusal(url) is not None, url


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9/x",
        "http://localhost/",
        "http://169.254.169.254/latest/",
        "http://10.1.2.3/",
        "http://192.168.0.1/",
        "http://[::1]/",
        "http://[fe80::1]/",
        "http://0.0.0.0/",
        "http://2130706433/",
        "http://[::ffff:127.0.0.1]/",
    ],
)
def test_by_default_loopback_link_local_and_private_addresses_are_refused(settings, url):
    settings.ALERT_CHANNEL_DESTINATIONS = []
    settings.ALERT_CHANNEL_PRIVATE_ADDRESSES = False
    assert "loopback, link-local or private" in (destinations.refusal(url) or ""), url
    settings.ALERT_CHANNEL_PRIVATE_ADDRESSES = True
    assert destinations.refusal(url) is None, url


def test_a_network_the_allow_list_names_is_allowed_and_a_public_address_by_default(settings):
    settings.ALERT_CHANNEL_PRIVATE_ADDRESSES = False
    settings.ALERT_CHANNEL_DESTINATIONS = ["10.0.0.0/8"]
    assert destinations.refusal("http://10.1.2.3:9093/") is None
    settings.ALERT_CHANNEL_DESTINATIONS = []
    assert destinations.refusal("https://8.8.8.8/hook") is None


@pytest.mark.django_db
def test_the_form_refuses_a_loopback_url_by_default(settings, client, admin_user_role):
    settings.ALERT_CHANNEL_PRIVATE_ADDRESSES = False
    client.force_login(admin_user_role)
    response = client.post(
        reverse("alerts:channel_create"),
        {"name": "x", "kind": "webhook", "url": "http://127.0.0.1:9/hook", "min_severity": "warning"},
    )
    assert response.status_code == 400 and "loopback, link-local or private" in response.content.decode()
    assert not Channel.objects.exists()


@pytest.mark.django_db
def test_fuzz_every_door_that_takes_a_channel_url_stores_only_what_posts_to_an_allowed_host(
    settings, two_receivers, client, admin_user_role
):
    """The page's form and the API (the two doors that take a channel URL; no configuration file carries one): a URL
    shape either is refused with a 400 and stores nothing, or is stored and its sends reach the allowed receiver only."""
    allowed, forbidden = two_receivers
    settings.ALERT_CHANNEL_DESTINATIONS = [f"127.0.0.1:{allowed.port}"]
    settings.ALERTS_HTTP_TIMEOUT_S = 1.0
    client.force_login(admin_user_role)
    api = token_client(admin_user_role)
    seen = {"stored": 0, "n": 0}

    @hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(url_shapes(allowed.port, forbidden.port), st.booleans())
    def check(url, through_api):
        seen["n"] += 1
        name = f"door-{seen['n']}"
        fields = {"name": name, "kind": "webhook", "url": url, "min_severity": "warning"}
        if through_api:
            status = api.post("/api/v1/alert-channels/", fields).status_code
        else:
            status = client.post(reverse("alerts:channel_create"), fields).status_code
        assert status in ((201, 400) if through_api else (302, 400)), (url, status)
        channel = Channel.objects.filter(name=name).first()
        assert (channel is None) == (status == 400), (url, status)
        if channel is not None:
            seen["stored"] += 1
            assert (
                destinations.refusal(channel.url) is None and destinations.destination(channel.url)[1] == allowed.port
            )
            channels._post(channel.url, {"alerts": []}, channel)
        assert forbidden.got == [], (url, forbidden.got)

    check()
    assert seen["stored"] > 0  # the shapes reach the allowed receiver too, not only refusals


@pytest.mark.django_db
def test_a_dns_answer_that_changes_after_the_check_gets_no_post(settings, two_receivers, monkeypatch):
    """DNS rebinding: the name answers a public address to the destination check, then a loopback one. The post goes
    to the address that was judged (here unreachable: this machine has loopback only), never to the second answer,
    so the forbidden receiver on 127.0.0.1 gets neither the alert nor the channel's bearer secret."""
    import socket

    _, forbidden = two_receivers
    settings.ALERT_CHANNEL_DESTINATIONS = []
    settings.ALERT_CHANNEL_PRIVATE_ADDRESSES = False
    settings.ALERTS_HTTP_TIMEOUT_S = 0.5
    real = socket.getaddrinfo
    answers = {"n": 0}

    # The hostile name server stands in for the resolver: this machine's network is loopback only and its resolver
    # cannot be pointed at a DNS server of the test's. Only the answer is made up; the product's code runs as is.
    def rebinding_dns(host, *args, **kwargs):  # public first, loopback afterwards
        if host != "hooks.rebind.example":
            return real(host, *args, **kwargs)
        answers["n"] += 1
        return real("93.184.215.14" if answers["n"] == 1 else "127.0.0.1", *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_dns)
    channel = Channel.objects.create(name="rebind", kind="webhook", url="http://127.0.0.1/", secret="s3cret-token")
    result = channels._post(f"http://hooks.rebind.example:{forbidden.port}/hook", {"alerts": []}, channel)
    assert forbidden.got == []
    assert not result.ok and "s3cret" not in result.error
    assert answers["n"] == 1  # the name was resolved once, for the check, and connected to as judged
