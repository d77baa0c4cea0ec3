"""Delivery: the e-mail through Django's outbox (HTML with inline PNG charts referenced by cid: and
attached with that Content-ID), the PDF rendered and parsed, the archive's chart URLs."""

import io
import re

import pytest
from django.urls import reverse
from pypdf import PdfReader

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.monitoring.models import HOUR, MINUTE
from apps.reports import services
from apps.reports.models import Report

from .test_numbers import H, _switchover

pytestmark = pytest.mark.django_db


@pytest.fixture
def built(report_cluster, history, day, settings):
    """A daily report of a day with a switchover, errors and a backend unreachable for 10 minutes."""
    settings.REPORTS_BASE_URL = "https://console.example.org"
    a, b = day.start.timestamp(), day.end.timestamp()
    s1, s2, s3 = report_cluster.servers_
    history.backend(s1, a, b, step=H, resolution=HOUR)
    history.backend(s2, a, b, step=H, resolution=HOUR)
    history.backend(
        s3,
        a,
        b,
        step=60,
        resolution=MINUTE,
        fn=lambda t: {"reachable": False} if a + 2 * H <= t < a + 2 * H + 600 else {},
    )
    for n in report_cluster.nodes_:
        history.proxysql(
            n,
            a,
            b,
            step=H,
            resolution=HOUR,
            fn=lambda t: {
                "conn_err_ps": 0.05 if a + 2 * H <= t < a + 3 * H else 0.0,
                "questions_ps": 500.0 + (t - a) / 100,
            },
        )
        history.pool(n, a, b, step=H, resolution=HOUR)
    _switchover(report_cluster, s1, s2, a + 14 * H, 82)
    return services.build_report(report_cluster, "daily", day, actor=Actor.system())


def test_the_archived_report_holds_its_data_html_and_charts(built, report_cluster):
    report = Report.objects.get(pk=built.pk)
    assert report.headline == "lab-east: 100 % available; one planned switchover, 82 ms of writer interruption."
    assert report.data["clusters"][0]["name"] == "lab-east" and report.data["period"] == "daily"
    keys = set(report.charts.values_list("key", flat=True))
    c = f"c{report_cluster.pk}-"
    assert {c + "timeline", c + "writer", c + "traffic", c + "connerr"} <= keys
    for png in report.charts.values_list("png", flat=True):
        assert bytes(png[:8]) == b"\x89PNG\r\n\x1a\n"
    assert AuditEvent.objects.filter(action="report built", details__report=report.pk).exists()


def test_the_email_has_inline_charts_referenced_by_content_id(built, mailoutbox, report_cluster):
    ok, error = services.send_report(built, ["ops@example.org", "cto@example.org"])
    assert ok and not error
    [mail] = mailoutbox
    assert mail.to == ["ops@example.org", "cto@example.org"]
    assert (
        mail.subject
        == "[ProxySQL fleet] lab-east: 100 % available; one planned switchover, 82 ms of writer interruption."
    )
    assert "writes held for 82 ms" in mail.body and f"https://console.example.org/reports/{built.pk}/" in mail.body
    html, mime = mail.alternatives[0]
    assert mime == "text/html"
    assert "<script" not in html.lower()
    referenced = set(re.findall(r'src="cid:([^"]+)"', html))
    assert referenced == set(built.charts.values_list("key", flat=True))
    message = mail.message()
    assert message.get_content_type() == "multipart/related"
    attached = {part["Content-ID"].strip("<>"): part for part in message.walk() if part.get("Content-ID")}
    assert set(attached) == referenced
    for part in attached.values():
        assert part.get_content_type() == "image/png" and part.get("Content-Disposition").startswith("inline")
        assert part.get_payload(decode=True)[:4] == b"\x89PNG"
    assert "Lab data" not in html  # nothing here was written by the lab history
    assert f'href="https://console.example.org{report_cluster.get_absolute_url()}"' in html
    built.refresh_from_db()
    assert built.emailed_at is not None and built.emailed_to == "ops@example.org, cto@example.org"


def test_a_failed_mail_is_recorded_not_raised(built, settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 0.5
    ok, error = services.send_report(built, ["ops@example.org"])
    assert not ok and "refused" in error.lower()
    built.refresh_from_db()
    assert built.email_error and built.emailed_at is None
    assert AuditEvent.objects.filter(action="report e-mailed", outcome="failure").exists()


def test_the_pdf_renders_with_its_text_and_charts(built, viewer_client):
    response = viewer_client.get(reverse("reports:pdf", args=[built.pk]))
    assert response.status_code == 200 and response["Content-Type"] == "application/pdf"
    assert 'filename="lab-east-daily-2026-03-10.pdf"' in response["Content-Disposition"]
    pdf = PdfReader(io.BytesIO(response.content))
    text = " ".join(page.extract_text() for page in pdf.pages)
    flat = " ".join(text.split())
    assert "lab-east · Tuesday 10 March 2026" in flat
    assert "100 % available; one planned switchover, 82 ms of writer interruption" in flat
    for heading in (
        "Availability",
        "Writer changes",
        "Traffic and connection errors",
        "Mirror queue",
        "ProxySQL nodes",
    ):
        assert heading in flat
    assert "10 min unreachable" in flat or "10 min" in flat
    drawn = {hash(image.data) for page in pdf.pages for image in page.images}  # pages may share resources
    assert len(drawn) == built.charts.count()
    assert "page 1 of" in flat


def test_a_report_is_rendered_to_pdf_once_and_anew_when_what_it_shows_changes(built, viewer_client):
    """A render is about a second of CPU: the same report downloaded again (a reload, a loop of them) is served from the
    report-pdf cache; a report whose text or charts change is rendered again. Bytes put in the cache under the
    report's key stand for a render: served, nothing was rendered; not served, it was rendered anew."""
    from django.core.cache import caches

    cache = caches["report-pdf"]
    cache.clear()
    url = reverse("reports:pdf", args=[built.pk])
    first = viewer_client.get(url).content
    key = services.pdf_source(built)[2]
    assert first.startswith(b"%PDF") and cache.get(key) == first
    cache.set(key, b"%PDF kept")
    assert viewer_client.get(url).content == b"%PDF kept"  # served from the cache, not rendered again

    built.data = {**built.data, "summary": {**built.data["summary"], "headline": "a headline edited since"}}
    built.save(update_fields=["data"])
    changed = viewer_client.get(url).content
    assert changed.startswith(b"%PDF-") and changed != first  # rendered anew, not the kept bytes
    assert "a headline edited since" in " ".join(p.extract_text() for p in PdfReader(io.BytesIO(changed)).pages)

    cache.set(services.pdf_source(built)[2], b"%PDF kept")
    chart = built.charts.first()
    chart.png = bytes(chart.png) + b"\0"  # a PNG reader stops at its IEND chunk: the same picture, other bytes
    chart.save(update_fields=["png"])
    again = viewer_client.get(url).content
    assert again.startswith(b"%PDF-") and again != b"%PDF kept"  # a chart changed: rendered anew


def test_chart_images_are_served_to_viewers(built, viewer_client, report_cluster):
    url = reverse("reports:chart", args=[built.pk, f"c{report_cluster.pk}-timeline"])
    response = viewer_client.get(url)
    assert response.status_code == 200 and response["Content-Type"] == "image/png"
    assert viewer_client.get(reverse("reports:chart", args=[built.pk, "nope"])).status_code == 404
