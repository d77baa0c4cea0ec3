"""manage.py adopt_proxysql: the demo's and scripts' way to adopt, through the same plan as the form."""
import io

import pytest
from django.core.management import CommandError, call_command

from apps.fleet.models import Cluster, ProxySQLNode

from .conftest import seed_layout


def run(double, *extra, monkeypatch):
    monkeypatch.setenv("PROXYSQL_ADMIN_PASSWORD", double.password)
    out = io.StringIO()
    call_command("adopt_proxysql", "--host", "127.0.0.1", "--port", str(double.port), "--user", double.user,
                 "--cluster", "lab", "--node-name", "p1", *extra, stdout=out)
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
    from lab.proxysql_double import ProxySQLDouble

    with ProxySQLDouble(port=0, user="admin", password="admin") as double:
        double.set_mode("refuse")
        with pytest.raises(CommandError, match="Could not read the ProxySQL node"):
            run(double, "--yes", monkeypatch=monkeypatch)
