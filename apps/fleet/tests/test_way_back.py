"""Issue 36 item 12: a viewer's refusal gives a way back; a drift fragment's URL opened directly is a styled page."""

import pytest
from django.urls import reverse

from apps.fleet.tests.test_tags import make

pytestmark = pytest.mark.django_db


def test_a_viewers_refusal_links_back_to_the_page_they_came_from(viewer_client):
    cluster = make("c1")
    came_from = f"http://testserver{cluster.get_absolute_url()}"
    refused = viewer_client.get(reverse("operations:switchover", args=[cluster.pk]), HTTP_REFERER=came_from)
    page = refused.content.decode()
    assert refused.status_code == 403 and "This needs the operator role." in page
    assert f'<a href="{came_from}">← Back to the page you came from</a>' in page
    assert f'<a href="{reverse("pages:overview")}">The fleet overview</a>' in page
    # A Referer from elsewhere is not offered as the way back.
    page = viewer_client.get(
        reverse("operations:switchover", args=[cluster.pk]), HTTP_REFERER="https://elsewhere.example/x"
    ).content.decode()
    assert "elsewhere.example" not in page and "The fleet overview" in page


def test_a_drift_fragment_opened_as_a_page_renders_in_the_layout_with_a_link_to_its_page(viewer_client):
    cluster = make("c1")
    for url, back in (
        (reverse("pages:cluster_drift", args=[cluster.pk]), cluster.get_absolute_url() + "#drift-section"),
        (reverse("configuration:drift", args=[cluster.pk]), reverse("configuration:cluster", args=[cluster.pk])),
    ):
        page = viewer_client.get(url).content.decode()
        assert page.lstrip().lower().startswith("<!doctype html>") and "console.css" in page, url
        assert f'<a href="{back}" data-back>' in page and "<h1>Drift of c1" in page and "data-fragment-page" in page
        fragment = viewer_client.get(url, HTTP_HX_REQUEST="true").content.decode()  # htmx still gets the fragment
        assert "<html" not in fragment.lower() and "data-back" not in fragment
