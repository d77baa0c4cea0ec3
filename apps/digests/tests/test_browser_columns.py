"""The digest list as a DBA reads it: min time shown beside max, and the Where column on one line a row even when
a digest runs for several users on several hostgroups."""

import time

import pytest

from .factories import digest, fleet, polls, source, stat

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_min_time_shown_and_where_on_one_line(page, live_server, browser_login, viewer_user):
    now = int(time.time())
    cluster, (node,) = fleet(1, "shop")
    d = digest("SELECT * FROM orders WHERE id = ?", h="0x00000000000A0001")
    for hg, user in ((101, "app"), (101, "reporting"), (100, "billing-batch"), (102, "analytics")):
        stat(
            source(node, hostgroup=hg, username=user, schemaname="shop_production"),
            d,
            now - 300,
            10,
            5000,
            most=900,
            least=120,
        )
    polls(node, now - 3600, now)
    page.set_viewport_size({"width": 1366, "height": 900})
    browser_login(viewer_user)
    page.goto(f"{live_server.url}/digests/")
    row = page.locator("tr[data-digest='0x00000000000A0001']")
    assert page.locator("th[data-col-head=min]").count() == 1
    assert row.locator("td[data-col=min]").inner_text().strip() not in ("", "–")
    where = row.locator("td.where")
    assert "+3" in where.inner_text() and "billing-batch" in where.get_attribute("title")
    lines = where.evaluate("""td => { const r = document.createRange(); r.selectNodeContents(td);
                                       return new Set([...r.getClientRects()].map(b => Math.round(b.bottom))).size; }""")
    assert lines == 1, f"the Where cell wraps onto {lines} lines"
