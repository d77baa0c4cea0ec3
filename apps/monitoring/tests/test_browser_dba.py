"""The monitoring pages as a DBA reads them in a real browser: maintenance said where it is, not hidden behind a
green chip."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import rollups

from .test_pages_browser import poll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_fleet_page_says_a_drained_backend_is_in_maintenance(
    page, live_server, browser_login, viewer_user, adopted_lab, live_redis
):
    drained = Server.objects.order_by("pk").last()
    Server.objects.filter(pk=drained.pk).update(maintenance=True, maintenance_note="disk swap")
    poll(rounds=2)
    browser_login(viewer_user)
    name = f"{drained.hostname}:{drained.port}"
    chip = page.wait_for_selector(f"a.chip[data-maintenance]:has-text('{name}')")
    assert "maintenance" in chip.inner_text() and "st-green" not in chip.get_attribute("class")
    assert page.locator("[data-attention=none]").count() == 0
    # (read through waits: the live refresh swaps the list every 2 s)
    row = page.wait_for_selector("#attention tr[data-kind='in maintenance']").inner_text()
    assert name in row and "disk swap" in row
    page.wait_for_selector("[data-in-maintenance='1']")


def in_view(page, selector):
    """Whether the element is on the screen as the page is scrolled now."""
    return page.locator(selector).first.evaluate(
        "e => { const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; }"
    )


def test_the_processlist_sorts_filters_hides_sleep_and_a_kill_shows_its_outcome(
    page, live_server, browser_login, operator_user, adopted_lab
):
    cluster, (first, _) = adopted_lab
    first.traffic.set_sessions(hostgroup=101, count=8, kind="read", reconnect=False)
    node = ProxySQLNode.objects.get(admin_port=first.port)
    browser_login(operator_user)
    page.goto(f"{live_server.url}{node.get_absolute_url()}")
    page.wait_for_selector("#sessions-live table.sessions")
    rows = page.locator("#sessions-live tr[data-session]")
    commands = rows.locator("td:nth-child(7)").all_inner_texts()
    assert "Sleep" in commands and len(commands) == 12
    kill = rows.first.locator("a:has-text('Kill')")
    assert kill.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(180, 35, 24)"  # the danger red
    assert kill.bounding_box()["height"] < 26  # small beside each row, not a large primary button

    page.check("[data-sessions-filter] input[name=hide_sleep]")
    page.click("[data-sessions-filter] button[name=read]")
    # [checked] is the attribute the server's fragment renders (page.check sets the property only): the swap is in.
    page.wait_for_selector("[data-sessions-filter] input[name=hide_sleep][checked]", state="attached")
    shown = page.locator("#sessions-live tr[data-session] td:nth-child(7)").all_inner_texts()
    assert shown and "Sleep" not in shown  # (the double's sessions move between reads: no exact count)
    page.uncheck("[data-sessions-filter] input[name=hide_sleep]")
    page.fill("[data-sessions-filter] input[name=q]", "app")
    page.select_option("[data-sessions-filter] select[name=sort]", "user")
    page.click("[data-sessions-filter] button[name=read]")
    page.wait_for_selector("[data-sessions-filter] select[name=sort] option[value=user][selected]", state="attached")
    users = page.locator("#sessions-live tr[data-session] td:nth-child(2)").all_inner_texts()
    assert users and set(users) == {"app"}
    page.fill("[data-sessions-filter] input[name=q]", "nobody-here")
    page.click("[data-sessions-filter] button[name=read]")
    page.wait_for_selector("[data-sessions-count]:has-text('0 matching')")
    assert page.locator("#sessions-live tr[data-session]").count() == 0

    page.goto(f"{live_server.url}{node.get_absolute_url()}")
    page.wait_for_selector("#sessions-live table.sessions")
    page.locator("#sessions-live tr[data-session] a:has-text('Kill')").first.click()
    page.check("input[name=confirm]")
    page.click("button:has-text('Kill session')")
    page.wait_for_selector(".flash-success")
    assert in_view(page, ".flash-success"), "the redirect scrolled past the outcome"


def test_saving_tags_shows_its_outcome(page, live_server, browser_login, operator_user, adopted_lab):
    cluster, _ = adopted_lab
    browser_login(operator_user)
    page.goto(f"{live_server.url}{cluster.get_absolute_url()}")
    page.fill("[data-form=tags] input[name=tags]", "env=prod")
    page.click("[data-form=tags] button")
    page.wait_for_selector(".flash-success:has-text('Tags saved')")
    assert in_view(page, ".flash-success")


CHARTS_JS = """() => [...document.querySelectorAll('canvas[data-url]')].filter(c => Chart.getChart(c)).map(c => {
    const chart = Chart.getChart(c), x = chart.scales.x, ctx = chart.ctx;
    const colours = chart.data.datasets.filter(d => !['#b42318', '#a86a00'].includes(d.borderColor)).map(d => d.borderColor);
    // Each tick label's left and right edge as drawn (centred on its tick), to tell labels that overlap.
    const boxes = x.getLabelItems().map(item => {
        ctx.save(); ctx.font = item.font.string; const w = ctx.measureText(item.label).width; ctx.restore();
        return [item.options.translation[0] - w / 2, item.options.translation[0] + w / 2]; });
    return {id: c.id, series: chart.data.datasets.length, width: c.getBoundingClientRect().width, span: x.max - x.min,
            canvas: chart.width, shown: chart.data.datasets.filter((d, i) => chart.isDatasetVisible(i)).length,
            colours: colours.length, distinct: new Set(colours).size, boxes: boxes,
            ticks: x.ticks.map(t => t.value), labels: x.ticks.map(t => t.label)};
})"""
ROUND_STEPS_MIN = {1, 2, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440, 2880, 10080}
RANGE_MS = {"1h": 3600000, "24h": 86400000, "30d": 30 * 86400000}
LABEL_FORM = {"1h": r"^\d\d:\d\d$", "24h": r"^\d\d-\d\d \d\d:\d\d$", "30d": r"^\d\d-\d\d$"}


@pytest.mark.parametrize("width, height", [(1366, 900), (1920, 1080)])
def test_history_charts_read_at_a_glance(
    page, live_server, browser_login, viewer_user, adopted_lab, live_redis, width, height
):
    """Issue 36: at most 5 series drawn by default, no colour twice in a legend, charts as wide as half the screen,
    ticks on round UTC times that never overlap, with the date on ranges of a day and over: at both widths a DBA
    uses, on the 1 h, 24 h and 30 d ranges."""
    import re

    nodes = poll(rounds=3)
    # The minute rollups of these polls, as the scheduled task writes them: the 30 d range reads those.
    rollups.run_all(now=timezone.now() + timedelta(minutes=1))
    page.set_viewport_size({"width": width, "height": height})
    browser_login(viewer_user)
    page.goto(f"{live_server.url}{nodes[0].get_absolute_url()}")
    page.wait_for_selector("#chart-connections[data-loaded='1']")
    page.wait_for_function("() => [...document.querySelectorAll('canvas[data-url]')].every(c => c.dataset.loaded)")
    for range_key in ("1h", "24h", "30d"):
        page.evaluate(f"() => document.querySelectorAll(\"button[data-range='{range_key}']\").forEach(b => b.click())")
        page.wait_for_function(
            f"() => [...document.querySelectorAll('canvas[data-url]')].every(c => {{"
            f" const chart = Chart.getChart(c); return chart && "
            f"chart.scales.x.max - chart.scales.x.min === {RANGE_MS[range_key]}; }})"
        )
        charts = page.evaluate(CHARTS_JS)
        assert charts and any(c["series"] > 5 for c in charts), charts  # the latency chart: one series per server
        for c in charts:
            where = (width, range_key, c["id"], c["labels"])
            assert c["shown"] <= 5, (where, c["shown"])
            assert c["distinct"] == c["colours"], where  # no colour twice in one legend
            assert c["width"] >= 0.42 * width, (where, c["width"])  # half the screen (was 590 px on a 1920 one)
            steps = {(b - a) // 60000 for a, b in zip(c["ticks"], c["ticks"][1:])}
            assert all(t % 60000 == 0 for t in c["ticks"]) and len(steps) == 1 and steps <= ROUND_STEPS_MIN, where
            step_ms = steps.pop() * 60000
            assert all(t % min(step_ms, 86400000) == 0 for t in c["ticks"]), where  # on the step's round times
            assert len(c["ticks"]) >= 3 and all(re.match(LABEL_FORM[range_key], label) for label in c["labels"]), where
            boxes = c["boxes"]
            assert all(right + 4 <= left for (_, right), (left, _) in zip(boxes, boxes[1:])), (where, boxes)
            assert boxes[0][0] >= 0 and boxes[-1][1] <= c["canvas"], (where, boxes)  # none cut at the edges
    crowded = next(c for c in page.evaluate(CHARTS_JS) if c["series"] > 5)
    figure = page.locator(f"figure:has(#{crowded['id']})")
    figure.locator("button[data-all-series]").click()
    chart = f"Chart.getChart(document.getElementById('{crowded['id']}'))"
    page.wait_for_function(
        f"() => {{ const c = {chart}; return c && c.getSortedVisibleDatasetMetas().length === {crowded['series']}; }}"
    )
    figure.locator("button[data-range='24h']").click()
    page.wait_for_function(
        f"() => {{ const c = {chart}; "  # a date on a range of a day
        f"return c && c.scales.x.ticks.some(t => /^\\d\\d-\\d\\d /.test(t.label)); }}"
    )


def test_times_are_24_hour_utc_and_the_incident_view_fills_its_window(
    page, live_server, browser_login, operator_user, adopted_lab
):
    import re

    cluster, _ = adopted_lab
    node = cluster.proxysql_nodes.order_by("pk").first()
    browser_login(operator_user)
    page.goto(f"{live_server.url}{node.get_absolute_url()}")
    assert re.search(r"adopted \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", page.inner_text("main"))
    page.goto(f"{live_server.url}/audit/incident/?cluster={cluster.pk}")
    for name in ("start", "end"):
        field = page.locator(f"input[name={name}]")
        assert field.get_attribute("type") == "text"  # not datetime-local: a browser draws that 12-hour in en-US
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", field.input_value()), field.input_value()
    page.goto(f"{live_server.url}/digests/")
    assert page.locator("input[name=from]").get_attribute("type") == "text"


def test_node_names_on_the_cluster_page_never_break_at_1366(
    page, live_server, browser_login, viewer_user, adopted_lab, live_redis
):
    """Issue 36 (the walk at 1366 px): the ProxySQL Cluster table squeezed its Node column, 'proxysql-' on one line
    and '1' on the next, on every row."""
    cluster, _ = adopted_lab
    names = sorted(ProxySQLNode.objects.filter(cluster=cluster).values_list("name", flat=True))
    poll(rounds=2)
    page.set_viewport_size({"width": 1366, "height": 900})
    browser_login(viewer_user)
    page.goto(f"{live_server.url}{cluster.get_absolute_url()}")
    page.wait_for_selector("table.proxysql-cluster td")
    lines = page.evaluate(
        """(names) => [...document.querySelectorAll('table.proxysql-cluster td')]
        .filter(td => names.includes(td.textContent.trim()))
        .map(td => { const r = document.createRange(); r.selectNodeContents(td);
                     return [td.textContent.trim(), new Set([...r.getClientRects()].map(b => Math.round(b.top))).size]; })""",
        names,
    )
    assert lines and {name for name, _ in lines} == set(names), lines
    assert all(n == 1 for _, n in lines), lines
