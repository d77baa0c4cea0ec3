"""In a real browser (Debian chromium): Django's admin works under the console's Content-Security-Policy. An
admin logs in through /admin/login/, edits a user on its change form (the admin's scripts build the two-box
group selector and the date shortcuts), adds an inline row and opens a filtered change list; no policy
violation, no console error."""

import pytest

from apps.audit.models import AuditEvent

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RECORD_VIOLATIONS = """window.cspViolations = [];
document.addEventListener("securitypolicyviolation",
                          e => window.cspViolations.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}`));"""


def test_the_admin_logs_in_and_edits_a_user_under_the_csp(page, live_server, admin_user_role, viewer_user):
    errors, policies = [], []
    page.on(
        "console",
        lambda m: (
            m.type == "error" and "favicon" not in m.location.get("url", "") and errors.append((page.url, m.text))
        ),
    )
    page.on(
        "response",
        lambda r: r.request.resource_type == "document" and policies.append(r.headers.get("content-security-policy")),
    )
    page.add_init_script(RECORD_VIOLATIONS)

    page.goto(f"{live_server.url}/admin/")
    page.wait_for_url("**/admin/login/**")
    assert page.evaluate("window.cspViolations") == []
    page.fill("input[name=username]", "ada-admin")
    page.fill("input[name=password]", "pw-ada-admin")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/admin/")
    assert AuditEvent.objects.filter(action="login", actor="ada-admin").exists()

    page.goto(f"{live_server.url}/admin/auth/user/{viewer_user.pk}/change/")
    page.wait_for_selector("#id_groups_from")  # SelectFilter2.js made the two boxes
    page.wait_for_selector(".datetimeshortcuts")  # DateTimeShortcuts.js added "Today | Now"
    page.fill("input[name=first_name]", "Vera")
    page.click("input[name=_save]")
    page.wait_for_url(f"{live_server.url}/admin/auth/user/")
    viewer_user.refresh_from_db()
    assert viewer_user.first_name == "Vera"

    page.goto(f"{live_server.url}/admin/fleet/server/add/")  # a tabular inline: inlines.js adds its rows
    page.click(".add-row a")
    page.wait_for_selector("#memberships-0")
    page.goto(f"{live_server.url}/admin/fleet/hostgroupmembership/")  # a change list with filters
    page.wait_for_selector("#changelist-filter")
    assert page.evaluate("window.cspViolations") == []
    assert errors == []
    assert len(policies) >= 6 and all(p and "script-src 'self'" in p and "unsafe-inline" not in p for p in policies)


def test_every_console_page_names_its_icon(page, live_server, browser_login, viewer_user):
    """Issue 23: no favicon (a 404 for /favicon.ico on every page, a blank tab among the operator's others)."""
    missing = []
    page.on("response", lambda r: r.status == 404 and missing.append(r.url))
    browser_login(viewer_user)
    href = page.get_attribute("link[rel=icon]", "href")
    assert href == "/static/favicon.svg"
    icon = page.request.get(f"{live_server.url}{href}")
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    assert b"<svg" in icon.body()
    page.goto(f"{live_server.url}/alerts/")
    assert page.get_attribute("link[rel=icon]", "href") == href and not missing, missing
