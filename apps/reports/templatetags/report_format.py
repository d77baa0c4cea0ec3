"""Filters for the report templates: epoch seconds in local time, durations, percentages, numbers."""

from django import template

from apps.reports import fmt

register = template.Library()


@register.filter
def at(ts, style="time"):
    """Epoch seconds -> local time: "time" 14:05:02, "day" Tue 14 May 14:05, "full" 2026-05-14 14:05:02."""
    t = fmt.local(ts)
    if t is None:
        return fmt.MISSING
    if style == "day":
        return t.strftime("%a %d %b %H:%M")
    if style == "full":
        return t.strftime("%Y-%m-%d %H:%M:%S %Z")
    if style == "date":
        return t.strftime("%a %d %b %Y")
    return t.strftime("%H:%M:%S")


@register.filter
def dur(seconds):
    return fmt.duration(seconds)


@register.filter
def dur_ms(ms):
    return fmt.ms(ms)


@register.filter
def pct(value):
    return fmt.percent(value)


@register.filter
def num(value):
    return fmt.number(value)


@register.filter
def signed_pct(value):
    if value is None:
        return fmt.MISSING
    if abs(value) < 0.5:
        return "±0 %"
    return f"{value:+.0f} %"


@register.filter
def ms(value):
    return fmt.ms(value)


@register.filter
def dur0(seconds):
    """A duration, or a dash for nothing."""
    return fmt.MISSING if not seconds or seconds < 0.0005 else fmt.duration(seconds)


@register.filter
def get(mapping, key):
    try:
        return mapping.get(key)
    except AttributeError:
        return None


@register.filter
def share(part, whole):
    """part / whole as a percentage of time, '' when nothing was observed."""
    if not whole:
        return ""
    return fmt.percent(100.0 * (part or 0) / whole)
