"""In a real browser (Debian chromium): a viewer narrows the audit log with its filters and search, pages
and exports it, then opens the incident view around an event and moves along the time axis. No
console error (the pages hold under the CSP: no inline script or style)."""

import csv
import io

import pytest
from playwright.sync_api import expect

from apps.audit.models import AuditEvent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def listed(page):
    return page.eval_on_selector_all("table.audit tr[data-event]", "trs => trs.map(tr => tr.children[2].innerText)")


def test_viewer_filters_searches_and_opens_the_incident_view(
    page, live_server, browser_login, viewer_user, incident, at
):
    alpha, start, end, op, server = incident
    for i in range(55):  # enough for a second page
        at(5 + i / 10, "login", actor=f"user{i % 3}")
    errors = []

    def console(message):
        where = message.location.get("url", "")
        # Not ours: the favicon nobody serves, and htmx's own indicator <style> (base.html, every page).
        if message.type == "error" and "favicon" not in where and not where.endswith("htmx.min.js"):
            errors.append((page.url, message.text))

    page.on("console", console)
    browser_login(viewer_user)

    page.goto(f"{live_server.url}/audit/")
    assert len(listed(page)) == 50
    page.click("a[data-testid=older]")
    page.wait_for_url("**before=*")
    assert len(listed(page)) == AuditEvent.objects.count() - 50
    page.click("a[data-testid=newer]")
    page.wait_for_url("**after=*")
    assert len(listed(page)) == 50

    page.select_option("#id_cluster", label="alpha")
    page.fill("#id_actor", "otto")
    page.click("[data-testid=audit-filters] button[type=submit]")
    page.wait_for_url("**actor=otto*")
    expect(page.locator("table.audit tr[data-event]")).to_have_count(2)
    assert [a.split(" ")[0] for a in listed(page)] == ["drain", "drain"]

    page.fill("#id_actor", "")
    page.fill("#id_q", "weight")
    page.press("#id_q", "Enter")
    page.wait_for_url("**q=weight*")
    assert listed(page) == ["change hostgroupmembership"]

    page.click("a.range[data-range='1h']")  # a quick range keeps the other filters
    page.wait_for_url("**range=1h*")
    assert "q=weight" in page.url and listed(page) == []
    expect(page.locator("a.range.active")).to_have_text("1h")

    with page.expect_download() as download:
        page.click("a.range[data-range='any time']")
        page.wait_for_url(lambda url: "range=" not in url)
        page.click("[data-testid=export-csv]")
    rows = list(csv.DictReader(io.StringIO(open(download.value.path(), encoding="utf-8").read())))
    assert [r["action"] for r in rows] == ["change hostgroupmembership"] and '"weight"' in rows[0]["details"]

    page.goto(f"{live_server.url}/audit/?actor=otto&action=drain+planned")
    page.click("table.audit tr[data-event] td.when a")
    page.click("text=Incident view around this event")
    page.wait_for_selector("[data-testid=timeline-svg]")
    assert "alpha" in page.locator("h1").inner_text()
    svg = page.locator("[data-testid=timeline-svg]")
    expect(svg.locator("circle.mark")).to_have_count(2)  # 30 minutes either side: planned and done
    expect(svg.locator("circle.mark.highlight")).to_have_count(1)
    expect(svg.locator("rect.warn")).to_have_count(1)  # the desynced reader, 10 minutes of it
    expect(svg.locator("rect.step")).to_have_count(3)
    assert svg.bounding_box()["width"] > 900  # drawn at the page's width
    story = page.locator("[data-testid=story] tbody tr")
    expect(story.filter(has_text="Synced → Donor/Desynced")).to_have_count(1)
    expect(story.filter(has_text="step 2 drain: done")).to_have_count(1)

    window = page.locator("#id_start").input_value()
    page.click("[data-testid=later]")
    page.wait_for_url(lambda url: window not in url)
    assert page.locator("#id_start").input_value() > window
    expect(page.locator("svg circle.mark")).to_have_count(4)  # now with ada's change and the event after the hour
    page.locator("svg circle.mark").first.click()  # an event on the axis opens the event
    page.wait_for_url("**/audit/*/")
    assert "Audit event" in page.locator("h1").inner_text()
    assert not errors, errors
