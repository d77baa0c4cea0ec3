"""End to end in a real browser: log in, adopt the two lab ProxySQL nodes through the form, see the
cluster page with its three backends, then see drift when a node's runtime changes behind our back."""

import pytest

from apps.fleet.models import Cluster

from .conftest import admin_sql

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def adopt_in_browser(page, live_server, double, node_name, cluster_label=None):
    page.goto(f"{live_server.url}/adopt/")
    page.fill("#id_admin_host", "127.0.0.1")
    page.fill("#id_admin_port", str(double.port))
    page.fill("#id_admin_user", double.user)
    page.fill("#id_admin_password", double.password)
    page.fill("#id_node_name", node_name)
    if cluster_label:
        page.select_option("#id_cluster", label=cluster_label)
    else:
        page.fill("#id_new_cluster_name", "galera-lab")
    page.click("button[name=preview]")
    page.wait_for_selector("#adopt-rows")
    # How the roles were decided, shown before anything is saved.
    assert page.inner_text("#adopt-reasons tr[data-decision=writer] td:nth-child(2)") == "100"
    why = "cluster galera-lab already has it" if cluster_label else "holds the fewest servers"
    assert why in page.inner_text("#adopt-reasons tr[data-decision=writer]")
    page.click("button[name=confirm]")
    page.wait_for_selector("text=Adopted")


def test_operator_adopts_the_lab_and_sees_drift(page, live_server, browser_login, operator_user, lab_pair, tmp_path):
    first, second = lab_pair
    browser_login(operator_user)
    adopt_in_browser(page, live_server, first, "proxysql-1")
    adopt_in_browser(page, live_server, second, "proxysql-2", cluster_label="galera-lab")

    cluster = Cluster.objects.get(name="galera-lab")
    assert page.url == f"{live_server.url}{cluster.get_absolute_url()}"
    for port in (3311, 3312, 3313):
        assert page.locator(f"a:has-text('127.0.0.1:{port}')").count() >= 1
    assert page.locator("text=proxysql-2").count() >= 1
    page.wait_for_selector("[data-drift=none]")
    page.screenshot(path=str(tmp_path / "cluster-in-sync.png"), full_page=True)

    admin_sql(
        second,
        "UPDATE mysql_servers SET weight=1 WHERE hostgroup_id=101 AND port=3313",
        "LOAD MYSQL SERVERS TO RUNTIME",
    )
    page.reload()
    table = page.wait_for_selector("[data-drift=differences]")
    assert "weight" in table.inner_text() and "10000" in table.inner_text()
    assert page.locator("[data-drift=between-nodes]").count() == 1
