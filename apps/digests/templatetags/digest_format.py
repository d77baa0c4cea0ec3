"""Formatting for the digest pages: microseconds as readable durations, big counts with separators
(apps/monitoring/formatting.py, as every page)."""

from datetime import datetime, timezone

from django import template

from apps.monitoring import formatting

register = template.Library()


@register.filter
def duration_us(value):
    """Microseconds -> "850 µs", "12.3 ms", "4.56 s", "2 h 03 min" (formatting.duration); "–" when unknown."""
    return formatting.microseconds(value)


@register.filter
def grouped(value):
    """1234567 -> "1,234,567"."""
    return formatting.count(value)


@register.filter
def epoch_utc(value, fmt="%Y-%m-%d %H:%M"):
    if value is None:
        return "–"
    return datetime.fromtimestamp(int(value), tz=timezone.utc).strftime(fmt)


@register.filter
def seconds_ago(value):
    """ "12 s ago", "3 min ago", "2 d ago"; "never"."""
    return formatting.ago(value)


@register.filter
def share(value):
    """A fraction as a percentage with one decimal ("–" when unknown; "<0.1 %" rather than a false 0)."""
    return formatting.share(value, digits=1)
