"""The processlist kill flow in a real browser (Debian chromium through Playwright): an operator opens the node page,
the sessions load from the node, "Kill…" leads to a confirmation naming the session; unticked it is refused, ticked
the session is gone and the page says so."""

import pytest

from apps.audit.models import AuditEvent
from apps.fleet.models import ProxySQLNode

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_operator_kills_one_session_from_the_node_page(
    page, live_server, browser_login, operator_user, adopted_lab, tmp_path
):
    cluster, (first, _) = adopted_lab
    first.traffic.set_sessions(hostgroup=101, count=8, kind="read", reconnect=False)
    node = ProxySQLNode.objects.get(admin_port=first.port)
    browser_login(operator_user)
    page.goto(f"{live_server.url}{node.get_absolute_url()}")
    page.wait_for_selector("#sessions-live table.sessions")
    assert page.locator("#sessions-live tr[data-session]").count() == 12
    row = page.locator("#sessions-live tr[data-session]").filter(has_text="Sleep").first
    session_id = int(row.get_attribute("data-session"))
    row.locator("a:has-text('Kill')").click()

    page.wait_for_selector("[data-confirm-kill]")
    assert page.locator("td[data-field=session]").inner_text() == str(session_id)
    assert page.locator("td[data-field=user]").inner_text() == "app"
    assert page.locator("td[data-field=host]").inner_text().startswith("127.0.0.1:")
    page.screenshot(path=str(tmp_path / "kill-confirmation.png"), full_page=True)  # kept: what the operator reads
    page.click("button:has-text('Kill session')")  # not ticked
    assert page.locator("[data-refusal]").inner_text() == "Tick the confirmation to kill the session."
    assert session_id in {r[1] for r in first.traffic.processlist_rows(0)}

    page.check("input[name=confirm]")
    page.click("button:has-text('Kill session')")
    page.wait_for_selector("#sessions-live table.sessions")
    assert f"Killed session {session_id} of user app" in page.locator(".flash-success").inner_text()
    assert page.locator(f"#sessions-live tr[data-session='{session_id}']").count() == 0
    assert page.locator("#sessions-live tr[data-session]").count() == 11
    assert (
        AuditEvent.objects.filter(
            action="proxysql.kill_session", outcome="success", actor=operator_user.username
        ).count()
        == 1
    )
