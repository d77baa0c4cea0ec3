"""The monitoring pages as a DBA reads them in a real browser: maintenance said where it is, not hidden behind a
green chip."""
import pytest

from apps.fleet.models import ProxySQLNode, Server

from .test_pages_browser import poll

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_fleet_page_says_a_drained_backend_is_in_maintenance(page, live_server, browser_login, viewer_user,
                                                                  adopted_lab, live_redis):
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
        "e => { const r = e.getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; }")


def test_the_processlist_sorts_filters_hides_sleep_and_a_kill_shows_its_outcome(page, live_server, browser_login,
                                                                               operator_user, adopted_lab):
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
    page.wait_for_selector("[data-sessions-filter] input[name=hide_sleep]:checked")
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
