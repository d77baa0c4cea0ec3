"""Adopting the seeds' plain layouts (issue 9, item 4): roles inferred from the users, the query rules and
the backends themselves (read with ProxySQL's monitor user), the writer-is-also-reader policy from the
layout, the reasoning in the preview, the operator's corrections. ProxySQL doubles configured with plain
admin SQL (lab/demo.py) in front of the Galera lab (3311-3313) or the replication lab (3321-3323)."""

import re

import pytest
from django.urls import reverse

from apps.clients.proxysql import ProxySQLAdmin
from apps.configuration.adoption import infer_roles, read_snapshot
from apps.fleet.models import Cluster, HostgroupMembership
from lab import demo

from .conftest import admin_sql
from .test_adopt import adopt, form_data

pytestmark = pytest.mark.django_db
REPLICATION_PORTS = (3321, 3322, 3323)


def reasons(html):
    """{decision: (value, decided by, conflicting)} from the preview's reasoning table."""
    table = html[html.index('id="adopt-reasons"') :]
    table = table[: table.index("</table>")]
    out = {}
    for decision, conflict, value, by, against in re.findall(
        r'<tr data-decision="(\w+)"( data-conflict="yes")?><td>[^<]*</td><td>([^<]*)</td>\s*<td>(.*?)</td>\s*<td>(.*?)</td></tr>',
        table,
        re.S,
    ):
        out[decision] = (value, re.findall(r"<li>(.*?)</li>", by), re.findall(r"<li>(.*?)</li>", against))
    return out


def test_seed_001_galera_layout_is_adopted_with_its_roles_and_policy(operator_client, proxysql_double, galera_lab):
    # Writer 100 holds one server, readers 101 the other two (not the writer), ^SELECT to 101, the user writes to 100.
    admin_sql(proxysql_double, *demo.plain_layout_statements())
    preview, done = adopt(operator_client, proxysql_double)
    html = preview.content.decode()
    why = reasons(html)
    assert why["kind"][0] == "Galera / PXC" and "wsrep_on, cluster size 3" in why["kind"][1][0]
    assert why["writer"][0] == "100" and why["reader"][0] == "101"
    assert "mysql_users: the default hostgroup of utest (where their writes go)" in why["writer"][1]
    assert "query rule 10 sends &#x27;^SELECT.*FOR UPDATE$&#x27; there" in why["writer"][1]
    assert "query rule 20 sends plain reads (&#x27;^SELECT&#x27;) there" in why["reader"][1]
    assert why["writer_is_also_reader"][0] == "0: the writer is not a reader"
    assert "the writer (127.0.0.1:3311) is not ONLINE in reader hostgroup 101" in why["writer_is_also_reader"][1]
    assert 'data-conflict="yes"' not in html and "evidence conflicts" not in html

    assert done.status_code == 302
    cluster = Cluster.objects.get()
    assert (
        cluster.kind,
        cluster.writer_hostgroup,
        cluster.reader_hostgroup,
        cluster.backup_writer_hostgroup,
        cluster.writer_is_also_reader,
    ) == ("galera", 100, 101, None, 0)
    assert HostgroupMembership.objects.get(hostgroup_id=100).server.port == 3311
    assert sorted(m.server.port for m in HostgroupMembership.objects.filter(hostgroup_id=101)) == [3312, 3313]


@pytest.mark.parametrize("with_config", [True, False], ids=["users-and-rules", "servers-only"])
def test_seed_async_layout_in_front_of_the_replication_lab(
    operator_client, proxysql_double, replication_healthy, with_config
):
    # The seed's own layout: the primary in hostgroup 0, the replicas in 1. Servers only: the backends alone
    # (read_only, replica of) tell the roles and the kind.
    statements = demo.plain_layout_statements(REPLICATION_PORTS, writer=0, reader=1)
    if not with_config:
        statements = [s for s in statements if "mysql_users" not in s and "mysql_query_rules" not in s]
    admin_sql(proxysql_double, *statements)
    preview, done = adopt(operator_client, proxysql_double, new_cluster_name="async-lab")
    why = reasons(preview.content.decode())
    assert why["kind"][0] == "Async replication"
    assert why["kind"][1] == [
        "async replicas: 127.0.0.1:3322 replicates from 127.0.0.1:3321; 127.0.0.1:3323 replicates from 127.0.0.1:3321"
    ]
    assert "127.0.0.1:3321: writable and replicating from no one" in why["writer"][1]
    assert not any(conflicts for _, _, conflicts in why.values())
    assert done.status_code == 302
    cluster = Cluster.objects.get()
    assert (cluster.kind, cluster.writer_hostgroup, cluster.reader_hostgroup, cluster.writer_is_also_reader) == (
        "async",
        0,
        1,
        0,
    )
    assert (
        HostgroupMembership.objects.get(hostgroup_id=0).server.port == replication_healthy.node(1).port
    )  # the primary


def test_conflicting_evidence_is_shown_in_the_preview(operator_client, proxysql_double, replication_healthy):
    # Someone moved a replica into the writer hostgroup: the configuration says "writer 0", the backend says
    # it is read-only and replicates from the primary, which sits in the reader hostgroup.
    admin_sql(proxysql_double, *demo.plain_layout_statements((3322, 3321, 3323), writer=0, reader=1))
    preview = operator_client.post(reverse("fleet:adopt"), form_data(proxysql_double, new_cluster_name="async-lab"))
    html = preview.content.decode()
    why = reasons(html)
    assert why["writer"][0] == "0"
    assert why["writer"][2] == [
        "127.0.0.1:3322 is read_only ON and a replica of 127.0.0.1:3321 (in hostgroup 0): cannot take writes",
        "holds 127.0.0.1:3321, the only writable backend replicating from no one",
    ]
    assert '<tr data-decision="writer" data-conflict="yes">' in html
    assert "The evidence conflicts on the writer hostgroup: Inferred 0, but 127.0.0.1:3322 is read_only ON" in html
    assert Cluster.objects.count() == 0


def test_an_unreachable_backend_weakens_the_evidence_and_never_fails_the_preview(
    operator_client, proxysql_double, galera_lab, unused_ports
):
    unused_port = unused_ports[0]
    admin_sql(proxysql_double, *demo.plain_layout_statements((3311, 3312, unused_port)))
    admin_sql(proxysql_double, "SET mysql-monitor_password='wrong'", "LOAD MYSQL VARIABLES TO RUNTIME")
    preview = operator_client.post(reverse("fleet:adopt"), form_data(proxysql_double))
    assert preview.status_code == 200
    html = preview.content.decode()
    backends = html[html.index('id="adopt-backends"') :]
    assert "auth: Access denied for user" in backends and f"127.0.0.1:{unused_port}" in backends
    assert "unreachable: TCP connect failed" in backends
    why = reasons(html)  # the node's own configuration still tells the roles
    assert (why["writer"][0], why["reader"][0], why["writer_is_also_reader"][0]) == (
        "100",
        "101",
        "0: the writer is not a reader",
    )
    assert "Nothing on this node or its backends tells the cluster kind" in html
    assert operator_client.post(reverse("fleet:adopt"), {"confirm": "1"}).status_code == 302


def test_the_operator_corrects_roles_and_policy_in_the_form(operator_client, proxysql_double, galera_lab):
    admin_sql(proxysql_double, *demo.plain_layout_statements())
    page = operator_client.get(reverse("fleet:adopt")).content.decode()
    assert 'name="writer_is_also_reader"' in page
    preview, done = adopt(operator_client, proxysql_double, writer_is_also_reader="1", offline_hostgroup="9101")
    why = reasons(preview.content.decode())
    assert why["writer_is_also_reader"][1] == ["entered by the operator"]
    assert why["writer_is_also_reader"][2] == ["the writer (127.0.0.1:3311) is not ONLINE in reader hostgroup 101"]
    assert why["offline"] == ("9101", ["entered by the operator"], [])
    assert "You entered 1: the writer is also a reader" in preview.content.decode()
    cluster = Cluster.objects.get()
    assert (cluster.writer_is_also_reader, cluster.offline_hostgroup, cluster.writer_hostgroup) == (1, 9101, 100)


def test_roles_entered_for_an_existing_cluster_are_refused_not_ignored(operator_client, lab_pair, galera_lab):
    first, second = lab_pair
    adopt(operator_client, first)
    cluster = Cluster.objects.get()
    response = operator_client.post(
        reverse("fleet:adopt"),
        form_data(
            second,
            node_name="proxysql-2",
            new_cluster_name="",
            cluster=cluster.pk,
            writer_hostgroup="101",
            reader_hostgroup="100",
        ),
    )
    html = response.content.decode()
    assert "Cluster galera-lab already exists with writer hostgroup 100, reader hostgroup 101" in html
    assert "Confirm" not in html and cluster.proxysql_nodes.count() == 1


def test_a_monitor_user_that_cannot_read_replica_status_still_tells_the_rest(proxysql_double, galera_lab):
    root = galera_lab.root_connection(1)
    try:
        root.cursor().execute("CREATE OR REPLACE USER 'weakmon'@'%' IDENTIFIED BY 'weakmon'")  # no SLAVE MONITOR
        admin_sql(
            proxysql_double,
            *demo.plain_layout_statements(),
            "SET mysql-monitor_username='weakmon'",
            "SET mysql-monitor_password='weakmon'",
            "LOAD MYSQL VARIABLES TO RUNTIME",
        )
        with ProxySQLAdmin("127.0.0.1", proxysql_double.port, "admin", "admin") as admin:
            snapshot = read_snapshot(admin)
    finally:
        root.cursor().execute("DROP USER IF EXISTS 'weakmon'@'%'")
        root.close()
    for facts in snapshot.backends:
        assert facts["error"].startswith("replica status not readable") and "denied" in facts["error"]
        assert facts["wsrep_on"] is True and facts["read_only"] is False and facts["cluster_size"] == 3
    kind = next(r for r in infer_roles(snapshot)["reasons"] if r.decision == "kind")
    assert kind.value == "galera" and not kind.defaulted and kind.evidence[0].startswith("Galera nodes: 127.0.0.1:3311")
