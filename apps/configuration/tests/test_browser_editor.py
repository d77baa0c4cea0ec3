"""The change-set editor as a DBA meets it in a real browser: destructive controls readable (WCAG 4.5:1) and red,
a discard that asks first (a page: works without JS), the query rules table compact (the columns read first, the
rest folded per row) and full width on a wide screen."""

import pytest

from apps.audit.actor import Actor
from apps.configuration import services
from apps.configuration.models import ChangeSet
from lab.browser_checks import contrast

from .test_change_sets import versioned_lab  # noqa: F401 (the lab pair with query rules, as version 1)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def draft(versioned_lab, operator_user):
    cluster, doubles, v1 = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="tidy the rules")
    services.add_edit(
        cs,
        {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"},
        actor=Actor.command(operator_user),
    )
    return cs


def test_destructive_controls_are_readable_and_discard_asks_first(
    page, live_server, browser_login, operator_user, draft
):
    browser_login(operator_user)
    page.goto(f"{live_server.url}{draft.get_absolute_url()}")
    for control in ("button[name=remove]", "[data-delete] >> nth=0", "[data-discard]"):
        ratio = contrast(page.locator(control).first)
        assert ratio >= 4.5, (control, ratio)

    page.click("[data-discard]")
    page.wait_for_selector("[data-discard-confirm]")
    draft.refresh_from_db()
    assert draft.state == ChangeSet.State.DRAFT  # asking discarded nothing
    page.click("[data-keep]")
    page.wait_for_url(f"{live_server.url}{draft.get_absolute_url()}")
    page.click("[data-discard]")
    page.click("[data-discard-confirm] button[name=discard]")
    page.wait_for_url(f"{live_server.url}/configuration/**")
    draft.refresh_from_db()
    assert draft.state == ChangeSet.State.DISCARDED


def test_a_post_without_the_confirmation_discards_nothing(operator_client, draft):
    response = operator_client.post(f"/configuration/change-sets/{draft.pk}/discard/")
    draft.refresh_from_db()
    assert response.status_code == 200 and b"data-discard-confirm" in response.content
    assert draft.state == ChangeSet.State.DRAFT


@pytest.mark.parametrize("width", [1366, 1920])
def test_the_query_rules_table_fits_the_screen_with_the_rest_folded(
    page, live_server, browser_login, operator_user, draft, width
):
    page.set_viewport_size({"width": width, "height": 1000})
    browser_login(operator_user)
    page.goto(f"{live_server.url}{draft.get_absolute_url()}")
    section = page.locator("section[data-table=mysql_query_rules]")
    for column in ("destination_hostgroup", "apply", "mirror_hostgroup", "comment"):
        box = section.locator(f"th:text-is('{column}')").bounding_box()
        assert box and box["x"] + box["width"] <= width, (column, box)
    scroller = section.locator(".scroll")
    assert scroller.evaluate("e => e.scrollWidth <= e.clientWidth"), "the rules table scrolls sideways"
    # The rest of a row is one click away, only what is set; its NULLs are counted, not listed.
    more = section.locator("tbody tr >> nth=0").locator("[data-more-columns]")
    assert not more.locator("dl").is_visible()
    more.locator("summary").click()
    assert "flagIN" in more.locator("dl").inner_text() and "NULL" not in more.locator("dl").inner_text()
    assert "NULL" in more.locator("summary").inner_text()
    if width == 1920:  # full width on a wide screen, not capped near 1,230 px
        assert page.locator("main").bounding_box()["width"] >= 1800


@pytest.mark.parametrize("width", [1366, 1920])
def test_the_users_table_fits_the_screen_with_the_rest_folded(
    page, live_server, browser_login, operator_user, draft, width
):
    """Issue 36 item 2, "users likewise": mysql_users shows the columns read first, the rest folded per row."""
    page.set_viewport_size({"width": width, "height": 1000})
    browser_login(operator_user)
    page.goto(f"{live_server.url}{draft.get_absolute_url()}")
    section = page.locator("section[data-table=mysql_users]")
    assert section.locator("tbody tr").count(), "the lab's version holds users"
    for column in ("username", "default_hostgroup", "transaction_persistent", "max_connections", "comment"):
        box = section.locator(f"th:text-is('{column}')").bounding_box()
        assert box and box["x"] + box["width"] <= width, (column, box)
    assert section.locator("th:text-is('max_connections')").count() == 1  # the column read first, not folded
    assert (
        not section.locator("th:text-is('frontend')").count() and not section.locator("th:text-is('use_ssl')").count()
    )
    assert section.locator(".scroll").evaluate("e => e.scrollWidth <= e.clientWidth"), (
        "the users table scrolls sideways"
    )
    more = section.locator("tbody tr >> nth=0").locator("[data-more-columns]")
    more.locator("summary").click()
    assert "NULL" not in more.locator("dl").inner_text()
