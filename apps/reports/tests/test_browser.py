"""A report page in a real browser (Debian chromium): the summary reads first, every chart image loads
under the console's CSP, and the PDF link downloads a PDF."""

import os

import pytest

from apps.audit.actor import Actor
from apps.monitoring.models import HOUR, MINUTE
from apps.reports import services

from .test_numbers import H, _switchover


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_report_page_in_the_browser(page, browser_login, live_server, viewer_user, report_cluster, history, day):
    a, b = day.start.timestamp(), day.end.timestamp()
    s1, s2, s3 = report_cluster.servers_
    for s in (s1, s2):
        history.backend(s, a, b, step=H, resolution=HOUR)
    history.backend(
        s3,
        a,
        b,
        step=60,
        resolution=MINUTE,
        fn=lambda t: {"reachable": False} if a + 2 * H <= t < a + 2 * H + 600 else {},
    )
    for n in report_cluster.nodes_:
        history.proxysql(n, a, b, step=H, resolution=HOUR, fn=lambda t: {"conn_err_ps": 0.01})
        history.pool(n, a, b, step=H, resolution=HOUR)
    _switchover(report_cluster, s1, s2, a + 14 * H, 82)
    report = services.build_report(report_cluster, "daily", day, actor=Actor.system())

    errors, failed = [], []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on(
        "response",
        lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 and "/favicon" not in r.url else None,
    )
    browser_login(viewer_user)
    page.goto(f"{live_server.url}/reports/")
    page.click(f"a[href='/reports/{report.pk}/'] >> nth=0")
    page.wait_for_url(f"{live_server.url}/reports/{report.pk}/")
    headline = page.locator(".report .summary .headline")
    assert headline.inner_text() == "lab-east: 100 % available; one planned switchover, 82 ms of writer interruption."
    assert page.locator(".report .points li").first.inner_text().startswith("✓ No service interruption")
    images = page.locator(".report img.chart")
    assert images.count() == report.charts.count() >= 4
    loaded = page.evaluate(
        "Array.from(document.querySelectorAll('.report img.chart')).every(i => i.complete && i.naturalWidth > 700)"
    )
    assert loaded
    assert page.locator(".report table.data").first.is_visible()
    assert "Build" not in page.locator("main").inner_text().split("Download PDF")[0]  # a viewer cannot build
    with page.expect_download() as download:
        page.click("text=Download PDF")
    assert download.value.suggested_filename == "lab-east-daily-2026-03-10.pdf"
    # (htmx's own indicator <style> trips style-src on every console page: not this page's doing)
    assert not [e for e in errors if "img-src" in e or "script-src" in e], errors
    assert not failed, failed
    if os.environ.get("REPORT_SCREENSHOT"):
        page.screenshot(path=os.environ["REPORT_SCREENSHOT"], full_page=True)
