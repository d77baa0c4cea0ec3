"""In a real browser: a viewer searches the digest list and sorts it, without full page reloads (htmx)
and with the URL following; then opens a digest and sees its chart drawn."""

import time

import pytest
from playwright.sync_api import expect

from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import services
from apps.configuration.tables import MYSQL_USERS, typed_row
from apps.digests.models import RAW, DigestStat

from .factories import digest, fleet, polls, source
from .test_rule_test_page import rule

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def rows(page):
    return page.eval_on_selector_all("tr[data-digest]", "trs => trs.map(tr => tr.dataset.digest)")


def test_viewer_searches_and_sorts_the_digest_list(page, live_server, browser_login, viewer_user):
    now = int(time.time())
    cluster, (node,) = fleet(1, "shop")
    src = source(node)
    stats = []
    for i in range(60):  # count rises with i, total time falls with i
        d = digest(f"SELECT c{i} FROM orders WHERE id = ?", h=f"0x{i + 1:016X}")
        stats.append(
            DigestStat(
                resolution=RAW, ts=now - 600 - i, source=src, digest=d, count_star=10 + i, sum_time=(200 - i) * 1000
            )
        )
    invoices = digest("SELECT * FROM invoices WHERE customer_id = ?", h="0x00000000000B1111")
    stats.append(DigestStat(resolution=RAW, ts=now - 300, source=src, digest=invoices, count_star=2, sum_time=40))
    DigestStat.objects.bulk_create(stats)
    polls(node, now - 3600, now)

    browser_login(viewer_user)
    page.goto(f"{live_server.url}/digests/")
    assert rows(page)[0] == "0x0000000000000001"  # by total time
    assert len(rows(page)) == 50 and page.locator("[data-total]").inner_text() == "61"
    page.evaluate("window.stillTheSamePage = true")  # lost on a full reload, kept across htmx swaps

    page.fill("#id_q", "invoices")
    expect(page.locator("tr[data-digest]")).to_have_count(1)
    assert rows(page) == ["0x00000000000B1111"] and "q=invoices" in page.url
    page.fill("#id_q", "")
    expect(page.locator("tr[data-digest]")).to_have_count(50)

    page.click("a[data-sort-key=count]")
    page.wait_for_selector("table.digests[data-sort=count][data-dir=desc]")
    assert rows(page)[:2] == ["0x000000000000003C", "0x000000000000003B"] and "sort=count" in page.url
    page.click("a[data-sort-key=count]")  # again: ascending
    page.wait_for_selector("table.digests[data-sort=count][data-dir=asc]")
    assert rows(page)[0] == "0x00000000000B1111"
    assert page.locator("th[aria-sort=ascending] a[data-sort-key=count]").count() == 1

    page.click("a[rel=next]")
    page.wait_for_selector("[data-page='2']")
    assert len(rows(page)) == 11 and "page=2" in page.url
    assert page.evaluate("window.stillTheSamePage") is True

    page.go_back()  # the pushed URLs work as real ones
    page.wait_for_selector("[data-page='1']")

    page.click("tr[data-digest] td.digest-text a >> nth=0")
    page.wait_for_selector("pre[data-digest-text]")
    page.wait_for_selector("canvas#digest-chart[data-drawn='1']")
    assert "buckets of 1 min" in page.locator(".chart-note").inner_text()


def test_viewer_tests_a_digest_against_the_rules_and_a_draft(
    page, live_server, browser_login, viewer_user, operator_user, tmp_path
):
    now = int(time.time())
    cluster, (node,) = fleet(1, "shop")
    content = C.empty()
    content["roles"] = {"writer": 100, "reader": 101}
    content["mysql_users"] = [typed_row(MYSQL_USERS, {"username": "app", "default_hostgroup": 100}, strict=False)]
    content["mysql_query_rules"] = [rule(10, match_digest="^SELECT", destination_hostgroup=101, apply=1)]
    services.record_version(cluster, content, actor=Actor.system(), reason="rules", source="change")
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="block the report")
    blocked = rule(5, match_digest="FROM report", error_msg="not here", apply=1)
    services.add_edit(
        cs, {"op": "upsert", "table": "mysql_query_rules", "row": blocked}, actor=Actor.command(operator_user)
    )
    d = digest("SELECT * FROM report WHERE day = ?", h="0x00000000000C0001")
    DigestStat.objects.create(resolution=RAW, ts=now - 300, source=source(node), digest=d, count_star=5, sum_time=50)
    polls(node, now - 3600, now)

    browser_login(viewer_user)
    page.goto(f"{live_server.url}/digests/?cluster={cluster.pk}")
    page.click("tr[data-digest='0x00000000000C0001'] a[data-test-rules]")
    page.wait_for_selector("[data-column='0'] tr[data-rule='10'][data-hit='1']")
    page.fill("#id_rt_user", "app")
    page.select_option("#id_rt_change_set", str(cs.pk))
    page.click("#rule-test-form button[type=submit] >> nth=-1")
    page.wait_for_selector("[data-column='1'] tr[data-rule='5'][data-hit='1']")
    expect(page.locator("[data-column='0'] [data-outcome]")).to_contain_text("Sent to hostgroup 101 (rule 10)")
    expect(page.locator("[data-column='1'] [data-outcome]")).to_contain_text("Blocked")
    left, right = page.locator("[data-column='0']").bounding_box(), page.locator("[data-column='1']").bounding_box()
    assert right["x"] > left["x"] + left["width"] - 1 and abs(right["y"] - left["y"]) < 2  # side by side
    page.screenshot(path=str(tmp_path / "rule-test.png"), full_page=True)  # kept: the layout is the point


@pytest.mark.parametrize("width", [1366, 1920])
def test_the_digest_chart_ticks_on_round_utc_times_with_dates_over_a_day(
    page, live_server, browser_login, viewer_user, width
):
    """Issue 36 item 8, on the digest page too: its chart ticked where Chart.js put them (17:31, 17:56 on 1 h) and
    showed no date on 24 h. Now the console's one time axis (static/js/time_axis.js): round UTC times, dates over a
    day, labels that never run into each other at 1366 or 1920 px."""
    now = int(time.time())
    cluster, (node,) = fleet(1, "shop")
    d = digest("SELECT c FROM orders WHERE id = ?", h="0x0000000000000ABC")
    DigestStat.objects.bulk_create(
        [
            DigestStat(resolution=RAW, ts=now - 60 * i, source=source(node), digest=d, count_star=10, sum_time=5000)
            for i in range(1, 50)
        ]
    )
    polls(node, now - 3600, now)
    page.set_viewport_size({"width": width, "height": 900})
    browser_login(viewer_user)
    for window, has_date in (("1h", False), ("24h", True)):
        page.goto(f"{live_server.url}/digests/{d.pk}/?window={window}")
        page.wait_for_selector("canvas#digest-chart[data-drawn='1']")
        ticks = page.evaluate("""() => { const x = document.querySelector('#digest-chart').chart.scales.x;
            return x.ticks.map((t, i) => ({value: t.value, label: x.getLabelForValue ? x.ticks[i].label : null,
                                            left: x.getPixelForTick(i)})); }""")
        assert len(ticks) >= 3, ticks
        steps = {b["value"] - a["value"] for a, b in zip(ticks, ticks[1:])}
        round_steps = {m * 60_000 for m in (1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080)}
        assert len(steps) == 1 and steps <= round_steps, ticks  # one round step: 5 min, 1 h, 6 h..., not 8.33 min
        assert all(t["value"] % min(steps) == 0 for t in ticks), ticks  # on round UTC times
        assert all(("-" in t["label"]) == has_date for t in ticks), (window, ticks)
        gaps = [b["left"] - a["left"] for a, b in zip(ticks, ticks[1:])]
        assert min(gaps) >= 7 * max(len(t["label"]) for t in ticks), (window, width, gaps, ticks)
