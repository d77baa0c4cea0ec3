"""In a real browser (Debian chromium): the alerts list is readable at 2 a.m. Every piece of text in its rows
(firing, pending, held and resolved, each severity) meets WCAG AA contrast (4.5:1) against the background it
is drawn on, severity is a badge (the row is not painted), and resolved history is quieter than what fires."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.alerts.models import Alert
from apps.fleet.models import Cluster

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# For each text-bearing element: its colour and the first opaque background behind it (alpha composited on the
# way up), then the WCAG 2 contrast ratio.
CONTRAST_JS = """rows => {
  const rgba = s => { const m = s.match(/[\\d.]+/g).map(Number); return [m[0], m[1], m[2], m.length > 3 ? m[3] : 1]; };
  const over = (top, under) => [0, 1, 2].map(i => top[i] * top[3] + under[i] * (1 - top[3])).concat([1]);
  const background = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = rgba(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    return layers.reduceRight((under, top) => over(top, under), [255, 255, 255, 1]);
  };
  const lum = c => { const [r, g, b] = c.slice(0, 3).map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
                     return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const out = [];
  for (const row of rows) {
    for (const el of row.querySelectorAll('*')) {
      const text = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
      if (!text) continue;
      const bg = background(el);
      const fg = over(rgba(getComputedStyle(el).color), bg);
      const [a, b] = [lum(fg), lum(bg)];
      out.push({row: row.dataset.state + ' ' + row.dataset.severity, text: text.slice(0, 40),
                ratio: (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)});
    }
  }
  return out;
}"""


def test_alert_rows_are_readable_and_history_is_quiet(page, live_server, browser_login, viewer_user, tmp_path):
    cluster = Cluster.objects.create(name="alpha", writer_hostgroup=10, reader_hostgroup=20)
    now = timezone.now()
    for i, severity in enumerate(("critical", "warning", "info")):
        common = dict(
            rule="writer_none",
            cluster=cluster,
            severity=severity,
            subject_label="proxysql-1 · hostgroup 10",
            summary="no usable ONLINE writer on proxysql-1",
            since=now - timedelta(minutes=5),
            fires_at=now - timedelta(minutes=4),
            last_seen_at=now,
        )
        Alert.objects.create(
            target=f"n{i}",
            subject=f"firing-{i}",
            state="firing",
            fired_at=now,
            active_key=f"f{i}",
            acked_at=now,
            acked_by="otto",
            **common,
        )
        Alert.objects.create(target=f"p{i}", subject=f"pending-{i}", state="pending", active_key=f"p{i}", **common)
        Alert.objects.create(
            target=f"h{i}",
            subject=f"held-{i}",
            state="pending",
            held=True,
            was_held=True,
            hold_reason="switchover #3",
            active_key=f"h{i}",
            **common,
        )
        Alert.objects.create(
            target=f"r{i}",
            subject=f"resolved-{i}",
            state="resolved",
            fired_at=now,
            resolved_at=now,
            was_held=True,
            **common,
        )
    browser_login(viewer_user)
    page.goto(f"{live_server.url}{reverse('alerts:list')}")
    rows = page.locator("table.alerts tr[data-alert]")
    assert rows.count() == 12
    page.screenshot(path=str(tmp_path / "alerts-list.png"), full_page=True)  # kept: the layout is the point

    measured = page.eval_on_selector_all("table.alerts tr[data-alert]", CONTRAST_JS)
    assert {m["row"] for m in measured} == {
        f"{s} {sev}"
        for s in ("firing", "pending", "pending-held", "resolved")
        for sev in ("critical", "warning", "info")
    }
    unreadable = [m for m in measured if m["ratio"] < 4.5]
    assert not unreadable, unreadable

    def cell_background(selector):
        return page.eval_on_selector(selector, "td => getComputedStyle(td).backgroundColor")

    # Severity is a badge; the row itself is not painted in the severity's colour.
    for severity in ("critical", "warning", "info"):
        assert page.locator(f"tr[data-state=firing][data-severity={severity}] .sev").inner_text().lower() == severity
    history = "#history tr[data-state=resolved][data-severity=critical]"
    firing = "#open-alerts tr[data-state=firing][data-severity=critical]"
    assert cell_background(f"{history} td") in ("rgba(0, 0, 0, 0)", "rgb(255, 255, 255)")
    # Firing stands out from history: its rows are marked, history's badge is not a solid block of colour.
    assert cell_background(f"{firing} td") != cell_background(f"{history} td")
    badge = page.eval_on_selector(f"{history} .sev", "b => getComputedStyle(b).backgroundColor")
    solid = page.eval_on_selector(f"{firing} .sev", "b => getComputedStyle(b).backgroundColor")
    assert badge != solid
