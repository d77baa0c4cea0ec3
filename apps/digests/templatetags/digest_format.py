"""Formatting for the digest pages: microseconds as readable durations, big counts with separators."""
from datetime import datetime, timezone

from django import template

register = template.Library()


@register.filter
def duration_us(value):
    """Microseconds -> "850 µs", "12.3 ms", "4.56 s", "2 h 3 min"; "–" when unknown."""
    if value is None or value == "":
        return "–"
    us = float(value)
    if us < 1000:
        return f"{us:.0f} µs"
    if us < 1_000_000:
        return f"{us / 1000:.3g} ms" if us < 100_000 else f"{us / 1000:.0f} ms"
    s = us / 1_000_000
    if s < 600:
        return f"{s:.3g} s" if s < 100 else f"{s:.0f} s"
    minutes = s / 60
    if minutes < 120:
        return f"{minutes:.0f} min"
    return f"{int(minutes // 60)} h {int(minutes % 60)} min"


@register.filter
def grouped(value):
    """1234567 -> "1,234,567"."""
    if value is None or value == "":
        return "–"
    return f"{int(value):,}"


@register.filter
def epoch_utc(value, fmt="%Y-%m-%d %H:%M"):
    if value is None:
        return "–"
    return datetime.fromtimestamp(int(value), tz=timezone.utc).strftime(fmt)


@register.filter
def seconds_ago(value):
    if value is None:
        return "never"
    value = float(value)
    if value < 90:
        return f"{value:.0f} s ago"
    if value < 5400:
        return f"{value / 60:.0f} min ago"
    if value < 172800:
        return f"{value / 3600:.0f} h ago"
    return f"{value / 86400:.0f} days ago"


@register.filter
def share(value):
    """A fraction as a percentage with one decimal ("–" when unknown; "<0.1 %" rather than a false 0)."""
    if value is None:
        return "–"
    if 0 < value < 0.001:
        return "<0.1 %"
    return f"{value * 100:.1f} %"
