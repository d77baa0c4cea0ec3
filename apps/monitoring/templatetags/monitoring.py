"""Filters for figures and their age, and the inline SVG sparklines of the cluster page.

Every figure on a monitoring page is shown with how old it is: `{{ age|age }}` gives "3 s", "4 min"...
"""

from datetime import datetime, timezone

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from apps.monitoring import formatting

register = template.Library()


@register.filter
def age(seconds):
    """Seconds -> "0.4 s", "12 s", "3 min", "5 h", "2 d" (the largest unit: formatting.duration); "" for None."""
    return "" if seconds is None else formatting.duration(seconds, parts=1)


@register.filter
def epoch_utc(value):
    """Epoch seconds -> "2026-11-28 11:40:02 UTC"; "" for None."""
    if value is None:
        return ""
    return datetime.fromtimestamp(int(value), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@register.filter
def num(value):
    """A figure at a glance (formatting.number): "3,353", "241 k", "21.2 M", "0.25"; "–" when missing."""
    return formatting.number(value)


@register.filter
def us_to_ms(value):
    """Microseconds as milliseconds, the unit in the column's heading: "0.63", "12.3", "1,250"."""
    v = formatting.finite(value)
    return formatting.MISSING if v is None else formatting.three_figures(v / 1000)


@register.filter
def pct(value):
    """A fraction as a whole percentage (formatting.share): "42 %", "<1 %", "99.6 %" (never rounded up to 100)."""
    return formatting.share(value, digits=0)


@register.filter
def onoff(value):
    if value is None:
        return "–"
    return "ON" if value else "OFF"


STATE_COLOURS = {4: "#1d7f45", 2: "#a86a00", 3: "#a86a00", 1: "#b42318"}


@register.simple_tag
def sparkline(values, width=180, height=28, lo=0):
    """Inline SVG polyline of `values` (None = gap: the line stops and restarts, never drawn through)."""
    numbers = [v for v in values if v is not None]
    if not numbers:
        return format_html(
            '<svg class="spark" width="{}" height="{}" role="img" aria-label="no data">'
            "<title>no data in the last hour</title></svg>",
            width,
            height,
        )
    hi = max(max(numbers), lo + 1)
    step = width / max(1, len(values) - 1)
    segments, current = [], []
    for i, v in enumerate(values):
        if v is None:
            if current:
                segments.append(current)
            current = []
            continue
        current.append(f"{i * step:.1f},{height - 2 - (v - lo) / (hi - lo) * (height - 4):.1f}")
    if current:
        segments.append(current)
    parts = []
    for seg in segments:
        if len(seg) == 1:
            x, y = seg[0].split(",")
            parts.append(f'<circle cx="{x}" cy="{y}" r="1.5"/>')
        else:
            parts.append(f'<polyline points="{" ".join(seg)}"/>')
    # Only numbers go into this markup.
    return mark_safe(
        f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="max {max(numbers):g}"><title>max {max(numbers):g}</title>'
        f"{''.join(parts)}</svg>"
    )


@register.simple_tag
def state_strip(values, width=180, height=10):
    """Inline SVG timeline of wsrep_local_state per bucket: green Synced, amber Donor/Joined, red
    Joining, nothing (a gap) where no poll reached the node."""
    w = width / max(1, len(values))
    rects = "".join(
        f'<rect x="{i * w:.1f}" y="0" width="{w + 0.3:.1f}" height="{height}" fill="{STATE_COLOURS.get(v, "#6b7280")}"/>'
        for i, v in enumerate(values)
        if v is not None
    )
    return mark_safe(
        f'<svg class="strip" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="wsrep state, last hour">{rects}</svg>'
    )
