"""Filters for figures and their age, and the inline SVG sparklines of the cluster page.

Every figure on a monitoring page is shown with how old it is: `{{ age|age }}` gives "3 s", "4 min"...
"""
import math
from datetime import datetime, timezone

from django import template
from django.utils.html import format_html
from django.utils.safestring import mark_safe

register = template.Library()


@register.filter
def age(seconds):
    """Seconds -> "0.4 s", "12 s", "3 min", "5 h", "2 d"; "" for None."""
    if seconds is None:
        return ""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def _number(value):
    """A figure of a latest-state document as a finite float, or None when it is missing: None, an empty string
    or anything else that is no number (a node whose polls stopped left an empty figure: a 500 before)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


@register.filter
def epoch_utc(value):
    """Epoch seconds -> "2026-11-28 11:40:02 UTC"; "" for None."""
    if value is None:
        return ""
    return datetime.fromtimestamp(int(value), tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


@register.filter
def num(value):
    """Compact figure: 3353.47 -> "3,353", 241361.7 -> "241k", 21151075.5 -> "21.2M", 0.25 -> "0.25"; "–" when
    missing (_number)."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    v = _number(value)
    if v is None:
        return "–"
    a = abs(v)
    if a >= 1_000_000_000:
        return f"{v / 1_000_000_000:.3g}G"
    if a >= 1_000_000:
        return f"{v / 1_000_000:.3g}M"
    if a >= 100_000:
        return f"{v / 1000:.0f}k"
    if a >= 100 or v == int(v):
        return f"{v:,.0f}"
    return f"{v:.2f}"


@register.filter
def us_to_ms(value):
    v = _number(value)
    return "–" if v is None else f"{v / 1000:.2f}"


@register.filter
def pct(value):
    v = _number(value)
    return "–" if v is None else f"{v * 100:.0f}%"


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
        return format_html('<svg class="spark" width="{}" height="{}" role="img" aria-label="no data">'
                           '<title>no data in the last hour</title></svg>', width, height)
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
    return mark_safe(f'<svg class="spark" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
                     f'role="img" aria-label="max {max(numbers):g}"><title>max {max(numbers):g}</title>'
                     f'{"".join(parts)}</svg>')


@register.simple_tag
def state_strip(values, width=180, height=10):
    """Inline SVG timeline of wsrep_local_state per bucket: green Synced, amber Donor/Joined, red
    Joining, nothing (a gap) where no poll reached the node."""
    w = width / max(1, len(values))
    rects = "".join(f'<rect x="{i * w:.1f}" y="0" width="{w + 0.3:.1f}" height="{height}" fill="{STATE_COLOURS.get(v, "#6b7280")}"/>'
                    for i, v in enumerate(values) if v is not None)
    return mark_safe(f'<svg class="strip" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
                     f'role="img" aria-label="wsrep state, last hour">{rects}</svg>')
