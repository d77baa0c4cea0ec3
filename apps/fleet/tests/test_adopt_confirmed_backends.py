"""Issue 34: credentials only to hosts a person confirmed. Adopting a node into a NEW cluster, the page, the API and
the command take the backends the person confirms (backend_hosts): the preview reads only those and loopback, lists
the others as unconfirmed, and the new cluster's credential hosts leave them out, so the pollers never send them the
monitor credentials either."""

import pytest
from django.core.management import call_command

from apps.api.tests.conftest import error_of, token_client
from apps.audit.models import AuditEvent
from apps.clients.backend import BackendClient
from apps.clients.credential_hosts import credentials_allowed
from apps.clients.wire import NotAllowed
from apps.fleet.models import Cluster, Server
from lab import demo

pytestmark = pytest.mark.django_db
PREVIEW, CONFIRM = "/api/v1/adopt/preview/", "/api/v1/adopt/confirm/"
ONE, TWO = "10.255.255.1", "10.255.255.2"  # no route from the test's namespace: a confirmed one is tried and fails


@pytest.fixture
def node_with_remote_backends(proxysql_double):
    demo.admin_sql(
        proxysql_double.port,
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (100,'{ONE}',3306)",
        f"INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (101,'{TWO}',3306)",
        "LOAD MYSQL SERVERS TO RUNTIME",
        user=proxysql_double.user,
        password=proxysql_double.password,
    )
    return proxysql_double


def ask(double, **over):
    return {
        "admin_host": "127.0.0.1",
        "admin_port": double.port,
        "admin_user": double.user,
        "admin_password": double.password,
        "node_name": "p1",
        "new_cluster_name": "fresh",
        "writer_hostgroup": 100,
        "reader_hostgroup": 101,
        **over,
    }


def test_the_api_reads_and_polls_only_the_confirmed_backends(operator_user, node_with_remote_backends):
    api = token_client(operator_user)
    preview = api.post(PREVIEW, ask(node_with_remote_backends, backend_hosts=[f"{TWO}:3306"]))
    assert preview.status_code == 200, preview.content
    plan = preview.json()
    assert plan["unconfirmed_backends"] == [f"{ONE}:3306"]
    said = {b["hostname"]: b["error"] for b in plan["backends"]}
    assert f"{ONE}:3306 is not a host of a new cluster's" in said[ONE] and "not a host" not in said[TWO]
    done = api.post(
        CONFIRM, ask(node_with_remote_backends, backend_hosts=[f"{TWO}:3306"], fingerprint=plan["fingerprint"])
    )
    assert done.status_code == 201, done.content
    cluster = Cluster.objects.get(name="fresh")
    assert cluster.credential_hosts == f"{TWO} 127.0.0.1 127.0.0.0/8 ::1 localhost"
    assert credentials_allowed(cluster, ONE, 3306)[0] is False and credentials_allowed(cluster, TWO, 3306)[0]
    with pytest.raises(NotAllowed):  # the pollers, operations and re-probes: nothing sent there
        BackendClient.for_server(Server.objects.select_related("cluster").get(hostname=ONE))
    event = AuditEvent.objects.get(action="cluster connections changed")
    assert event.cluster_id == cluster.pk and event.details["after"]["credential_hosts"] == cluster.credential_hosts


def test_bad_or_misplaced_backend_hosts_are_a_400_naming_them(operator_user, node_with_remote_backends):
    api = token_client(operator_user)
    refused = error_of(api.post(PREVIEW, ask(node_with_remote_backends, backend_hosts=["db1.example.net"])), 400)
    assert "Backend 'db1.example.net'" in str(refused["fields"]["backend_hosts"])
    existing = Cluster.objects.create(name="shop", writer_hostgroup=100, reader_hostgroup=101)
    refused = error_of(
        api.post(
            PREVIEW,
            ask(node_with_remote_backends, new_cluster_name="", cluster=existing.pk, backend_hosts=[f"{TWO}:3306"]),
        ),
        400,
    )
    assert "shop's credential hosts decide" in str(refused["fields"]["backend_hosts"])


def test_the_page_confirms_backends_from_the_preview(operator_client, node_with_remote_backends):
    double = node_with_remote_backends
    form = {**ask(double), "backend_hosts": f"{TWO}:3306", "preview": "1"}
    page = operator_client.post("/adopt/", form)
    assert page.status_code == 200, page.content.decode()[-2000:]
    html = page.content.decode()
    assert 'id="adopt-unconfirmed"' in html and f'value="{ONE}:3306"' in html and f'value="{TWO}:3306"' not in html
    again = operator_client.post("/adopt/", {"confirm_backends": "1", "backend": [f"{ONE}:3306"]})
    assert again.status_code == 200 and 'id="adopt-unconfirmed"' not in again.content.decode()
    done = operator_client.post("/adopt/", {"confirm": "1"})
    assert done.status_code == 302, done.content.decode()[-2000:]
    assert Cluster.objects.get(name="fresh").credential_hosts == ""  # every backend confirmed: its own hosts


def test_the_command_takes_backend_hosts(node_with_remote_backends, monkeypatch):
    double = node_with_remote_backends
    monkeypatch.setenv("PROXYSQL_ADMIN_PASSWORD", double.password)
    call_command(
        "adopt_proxysql",
        host="127.0.0.1",
        port=double.port,
        user=double.user,
        cluster="fresh",
        node_name="p1",
        writer_hostgroup="100",
        reader_hostgroup="101",
        yes=True,
    )
    assert Cluster.objects.get(name="fresh").credential_hosts == "127.0.0.1 127.0.0.0/8 ::1 localhost"
