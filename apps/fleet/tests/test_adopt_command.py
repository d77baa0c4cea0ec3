"""manage.py adopt_proxysql: the demo's and scripts' way to adopt, through the same plan as the form."""

import io

import pytest
from django.core.management import CommandError, call_command

from apps.fleet.models import Cluster, ProxySQLNode
from lab import demo

from .conftest import admin_sql, seed_layout


def run(double, *extra, monkeypatch):
    monkeypatch.setenv("PROXYSQL_ADMIN_PASSWORD", double.password)
    out = io.StringIO()
    call_command(
        "adopt_proxysql",
        "--host",
        "127.0.0.1",
        "--port",
        str(double.port),
        "--user",
        double.user,
        "--cluster",
        "lab",
        "--node-name",
        "p1",
        *extra,
        stdout=out,
    )
    return out.getvalue()


@pytest.mark.django_db
def test_preview_only_then_apply_then_skip(proxysql_double, monkeypatch):
    seed_layout(proxysql_double)
    assert "preview only" in run(proxysql_double, monkeypatch=monkeypatch) and not Cluster.objects.exists()
    assert "adopted p1" in run(proxysql_double, "--yes", monkeypatch=monkeypatch)
    cluster = Cluster.objects.get(name="lab")
    assert cluster.monitor_user == "monitor" and cluster.monitor_password == "monitor"  # from ProxySQL's variables
    assert "already adopted" in run(proxysql_double, "--yes", "--if-new", monkeypatch=monkeypatch)
    assert ProxySQLNode.objects.count() == 1


@pytest.mark.django_db
def test_unreachable_node_is_a_command_error(monkeypatch):
    from lab.fixtures_proxysql import new_double

    with new_double(port=0, user="admin", password="admin") as double:
        double.set_mode("refuse")
        with pytest.raises(CommandError, match="Could not read the ProxySQL node"):
            run(double, "--yes", monkeypatch=monkeypatch)


@pytest.mark.django_db
def test_preview_prints_how_each_role_was_decided(proxysql_double, galera_lab, monkeypatch):
    admin_sql(proxysql_double, *demo.plain_layout_statements())
    out = run(proxysql_double, monkeypatch=monkeypatch)
    assert "hostgroups {'writer': 100, 'reader': 101, 'backup_writer': None, 'offline': None}" in out
    assert "writer is also reader: 0: the writer is not a reader" in out
    assert "  Writer hostgroup: 100\n    by: mysql_users: the default hostgroup of utest (where their writes go)" in out
    assert "    by: query rule 20 sends plain reads ('^SELECT') there" in out
    assert "against:" not in out


@pytest.mark.django_db
def test_flags_correct_the_inferred_roles(proxysql_double, unused_ports, monkeypatch):
    # Backends that cannot be read and no users or rules: nothing tells these hostgroups apart.
    a, b, c = unused_ports
    admin_sql(
        proxysql_double,
        *[
            f"INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES ({hg},'127.0.0.1',{p})"
            for hg, p in ((10, a), (20, b), (20, c), (30, b), (30, c))
        ],
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    out = run(
        proxysql_double,
        "--kind",
        "async",
        "--writer-hostgroup",
        "10",
        "--reader-hostgroup",
        "30",
        "--backup-writer-hostgroup",
        "20",
        "--offline-hostgroup",
        "40",
        "--writer-is-also-reader",
        "2",
        "--yes",
        monkeypatch=monkeypatch,
    )
    assert (
        "  Writer is also reader: 2: backup writers are readers, the writer is not\n    by: entered by the operator"
        in out
    )
    assert f"backend 127.0.0.1:{a} not read: unreachable: TCP connect failed" in out
    cluster = Cluster.objects.get()
    assert (
        cluster.kind,
        cluster.writer_hostgroup,
        cluster.reader_hostgroup,
        cluster.backup_writer_hostgroup,
        cluster.offline_hostgroup,
        cluster.writer_is_also_reader,
    ) == ("async", 10, 30, 20, 40, 2)


@pytest.mark.django_db
def test_flags_of_an_existing_cluster_must_agree_with_it(lab_pair, galera_lab, monkeypatch):
    first, second = lab_pair
    run(first, "--yes", monkeypatch=monkeypatch)
    with pytest.raises(CommandError, match="Cluster lab already exists with writer is also reader 1"):
        run(second, "--node-name", "p2", "--writer-is-also-reader", "0", "--yes", monkeypatch=monkeypatch)
    assert ProxySQLNode.objects.count() == 1
    assert "adopted p2" in run(
        second,
        "--node-name",
        "p2",
        "--writer-is-also-reader",
        "1",
        "--writer-hostgroup",
        "100",
        "--yes",
        monkeypatch=monkeypatch,
    )


@pytest.mark.django_db
@pytest.mark.parametrize(
    "flags,message",
    [
        (("--writer-hostgroup", "-1"), "--writer-hostgroup: Ensure this value is greater than or equal to 0."),
        (("--reader-hostgroup", "abc"), "--reader-hostgroup: Enter a whole number."),
        (
            ("--offline-hostgroup", "2147483648"),
            "--offline-hostgroup: Ensure this value is less than or equal to 2147483647.",
        ),
        (("--kind", "mongo"), "--kind: Select a valid choice. mongo is not one of the available choices."),
        (
            ("--writer-is-also-reader", "3"),
            "--writer-is-also-reader: Select a valid choice. 3 is not one of the available",
        ),
        (
            ("--writer-hostgroup", "5", "--backup-writer-hostgroup", "5"),
            "Each hostgroup role needs a different hostgroup id.",
        ),
    ],
)
def test_invalid_flags_are_clear_errors_before_anything_is_read(proxysql_double, monkeypatch, flags, message):
    with pytest.raises(CommandError) as err:
        run(proxysql_double, *flags, "--yes", monkeypatch=monkeypatch)
    assert message in str(err.value)
    assert not Cluster.objects.exists() and not proxysql_double.statements()  # the node was not even read
