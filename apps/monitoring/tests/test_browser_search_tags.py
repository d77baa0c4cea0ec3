"""In a real browser (Debian chromium), issue 23 §5: an operator tags a cluster on its page, filters the fleet page
by that tag, and finds a backend from the header's search box on any page."""

import pytest

from apps.fleet.models import Cluster, Server

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_tag_a_cluster_filter_the_fleet_by_it_and_search_from_the_header(
    page, live_server, browser_login, operator_user, tmp_path
):
    pay = Cluster.objects.create(name="payments-eu", writer_hostgroup=100, reader_hostgroup=101)
    Cluster.objects.create(name="reporting", writer_hostgroup=100, reader_hostgroup=101)
    Server.objects.create(cluster=pay, hostname="db-pay-1.example.net", port=3306)
    browser_login(operator_user)

    page.goto(f"{live_server.url}{pay.get_absolute_url()}")
    page.fill("form[data-form=tags] input[name=tags]", "env=prod, team=payments")
    page.click("form[data-form=tags] button")
    page.wait_for_selector("[data-tag='env=prod']")
    page.click("[data-tag='env=prod']")  # a tag links to the fleet page filtered by it
    page.wait_for_selector("text=tagged env=prod")
    clusters = page.inner_text("table.clusters")
    assert "payments-eu" in clusters and "reporting" not in clusters
    page.fill("form[data-form=tag-filter] input[name=tag]", "team:nobody")
    page.click("form[data-form=tag-filter] button")
    page.wait_for_selector("text=tagged team=nobody")  # typed team:nobody, shown one way (issue 36)
    assert "payments-eu" not in page.inner_text("table.clusters")
    page.screenshot(path=str(tmp_path / "fleet-filtered-by-tag.png"), full_page=True)

    page.fill("header form[role=search] input[name=q]", "DB-PAY")
    page.press("header form[role=search] input[name=q]", "Enter")
    page.wait_for_selector("[data-group=Backends] [data-result]")
    page.click("[data-group=Backends] a:has-text('db-pay-1.example.net:3306')")
    page.wait_for_url(f"**{Server.objects.get().get_absolute_url()}")
    page.screenshot(path=str(tmp_path / "search.png"), full_page=True)


def test_filter_a_clusters_backends_and_keep_typing_through_the_live_refresh(
    page, live_server, browser_login, viewer_user, tmp_path
):
    """The cluster page's backend filter (the API's hostname, port and maintenance): what is being typed survives
    the live section's 2-s refresh, the filtered list stays filtered through it, a refused port says why."""
    alpha = Cluster.objects.create(name="alpha", writer_hostgroup=100, reader_hostgroup=101)
    for host, port, maintenance in [("db-a", 3306, False), ("db-a", 3307, True), ("db-b", 3306, False)]:
        Server.objects.create(cluster=alpha, hostname=host, port=port, maintenance=maintenance)
    browser_login(viewer_user)
    page.goto(f"{live_server.url}{alpha.get_absolute_url()}")
    rows = page.locator("table.backends tbody tr")
    assert rows.count() == 3

    page.focus("#backend-filter-hostname")
    page.keyboard.type("db-")
    live = f"/monitoring/clusters/{alpha.pk}/live/"
    with page.expect_response(lambda r: live in r.url):  # a refresh while typing
        pass
    page.wait_for_timeout(300)  # swapped and settled
    assert page.input_value("#backend-filter-hostname") == "db-"
    assert page.evaluate("document.activeElement.id") == "backend-filter-hostname"
    page.keyboard.type("a")
    page.select_option("#backend-filter-maintenance", "false")
    page.click("#backend-filter button")
    page.wait_for_selector("[data-backend-filter-shown]")
    assert "1 of the cluster's 3 backends match" in page.inner_text("[data-backend-filter-shown]")
    assert rows.count() == 1 and "db-a:3306" in page.inner_text("table.backends")
    with page.expect_response(lambda r: live in r.url and "hostname=db-a" in r.url):
        pass  # the refresh carries the filter
    page.wait_for_timeout(300)
    assert rows.count() == 1 and page.input_value("#backend-filter-hostname") == "db-a"

    page.fill("#backend-filter-port", "70000")
    page.click("#backend-filter button")
    page.wait_for_selector("[data-backend-filter-error]")
    assert "a port is a whole number from 1 to 65535" in page.inner_text("[data-backend-filter-error]")
    assert rows.count() == 3
    page.screenshot(path=str(tmp_path / "cluster-backends-filter-refused.png"), full_page=True)
