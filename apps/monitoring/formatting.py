"""How the console says a figure to a person: durations, percentages and numbers, one way on every page, report,
command and message (issue 35: three copies printed "2 h 3 min", "2 h 05 min" and "2 h" for the same time).

Pure functions of a value, no Django: the pages' filters (monitoring, digests, reports templatetags), the reports
(apps/reports/fmt.py) and the commands call these. Here in monitoring, the lowest app whose figures are shown, so that
every app above may use it (apps/tests/test_boundaries.py ORDER)."""

from __future__ import annotations

import math

MISSING = "–"  # a figure nobody measured: never a 0, which would be a measurement


def finite(value: object) -> float | None:
    """The value as a finite float, or None when it is missing or no number (None, "", "n/a", NaN)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)  # type: ignore[arg-type]  # str, int, Decimal... anything else is no figure
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def duration(seconds: object, parts: int = 2) -> str:
    """850 µs, 82 ms, 12.3 ms, 1.04 s, 12 s, 3 min 10 s, 2 h 05 min, 3 d 4 h; `parts=1` keeps the largest unit only
    (an age: 0.4 s, 12 s, 3 min, 5 h, 2 d). A negative duration (clocks apart) is said as 0 s."""
    s = finite(seconds)
    if s is None:
        return MISSING
    if s <= 0:
        return "0 s"
    if parts < 2:  # an age: to a tenth of a second under 10 s ("0.4 s ago"), not a latency ("400 ms")
        if s < 9.95:
            return f"{s:.1f} s"
    elif s < 0.000_999_5:
        return f"{s * 1_000_000:.0f} µs"
    elif s < 0.999_5:
        return f"{three_figures(s * 1000)} ms"
    elif s < 9.995:
        return f"{three_figures(s)} s"
    whole = int(round(s))
    if whole < 60:
        return f"{whole} s"
    # The largest unit and the next one down: (unit, its size, next unit, its size, the next one's width).
    if whole < 3600:
        unit, size, small, small_size, width = "min", 60, "s", 1, 2
    elif whole < 2 * 86400:
        unit, size, small, small_size, width = "h", 3600, "min", 60, 2
    else:
        unit, size, small, small_size, width = "d", 86400, "h", 3600, 1
    big, rest = divmod(whole, size)
    second = rest // small_size
    if parts < 2 or not second:
        return f"{big} {unit}"
    return f"{big} {unit} {second:0{width}d} {small}"


def milliseconds(ms: object) -> str:
    """A duration given in milliseconds (operations' and steps' timings)."""
    v = finite(ms)
    return MISSING if v is None else duration(v / 1000)


def microseconds(us: object) -> str:
    """A duration given in microseconds (ProxySQL's digest times)."""
    v = finite(us)
    return MISSING if v is None else duration(v / 1_000_000)


def ago(seconds: object) -> str:
    """How long ago, to the largest unit: "12 s ago", "3 min ago", "2 d ago"; "never" when it never happened."""
    return "never" if finite(seconds) is None else f"{duration(seconds, parts=1)} ago"


def percent(value: object, digits: int = 2) -> str:
    """A percentage (0-100) that never rounds a loss away nor a trace to nothing: 99.31 %, 100 % only when it is
    exactly 100 (99.9996 % keeps its digits), "<0.01 %" rather than a false 0, "0 %" for nothing at all."""
    v = finite(value)
    if v is None:
        return MISSING
    if v == 0:
        return "0 %"
    if v >= 100:
        return "100 %"
    floor = 10.0**-digits
    if 0 < v < floor:
        return f"<{floor:.{digits}f} %"
    for d in range(digits, 7):
        text = f"{v:.{d}f}"
        if float(text) < 100:
            return f"{text} %"
    return f"{v:.7f} %"


def share(fraction: object, digits: int = 1) -> str:
    """A fraction (0-1) as a percentage (percent())."""
    v = finite(fraction)
    return MISSING if v is None else percent(v * 100, digits)


def number(value: object) -> str:
    """A figure at a glance: 0.25, 12.3, 3,353 (exact below 100,000), 241 k, 21.2 M, 1.5 G; yes/no for a flag."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    v = finite(value)
    if v is None:
        return MISSING
    a = abs(v)
    if a >= 999_500_000:
        return f"{three_figures(v / 1e9)} G"
    if a >= 999_500:
        return f"{three_figures(v / 1e6)} M"
    if a >= 100_000:
        return f"{v / 1000:.0f} k"
    if a >= 100 or v == int(v):
        return f"{v:,.0f}"
    return f"{v:.1f}" if a >= 10 else f"{v:.2f}"


def count(value: object) -> str:
    """An exact count with separators: 1,234,567."""
    v = finite(value)
    return MISSING if v is None else f"{int(v):,}"


def three_figures(v: float) -> str:
    """Three significant figures, never in exponent form: 0.628, 2.91, 12.3, 960; 1,250 above."""
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}".removesuffix(".0")
    return f"{v:.3g}" if a >= 0.0001 else "0"
