"""The monitoring pages as a DBA reads them in a real browser: maintenance said where it is, not hidden behind a
green chip."""
import pytest

from apps.fleet.models import Server

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
