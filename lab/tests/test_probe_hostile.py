"""Issue 34's "done when", probed on a live test server (lab/probe_hostile.py): an operator, a viewer and an anonymous
caller read every page and API read with hostile query strings and bad ids and post hostile bodies; an admin adds
channels with hostile URL shapes. 0 answers 500, 0 secrets in what a viewer or anonymous caller reads, and 0 bytes
of stored credentials or channel posts reach the hosts nobody allowed (a fake MySQL server that asks for the
cleartext plugin, an HTTP receiver outside ALERT_CHANNEL_DESTINATIONS)."""

import pytest
from django.urls import reverse

from apps.accounts import tokens
from apps.accounts.tests.test_url_permissions import (
    NOT_ROLE_CHECKED,
    OWN_ACCESS_CHECK,
    kwargs_for,
    objects,  # noqa: F401
    url_patterns,
)
from apps.alerts import notify
from apps.alerts.models import Channel, Notification
from apps.alerts.tests.conftest import Receiver
from apps.api.tests.conftest import api_patterns, kwargs_for as api_kwargs_for
from apps.clients.tests.fake_mysql import FakeMySQL
from apps.configuration.models import ChangeSet
from apps.fleet.models import Cluster, ProxySQLNode, Server
from lab.probe_hostile import Probe

pytestmark = pytest.mark.django_db(transaction=True)

SLACK_URL = "https://hooks.slack.com/services/T0PROBE1/B0PROBE2/Zq9probeSecretPathZ"
CHANNEL_SECRET = "pd-routing-key-Pr0beS3cret"
MONITOR_PASSWORD = "Mon-Pr0be-S3cret-pw"
ADMIN_PASSWORD = "Adm-Pr0be-S3cret-pw"
SKIPPED_PAGES = {"accounts:logout", "reports:pdf"}  # leaving ends the session; the PDF: its own test (nothing fetched)


@pytest.fixture
def listeners():
    """The hosts nobody allowed: a MySQL server asking for mysql_clear_password, an HTTP receiver; and a MySQL server
    a person types as a node to adopt (asking for the cleartext plugin too)."""
    forbidden = Receiver()
    with FakeMySQL(b"mysql_clear_password") as fake, FakeMySQL(b"mysql_clear_password") as typed:
        yield fake, typed, forbidden
    forbidden.down()


def test_a_hostile_probe_finds_no_500_no_secret_and_sends_nothing_where_nobody_allowed(
    live_server, objects, listeners, viewer_user, operator_user, admin_user_role, settings
):  # noqa: F811
    fake, typed, forbidden = listeners
    allowed = Receiver()
    settings.ALERT_CHANNEL_DESTINATIONS = ["hooks.slack.com", f"127.0.0.1:{allowed.port}"]
    settings.ALERTS_HTTP_TIMEOUT_S = 1.0
    settings.API_THROTTLE_RATES = {"read": "100000/min", "write": "100000/min"}
    cluster = Cluster.objects.get(pk=objects["cluster"])
    cluster.monitor_user, cluster.monitor_password = "monitor", MONITOR_PASSWORD
    cluster.credential_hosts = "10.99.0.0/16"  # not loopback: the fake MySQL server is nobody's allowed host
    cluster.save()
    node = ProxySQLNode.objects.get(pk=objects["node"])
    node.admin_password = ADMIN_PASSWORD
    node.save()
    Channel.objects.create(name="slack", kind="slack", url=SLACK_URL, secret=CHANNEL_SECRET)
    operator_token = tokens.create(operator_user, "probe")[1]
    viewer_token = tokens.create(viewer_user, "probe")[1]
    admin_token = tokens.create(admin_user_role, "probe")[1]

    probe = Probe(
        live_server.url,
        [
            SLACK_URL.split("/services/")[1],
            CHANNEL_SECRET,
            MONITOR_PASSWORD,
            ADMIN_PASSWORD,
            operator_token,
            viewer_token,
            admin_token,
        ],
    )
    operator = probe.login(
        "operator", operator_user.username, f"pw-{operator_user.username}", operator_token, viewer_readable=False
    )
    viewer = probe.login("viewer", viewer_user.username, f"pw-{viewer_user.username}", viewer_token)
    anonymous = probe.login("anonymous")
    admin = probe.login(
        "admin", admin_user_role.username, f"pw-{admin_user_role.username}", admin_token, viewer_readable=False
    )

    # The hosts nobody allowed, aimed at through every door an operator has: change sets (page and API, host names
    # with line breaks and other spellings of loopback), the digest's EXPLAIN, adoption of a node there.
    spellings = ["127.0.0.1", "127.0.0.1\r\n", "localhost", "[::ffff:127.0.0.1]", "127.1", "0x7f000001", "2130706433"]
    for host in spellings:
        row = {"hostgroup_id": 101, "hostname": host, "port": fake.port}
        probe.post(
            operator,
            f"/api/v1/clusters/{cluster.pk}/config/change-sets/",
            api=True,
            json={"reason": "probe", "edits": [{"op": "upsert", "table": "mysql_servers", "row": row}]},
        )
        probe.post(
            operator,
            reverse("configuration:row_form", kwargs={"pk": objects["change_set"], "table_name": "mysql_servers"}),
            data={**row, "status": "ONLINE", "weight": 1},
        )
    probe.post(
        operator,
        "/api/v1/adopt/preview/",
        api=True,
        json={
            "admin_host": "127.0.0.1",
            "admin_port": typed.port,
            "admin_user": "admin",
            "admin_password": "typed-Adm1n-pw",
            "node_name": "x",
            "cluster": cluster.pk,
        },
    )
    probe.post(operator, reverse("digests:explain", kwargs={"pk": objects["digest"]}), data={"query": "SELECT 1"})

    # Channel URL shapes an admin may type (userinfo, backslashes, encodings) aimed at the forbidden receiver, then
    # a test send of every channel stored.
    f, a = forbidden.port, allowed.port
    for url in [
        f"http://127.0.0.1:{f}\\@127.0.0.1:{a}/",
        f"http://127.0.0.1:{a}@127.0.0.1:{f}/",
        f"http://127.0.0.1:{f}%2F@127.0.0.1:{a}/",
        f"http://127.1:{f}/",
        f"http:\\\\127.0.0.1:{f}/",
        f"http://[::ffff:127.0.0.1]:{f}/",
        f"http://127.0.0.1:{a}/ok",
    ]:
        probe.post(
            admin,
            reverse("alerts:channel_create"),
            data={"name": url[-30:], "kind": "webhook", "url": url, "min_severity": "warning"},
        )
        probe.post(
            admin,
            "/api/v1/alert-channels/",
            api=True,
            json={"name": "api" + url[-30:], "kind": "webhook", "url": url, "min_severity": "warning"},
        )
    for channel in Channel.objects.all():
        probe.post(operator, reverse("alerts:channel_test", kwargs={"pk": channel.pk}))
    for pk in Notification.objects.values_list("pk", flat=True):
        notify.attempt(pk)  # what the delivery task does; the delivery log is then among what the viewer reads

    # Hostile text in the forms and API writes an operator has.
    probe.post_hostile_forms(
        operator,
        [
            (reverse("pages:cluster_tags", kwargs={"pk": cluster.pk}), {"tags": None}),
            (reverse("accounts:tokens"), {"name": None}),
            (reverse("alerts:silence_create"), {"reason": None, "cluster": cluster.pk, "rule": None, "hours": None}),
            (
                reverse("configuration:set_variable", kwargs={"pk": objects["change_set"]}),
                {"name": "mysql-max_connections", "value": None},
            ),
            (reverse("digests:rules") + "?cluster=%d" % cluster.pk, {"query": None}),
            (reverse("reports:build"), {"cluster": None, "period": None}),
        ],
    )
    probe.post_hostile_api(
        operator,
        [
            (
                f"/api/v1/clusters/{cluster.pk}/config/change-sets/",
                {
                    "reason": None,
                    "edits": [
                        {
                            "op": "upsert",
                            "table": "mysql_query_rules",
                            "row": {"rule_id": 7, "match_digest": None, "active": 1},
                        }
                    ],
                },
            ),
            (f"/api/v1/clusters/{cluster.pk}/tags/", {"tags": {"env": None}}),
            ("/api/v1/silences/", {"reason": None, "cluster": cluster.pk, "hours": None}),
            (
                "/api/v1/rollouts/",
                {
                    "reason": None,
                    "select": {"tags": {"env": None}, "names": [None]},
                    "waves": None,
                    "edits": [
                        {
                            "op": "upsert",
                            "table": "mysql_query_rules",
                            "row": {"rule_id": 7, "match_digest": None, "active": 1},
                        }
                    ],
                },
            ),
        ],
    )

    # Every page and API read, plain, with hostile query strings and bad ids, by each caller.
    pages = [
        reverse(name, kwargs=kwargs_for(name, p, objects))
        for name, p in url_patterns()
        if name not in NOT_ROLE_CHECKED | OWN_ACCESS_CHECK | SKIPPED_PAGES
    ]
    api_reads = [
        reverse(name, kwargs=api_kwargs_for(name, p, objects))
        for name, p in api_patterns()
        if "get" in getattr(getattr(p.callback, "view_class", None), "http_method_names", ())
        and hasattr(getattr(p.callback, "view_class", None), "get")
        and not name.endswith(("schema", "docs"))
    ]
    probe.read_everything([operator, viewer, anonymous], pages, api_reads)

    print(
        f"\n{probe.requests_made} requests, slowest {probe.slowest[0]:.2f} s ({probe.slowest[1]}); "
        f"answers by caller and status: {dict(sorted(probe.statuses.items()))}"
    )
    assert probe.requests_made > 2000
    # The callers were who they claim: the viewer and the operator read pages, the anonymous caller none.
    assert probe.statuses.get(("viewer", 200), 0) > 300 and probe.statuses.get(("operator", 200), 0) > 300
    assert probe.statuses.get(("anonymous", 200), 0) == 0
    assert not probe.failures, "\n".join(probe.failures[:50])
    assert fake.received() == b"", fake.received()[:200]  # not even a connection's first answer
    # and no door kept the host for a later poll or operation to log in to
    assert not Server.objects.filter(port=fake.port).exists()
    assert not [cs.pk for cs in ChangeSet.objects.all() if str(fake.port) in str(cs.edits)]
    assert b"typed-Adm1n-pw" not in typed.received() and ADMIN_PASSWORD.encode() not in typed.received()
    assert forbidden.got == [] and allowed.got  # the allowed receiver got the test sends: the path was live
    allowed.down()
