"""How a report says numbers: durations a person reads at a glance, percentages that never round a
loss away (99.9996 % is not "100 %"), counts in words when small. Durations, percentages and figures are
apps/monitoring/formatting.py's, as on every page."""

from datetime import datetime, timedelta, timezone as dt_timezone
from typing import overload

from django.utils import timezone

# Durations, percentages and numbers are said as on every page (one module; `fmt.duration(...)` reads on here).
from apps.monitoring.formatting import MISSING, duration, milliseconds as ms, number, percent  # noqa: F401


def change(now: float | None, before: float | None) -> float | None:
    """Relative change as a percentage (None when there is nothing to compare with)."""
    if before is None or now is None:
        return None
    if before == 0:
        return None if now == 0 else float("inf")
    return (now - before) / before * 100


def change_text(
    now: float | None, before: float | None, unit_word: str = "", period_word: str = "the period before"
) -> str:
    c = change(now, before)
    if c is None:
        return f"as many as {period_word}" if now == before and now is not None else "nothing to compare with"
    if c == float("inf"):
        return f"none {period_word}"
    if abs(c) < 1:
        return f"about the same as {period_word}"
    return f"{abs(c):.0f} % {'more' if c > 0 else 'fewer' if unit_word == 'count' else 'less'} than {period_word}"


def count_word(n: int, singular: str, plural: str | None = None) -> str:
    words = {
        0: "no",
        1: "one",
        2: "two",
        3: "three",
        4: "four",
        5: "five",
        6: "six",
        7: "seven",
        8: "eight",
        9: "nine",
        10: "ten",
    }
    word = words.get(n, f"{n:,}")
    return f"{word} {singular if n == 1 else (plural or singular + 's')}"


@overload
def local(ts: float) -> datetime: ...
@overload
def local(ts: None) -> None: ...
def local(ts: float | None) -> datetime | None:
    """Epoch seconds -> aware local datetime (settings.TIME_ZONE)."""
    if ts is None:
        return None
    return timezone.localtime(datetime.fromtimestamp(ts, tz=dt_timezone.utc))


def clock(ts: float | None, with_day: bool = False) -> str:
    t = local(ts)
    if t is None:
        return MISSING
    return t.strftime("%a %d %b %H:%M:%S" if with_day else "%H:%M:%S")


def period_label(start: datetime, end: datetime, period: str, rolling: bool = False) -> str:
    a, b = timezone.localtime(start), timezone.localtime(end)
    if rolling:
        return f"{'24 hours' if period == 'daily' else '7 days'} to {b:%a %d %b %Y %H:%M}"
    last = b - timedelta(seconds=1)
    if period == "daily":
        return f"{a:%A %d %B %Y}".replace(" 0", " ")
    return f"{a:%a %d %b} – {last:%a %d %b %Y}".replace(" 0", " ")


def before_words(period: str, rolling: bool | None = False) -> str:
    if rolling:
        return "the period before"
    return "the day before" if period == "daily" else "the week before"
