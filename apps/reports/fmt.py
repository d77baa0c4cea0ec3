"""How a report says numbers: durations a person reads at a glance, percentages that never round a
loss away (99.9996 % is not "100 %"), counts in words when small."""
from datetime import datetime, timedelta, timezone as dt_timezone

from django.utils import timezone


def duration(seconds):
    """82 ms, 1.04 s, 12 s, 3 min 10 s, 2 h 05 min, 3 d 4 h."""
    if seconds is None:
        return "—"
    s = float(seconds)
    if s < 0:
        s = 0.0
    if s < 1:
        return f"{s * 1000:.0f} ms"
    if s < 10:
        return f"{s:.2f} s".replace(".00 s", " s")
    if s < 60:
        return f"{s:.0f} s"
    if s < 3600:
        m, sec = divmod(int(round(s)), 60)
        return f"{m} min {sec:02d} s" if sec else f"{m} min"
    if s < 2 * 86400:
        h, rest = divmod(int(round(s)), 3600)
        m = rest // 60
        return f"{h} h {m:02d} min" if m else f"{h} h"
    d, rest = divmod(int(round(s)), 86400)
    h = rest // 3600
    return f"{d} d {h} h" if h else f"{d} d"


def percent(value, digits=2):
    """99.31 %; 100 % only when it is exactly 100; more digits rather than rounding up to 100."""
    if value is None:
        return "—"
    if value >= 100:
        return "100 %"
    for d in range(digits, 6):
        text = f"{value:.{d}f}"
        if float(text) < 100:
            return f"{text} %"
    return f"{value:.6f} %"


def change(now, before):
    """Relative change as a percentage (None when there is nothing to compare with)."""
    if before is None or now is None:
        return None
    if before == 0:
        return None if now == 0 else float("inf")
    return (now - before) / before * 100


def change_text(now, before, unit_word="", period_word="the period before"):
    c = change(now, before)
    if c is None:
        return f"as many as {period_word}" if now == before and now is not None else "nothing to compare with"
    if c == float("inf"):
        return f"none {period_word}"
    if abs(c) < 1:
        return f"about the same as {period_word}"
    return f"{abs(c):.0f} % {'more' if c > 0 else 'fewer' if unit_word == 'count' else 'less'} than {period_word}"


def count_word(n, singular, plural=None):
    words = {0: "no", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight",
             9: "nine", 10: "ten"}
    word = words.get(n, f"{n:,}")
    return f"{word} {singular if n == 1 else (plural or singular + 's')}"


def number(value):
    if value is None:
        return "—"
    v = float(value)
    if abs(v) >= 1e9:
        return f"{v / 1e9:.1f} G"
    if abs(v) >= 1e6:
        return f"{v / 1e6:.1f} M"
    if abs(v) >= 1e4:
        return f"{v / 1e3:.0f} k"
    if v == int(v):
        return f"{int(v):,}"
    return f"{v:,.1f}"


def local(ts):
    """Epoch seconds -> aware local datetime (settings.TIME_ZONE)."""
    if ts is None:
        return None
    return timezone.localtime(datetime.fromtimestamp(ts, tz=dt_timezone.utc))


def clock(ts, with_day=False):
    t = local(ts)
    if t is None:
        return "—"
    return t.strftime("%a %d %b %H:%M:%S" if with_day else "%H:%M:%S")


def period_label(start, end, period, rolling=False):
    a, b = timezone.localtime(start), timezone.localtime(end)
    if rolling:
        return f"{'24 hours' if period == 'daily' else '7 days'} to {b:%a %d %b %Y %H:%M}"
    last = b - timedelta(seconds=1)
    if period == "daily":
        return f"{a:%A %d %B %Y}".replace(" 0", " ")
    return f"{a:%a %d %b} – {last:%a %d %b %Y}".replace(" 0", " ")


def ms(value):
    """Milliseconds with three significant figures: 0.628 ms, 2.91 ms, 960 ms, 1,250 ms."""
    if value is None:
        return "—"
    v = float(value)
    if v >= 100:
        return f"{v:,.0f} ms"
    if v >= 10:
        return f"{v:.1f} ms"
    if v >= 1:
        return f"{v:.2f} ms"
    return f"{v:.3f} ms"


def before_words(period, rolling=False):
    if rolling:
        return "the period before"
    return "the day before" if period == "daily" else "the week before"
