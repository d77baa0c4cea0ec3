"""In a real browser (Debian chromium): an operator makes an API token on the tokens page (shown once), a script
uses it; the API's docs page (Swagger UI) loads every file from our own static files under the console's CSP,
with no request elsewhere and no console error, and its "Try it out" answers with the browser's session."""

import pytest
from playwright.sync_api import expect

from apps.accounts.models import ApiToken

from .conftest import ApiClient

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_token_made_in_the_browser_and_the_docs_page_under_our_csp(page, live_server, browser_login, operator_user):
    errors, elsewhere = [], []
    # (A favicon nobody serves is not ours to mind.)
    page.on(
        "console",
        lambda m: errors.append(m.text) if m.type == "error" and "favicon" not in m.location.get("url", "") else None,
    )
    page.on("request", lambda r: None if r.url.startswith(live_server.url) else elsewhere.append(r.url))
    failed = []
    page.on("response", lambda r: failed.append((r.status, r.url)) if r.status >= 400 else None)
    browser_login(operator_user)

    page.goto(f"{live_server.url}/accounts/tokens/")
    page.fill("input[name=name]", "from-the-browser")
    page.click("button[name=create]")
    secret = page.inner_text("#new-token").strip()
    assert secret.startswith("pfc_")
    assert ApiClient(secret).get("/api/v1/me/").json()["token"]["name"] == "from-the-browser"
    page.reload()  # shown once: a reload shows its prefix only, and makes no second token
    assert secret not in page.content() and ApiToken.objects.get().prefix in page.content()
    assert ApiToken.objects.count() == 1

    page.goto(f"{live_server.url}/api/v1/docs/")
    page.wait_for_selector(".opblock-summary-path", timeout=20_000)  # Swagger UI drew the schema's endpoints
    assert page.locator(".opblock").count() >= 40
    me = page.locator("#operations-meta-me_retrieve")
    me.locator(".opblock-summary").click()
    me.locator("button.try-out__btn").click()
    me.locator("button.execute").click()
    expect(me.locator(".live-responses-table tbody td.response-col_status").first).to_contain_text("200")
    assert '"authenticated_by": "session"' in me.locator(".live-responses-table").inner_text()
    assert not elsewhere, elsewhere  # no CDN, no validator badge: it works on an isolated network
    assert not [e for e in errors if "Content Security Policy" in e or "Refused to" in e], errors
    assert not errors, (errors, failed)
