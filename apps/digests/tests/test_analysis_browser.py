"""The issue's done-when, in a real browser: a digest page shows an example query, its EXPLAIN from a real backend of
the Galera lab, and min/max per poll window (two adopted ProxySQL doubles in front of the lab, real Redis)."""

import pytest

from apps.digests.models import Digest

from .test_analysis import EXPLAIN_PASSWORD, EXPLAIN_USER, lab_schema, sampled  # noqa: F401 (lab_schema: a fixture)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_reads_an_example_its_explain_and_min_max_per_window(
    digest_lab, lab_schema, page, live_server, browser_login, operator_user
):
    cluster = sampled(digest_lab)
    cluster.explain_user, cluster.explain_password = EXPLAIN_USER, EXPLAIN_PASSWORD
    cluster.save()
    digest = Digest.objects.get(digest_text="SELECT c FROM sbtest1 WHERE id=?")
    page.set_viewport_size({"width": 1366, "height": 900})
    browser_login(operator_user)
    page.goto(f"{live_server.url}/digests/{digest.pk}/?cluster={cluster.pk}")
    example = page.locator("[data-example-text]").first
    assert example.inner_text().startswith("SELECT c FROM sbtest1 WHERE id=")
    assert example.inner_text() != digest.digest_text  # its literal, shown to an operator
    assert page.locator("tr[data-example]").first.locator("td").nth(1).inner_text() == "proxysql-1"
    window = page.locator("#latency tbody tr[data-hostgroup='101']").first
    for column in ("min", "max"):
        assert any(ch.isdigit() for ch in window.locator(f"td[data-col={column}]").inner_text())
    page.locator("[data-explain]").first.click()
    page.wait_for_selector("[data-explain-rows], [data-explain-refused]")
    assert page.locator("[data-explain-refused]").count() == 0, page.locator("[data-explain-refused]").inner_text()
    table = page.locator("[data-explain-rows]")
    assert table.locator("th").nth(2).inner_text() == "table"
    assert table.locator("tbody tr").first.locator("td").nth(2).inner_text() == "sbtest1"
    assert "as console_explain, read only" in page.locator("[data-explain-where]").inner_text()
