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
