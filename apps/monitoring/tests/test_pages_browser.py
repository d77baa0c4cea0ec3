"""The monitoring pages in a real browser (Debian chromium through Playwright) against the polled lab: the
overview refreshing live until a stopped ProxySQL double shows up as unreachable, and a node page whose
history charts are drawn by Chart.js from the chart JSON."""

import time

import pytest

from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import live, pollers

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def poll(rounds, pause=0.25):
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("pk"))
    servers = list(Server.objects.select_related("cluster").order_by("pk"))
    for i in range(rounds):
        if i:
            time.sleep(pause)
        pollers.proxysql_round(nodes)
        pollers.backend_round(servers)
    return nodes


def test_overview_shows_live_figures_then_an_unreachable_node(
    page, live_server, browser_login, viewer_user, adopted_lab, live_redis
):
    cluster, (first, second) = adopted_lab
    poll(rounds=2)
    browser_login(viewer_user)  # lands on the overview
    assert page.locator("a.chip[data-state=ok]").count() == 5
    assert page.locator("text=galera-lab").count() >= 1 and page.locator("[data-attention=none]").count() == 1
    assert page.locator("a.chip:has-text('proxysql-1') .age").inner_text().endswith(" s")

    stopped = ProxySQLNode.objects.get(admin_port=second.port)
    second.stop()
    poll(rounds=1)
    # No reload: the htmx refresh (every 2 s) brings the attention item in.
    item = page.wait_for_selector("#attention tr[data-kind=unreachable]", timeout=6000)
    text = item.inner_text()
    doc = live.read_one(live.PROXYSQL, stopped.pk)
    assert stopped.name in text and doc["error"] in text  # the last error, as the poller recorded it
    assert page.locator(f"a.chip[data-state=unreachable]:has-text('{stopped.name}')").count() == 1


def test_node_page_draws_its_charts(page, live_server, browser_login, viewer_user, adopted_lab, live_redis):
    nodes = poll(rounds=4)
    browser_login(viewer_user)
    page.goto(f"{live_server.url}{nodes[0].get_absolute_url()}")
    page.wait_for_selector("#pool-live table.pool")
    page.wait_for_selector("#chart-connections[data-loaded='1']")
    drawn = page.evaluate("""() => {
        const canvas = document.getElementById('chart-connections');
        const chart = Chart.getChart(canvas);
        const points = chart.data.datasets.reduce((n, d) => n + d.data.filter(p => p.y !== null).length, 0);
        const ctx = canvas.getContext('2d');
        const pixels = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
        let painted = 0;
        for (let i = 3; i < pixels.length; i += 4) if (pixels[i] > 0) painted++;
        return {points, painted, datasets: chart.data.datasets.length, spanGaps: chart.data.datasets[0].spanGaps};
    }""")
    assert drawn["datasets"] == 6 and drawn["points"] >= 6 * 4 and drawn["painted"] > 1000  # per hostgroup
    assert drawn["spanGaps"] is False

    page.click("#chart-queries >> xpath=ancestor::figure//button[@data-range='24h']")
    page.wait_for_function(
        "() => Chart.getChart(document.getElementById('chart-queries'))"
        " && document.querySelector('#chart-queries').closest('figure')"
        ".querySelector('.chart-note').textContent.includes('1-minute')"
    )


def test_a_long_cluster_name_keeps_the_cluster_table_on_screen(
    page, live_server, browser_login, viewer_user, adopted_lab, live_redis, tmp_path
):
    cluster, _ = adopted_lab
    cluster.name = "galera-" + "x" * 193  # 200 characters, no space to break at
    cluster.save(update_fields=["name"])
    poll(rounds=2)
    browser_login(viewer_user)
    page.screenshot(path=str(tmp_path / "overview-long-name.png"), full_page=True)  # kept: the layout is the point
    viewport = page.viewport_size["width"]
    # The table is swapped every 2 s (htmx, outerHTML): its boxes are read in one script, between two swaps (read one
    # element at a time, a chip could be detached by a swap in between: a CI run got no box).
    boxes = page.evaluate("""() => {
        const box = e => { const r = e.getBoundingClientRect(); return {x: r.x, width: r.width, text: e.innerText}; };
        const table = document.querySelector('table.clusters');
        return {table: box(table), chips: [...table.querySelectorAll('a.chip')].map(box)};
    }""")
    table = boxes["table"]
    assert table["x"] + table["width"] <= viewport, table
    chips = boxes["chips"]  # 2 ProxySQL nodes, 3 backends, whatever their state
    assert len(chips) == 5
    for box in chips:  # every figure on screen, not scrolled away behind the name
        assert box["width"] > 0 and 0 <= box["x"] and box["x"] + box["width"] <= viewport, box
    name = page.locator(f"table.clusters a[href='{cluster.get_absolute_url()}']")
    assert name.inner_text().replace("\n", "") == cluster.name  # the whole name, wrapped


def test_the_header_is_one_row_with_every_label_whole(page, live_server, browser_login, admin_user_role, tmp_path):
    """An admin has the most links; on a 1280 px screen each header label stays on one line and the header on
    one row (the labels used to break in two: "Adopt a / ProxySQL node")."""
    browser_login(admin_user_role)
    page.screenshot(path=str(tmp_path / "header.png"))  # kept: the layout is the point
    links = page.locator("header.topbar nav a, header.topbar .who a, header.topbar .who span")
    assert links.count() >= 9
    heights = {links.nth(i).inner_text(): links.nth(i).bounding_box()["height"] for i in range(links.count())}
    line = min(heights.values())
    assert all(h < 1.5 * line for h in heights.values()), heights  # no label on two lines
    header = page.locator("header.topbar").bounding_box()
    assert header["height"] < 3 * line, header  # one row: the padding and one line of text
    assert page.locator("header.topbar input[type=search]").get_attribute("aria-label").startswith("Search clusters")
