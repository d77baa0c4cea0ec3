"""The report's charts: PNG images drawn on the server with matplotlib (Agg, no display, no pyplot state),
so they show the same in the console, in a mail client (inline, cid:) and in the PDF. Each function takes
the report's data (content.py) and returns (title, png bytes, width, height) or None when there is
nothing to draw.
"""

import io
from collections.abc import Mapping
from datetime import datetime, timezone as dt_timezone
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib import dates as mdates  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from django.utils import timezone  # noqa: E402

from . import fmt  # noqa: E402

# The report's data (content.py) as stored: a JSON document, its values any JSON.
Data = Mapping[str, Any]
Png = tuple[bytes, int, int]  # (png, width, height) in pixels

WIDTH_IN = 7.2
DPI = 150  # 1080 px wide, shown at 720
INK, MUTED, GRID = "#1d2633", "#6b7585", "#e3e7ee"
GREEN, AMBER, ORANGE, RED, BLUE, GREY = "#2f9e5b", "#e3a21a", "#e8772e", "#d64541", "#2f6fd6", "#b9c0cc"
COLOURS = {
    "synced": GREEN,
    "desynced": AMBER,
    "out": ORANGE,
    "unreachable": RED,
    "all": GREEN,
    "reduced": AMBER,
    "none": RED,
    "up": GREEN,
    "down": RED,
    "reachable": GREEN,
}
LEGEND = [
    ("synced", "Synced / up / all ONLINE"),
    ("desynced", "Desynced / reduced"),
    ("out", "out of service"),
    ("unreachable", "unreachable / none ONLINE / down"),
]
GOOD = {"synced", "all", "up", "reachable"}

matplotlib.rcParams.update(
    {
        "font.family": "DejaVu Sans",
        "font.size": 8,
        "axes.edgecolor": GRID,
        "axes.labelcolor": MUTED,
        "xtick.color": MUTED,
        "ytick.color": INK,
        "axes.titlesize": 9,
        "axes.titleweight": "bold",
        "axes.titlecolor": INK,
        "axes.titlelocation": "left",
        "legend.frameon": False,
        "legend.fontsize": 7.5,
    }
)


def _png(fig: Figure) -> Png:
    buf = io.BytesIO()
    FigureCanvasAgg(fig)
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    w, h = fig.get_size_inches()
    return buf.getvalue(), int(round(w * DPI)), int(round(h * DPI))


def _num(ts: float) -> float:
    return mdates.date2num(datetime.fromtimestamp(ts, tz=dt_timezone.utc))


def _time_axis(ax: Axes, start: float, end: float) -> None:
    tz = timezone.get_current_timezone()
    ax.set_xlim(_num(start), _num(end))
    days = (end - start) / 86400
    if days <= 1.5:
        ax.xaxis.set_major_locator(mdates.HourLocator(byhour=range(0, 24, 3), tz=tz))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=tz))
    else:
        ax.xaxis.set_major_locator(mdates.DayLocator(tz=tz))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%a %d", tz=tz))
        ax.xaxis.set_minor_locator(mdates.HourLocator(byhour=[12], tz=tz))


def _style(ax: Axes) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.grid(axis="y", color=GRID, linewidth=0.6)
    ax.set_axisbelow(True)


def _period_words(data: Data) -> tuple[str, str]:
    if data.get("rolling"):
        return ("this period", "the period before")
    return ("this day", "the day before") if data["period"] == "daily" else ("this week", "the week before")


# -- availability timeline ---------------------------------------------------------------------------------
def timeline(section: Data, data: Data) -> Png:
    rows = [("Service", section["service"]["timeline"])]
    rows += [(f"hg {h['hostgroup']} {h['role_label']}", h["timeline"]) for h in section["hostgroups"]]
    rows += [(b["name"], b["timeline"]) for b in section["backends"]]
    rows += [(f"ProxySQL {p['name']}", p["timeline"]) for p in section["proxysql"]]
    start, end = data["start"], data["end"]
    min_w = (end - start) / 500  # short events drawn this wide at least, to be seen
    fig = Figure(figsize=(WIDTH_IN, 0.9 + 0.28 * len(rows)))
    ax = fig.add_axes((0.25, 0.8 / (0.9 + 0.28 * len(rows)), 0.73, 1 - 1.05 / (0.9 + 0.28 * len(rows))))
    for i, (label, segments) in enumerate(reversed(rows)):
        ax.broken_barh([(_num(start), _num(end) - _num(start))], (i - 0.36, 0.72), facecolors="#f1f3f6")
        for a, b, cat in segments:
            width = b - a
            if cat not in GOOD and width < min_w:
                a, width = max(start, a - (min_w - width) / 2), min_w
            ax.broken_barh(
                [(_num(a), _num(a + width) - _num(a))], (i - 0.36, 0.72), facecolors=COLOURS.get(cat, GREY), linewidth=0
            )
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([label for label, _ in reversed(rows)])
    ax.set_ylim(-0.6, len(rows) - 0.4)
    _time_axis(ax, start, end)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.tick_params(axis="y", length=0)
    ax.grid(axis="x", color="white", linewidth=0.8)
    handles = [Patch(color=COLOURS[k], label=label) for k, label in LEGEND] + [Patch(color="#f1f3f6", label="no data")]
    fig.legend(
        handles=handles, loc="lower left", ncol=5, bbox_to_anchor=(0.01, 0.0), handlelength=1.2, columnspacing=1.0
    )
    return _png(fig)


# -- connection errors and traffic -----------------------------------------------------------------------------
def _bucket_x(data: Data, n: int, width: float) -> list[float]:
    return [_num(data["start"] + (i + 0.5) * width) for i in range(n)]


def conn_err(section: Data, data: Data) -> Png | None:
    ce = section["conn_err"]
    if not ce["total"] and not ce["previous"]:
        return None
    this_w, before_w = _period_words(data)
    width = ce["bucket_s"]
    n = len(ce["buckets"])
    fig = Figure(figsize=(WIDTH_IN, 2.4))
    ax = fig.add_axes((0.08, 0.18, 0.9, 0.64))
    x = _bucket_x(data, n, width)
    ax.bar(x, [v or 0 for v in ce["buckets"]], width=(width / 86400) * 0.8, color=RED, label=this_w)
    prev = ce.get("previous_buckets") or []
    if any(v for v in prev if v):
        ax.step(
            x[: len(prev)],
            [v or 0 for v in prev[:n]],
            where="mid",
            color=MUTED,
            linestyle="--",
            linewidth=1,
            label=before_w,
        )
    _time_axis(ax, data["start"], data["end"])
    _style(ax)
    ax.set_ylabel(f"errors per {fmt.duration(width)}")
    ax.set_title(
        f"Connection errors (ConnERR): {ce['total']:,}, {fmt.change_text(ce['total'], ce['previous'], 'count', before_w)}",
        pad=16,
    )
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, borderaxespad=0.1)
    return _png(fig)


def traffic(section: Data, data: Data) -> Png | None:
    t = section["traffic"]
    if not any(v for v in t["buckets_qps"] if v):
        return None
    this_w, before_w = _period_words(data)
    n = len(t["buckets_qps"])
    x = _bucket_x(data, n, t["bucket_s"])
    fig = Figure(figsize=(WIDTH_IN, 2.3))
    ax = fig.add_axes((0.08, 0.18, 0.9, 0.62))
    ax.plot(
        x, [v if v is not None else float("nan") for v in t["buckets_qps"]], color=BLUE, linewidth=1.6, label=this_w
    )
    prev = t.get("previous_buckets_qps") or []
    if any(v for v in prev if v):
        ax.plot(
            x[: len(prev)],
            [v if v is not None else float("nan") for v in prev[:n]],
            color=MUTED,
            linestyle="--",
            linewidth=1,
            label=before_w,
        )
    _time_axis(ax, data["start"], data["end"])
    _style(ax)
    ax.set_ylim(bottom=0)
    ax.set_ylabel("queries / s (all ProxySQL nodes)")
    ax.set_title(f"Traffic: {fmt.number(t['queries'])} queries, peak {fmt.number(t['peak_qps'])}/s", pad=16)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, borderaxespad=0.1)
    return _png(fig)


# -- writer changes ---------------------------------------------------------------------------------------------
def writer_changes(section: Data, data: Data) -> Png | None:
    rows = [w for w in section["writer_changes"] if w["interruption_ms"] is not None]
    if not rows:
        return None
    fig = Figure(figsize=(WIDTH_IN, 0.9 + 0.32 * len(rows)))
    h = 0.9 + 0.32 * len(rows)
    ax = fig.add_axes((0.27, 0.55 / h, 0.69, 1 - 0.9 / h))
    daily = data["period"] == "daily" and not data.get("rolling")
    labels = [
        f"{fmt.local(w['start']).strftime('%H:%M:%S' if daily else '%a %d %H:%M')} "
        f"{'switchover' if w['kind'] == 'switchover' else w['kind']}"
        for w in rows
    ]
    values = [w["interruption_ms"] for w in rows]
    colours = [GREEN if v < 864 else AMBER if v < 5000 else RED for v in values]
    ax.barh(range(len(rows)), values, color=colours, height=0.6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels)
    ax.invert_yaxis()
    ax.axvline(864, color=MUTED, linestyle=":", linewidth=1)
    ax.text(864, -0.5, "99.999 % of a day: 864 ms ", color=MUTED, fontsize=7, va="bottom", ha="right")
    for i, v in enumerate(values):
        ax.text(v, i, f" {fmt.duration(v / 1000)}", va="center", fontsize=7.5, color=INK)
    ax.set_xlim(0, max(max(values) * 1.25, 1000))
    ax.set_xlabel("writes held (ms)")
    _style(ax)
    ax.grid(axis="x", color=GRID, linewidth=0.6)
    ax.grid(axis="y", visible=False)
    return _png(fig)


# -- digests ----------------------------------------------------------------------------------------------------
def digests(section: Data, data: Data) -> Png | None:
    dg = section.get("digests") or {}
    rows = dg.get("rows") or []
    if not rows:
        return None
    this_w, before_w = _period_words(data)
    rows = rows[:10]
    h = 0.8 + 0.3 * len(rows)
    fig = Figure(figsize=(WIDTH_IN, h))
    ax = fig.add_axes((0.42, 0.5 / h, 0.55, 1 - 0.85 / h))
    y = range(len(rows))
    ax.barh([i - 0.18 for i in y], [r["total_s"] for r in rows], height=0.36, color=BLUE, label=this_w)
    if dg.get("has_previous"):
        ax.barh([i + 0.18 for i in y], [r["prev_total_s"] for r in rows], height=0.36, color=GREY, label=before_w)
    ax.set_yticks(list(y))
    ax.set_yticklabels([_sql_label(r["text"]) for r in rows], fontsize=7, family="DejaVu Sans Mono")
    for i, r in enumerate(rows):
        if r["verdict"]:
            ax.text(r["total_s"], i - 0.18, f"  {r['verdict']}", va="center", fontsize=7, color=RED, fontweight="bold")
    ax.invert_yaxis()
    ax.set_xlabel("total execution time (s)")
    _style(ax)
    ax.grid(axis="x", color=GRID, linewidth=0.6)
    ax.grid(axis="y", visible=False)
    ax.legend(loc="lower right")
    return _png(fig)


def _sql_label(text: str | None, n: int = 44) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


# -- mirror -----------------------------------------------------------------------------------------------------
def mirror(section: Data, data: Data) -> Png | None:
    m = section["mirror"]
    if not m["has_data"]:
        return None
    fig = Figure(figsize=(WIDTH_IN, 2.3))
    ax = fig.add_axes((0.08, 0.18, 0.9, 0.62))
    palette = [BLUE, "#8a4fd6", "#1c9aa6", ORANGE]
    for i, node in enumerate(m["nodes"]):
        values = node["ratio_buckets"]
        x = _bucket_x(data, len(values), m["bucket_s"])
        ax.plot(
            x,
            [v if v is not None else float("nan") for v in values],
            color=palette[i % len(palette)],
            linewidth=1.4,
            label=node["name"],
        )
    ax.axhline(m["warn_pct"], color=RED, linestyle=":", linewidth=1)
    ax.text(
        _num(data["start"]),
        m["warn_pct"],
        f" saturated above {m['warn_pct']:.0f} %",
        color=RED,
        fontsize=7,
        va="bottom",
    )
    _time_axis(ax, data["start"], data["end"])
    _style(ax)
    ax.set_ylim(0, 105)
    ax.set_ylabel("% of the queue limit (max)")
    ax.set_title("Mirror queue, highest per bucket", pad=16)
    ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=4, borderaxespad=0.1)
    return _png(fig)


# -- fleet ------------------------------------------------------------------------------------------------------
def fleet_availability(fleet: Data, data: Data) -> Png | None:
    listed = fleet["clusters"][: fleet["listed"]] if fleet.get("tail") else fleet["clusters"]  # read finely
    rows = [r for r in listed if r["availability"] is not None]
    if not rows:
        return None
    rows = sorted(rows, key=lambda r: r["availability"])[:25]
    h = 0.8 + 0.28 * len(rows)
    fig = Figure(figsize=(WIDTH_IN, h))
    ax = fig.add_axes((0.25, 0.5 / h, 0.7, 1 - 0.85 / h))
    values = [r["availability"] for r in rows]
    low = min(values)
    floor = 99.0 if low >= 99.0 else (95.0 if low >= 95 else 0.0)
    colours = [GREEN if v >= 99.99 else AMBER if v >= 99.9 else RED for v in values]
    ax.barh(range(len(rows)), [v - floor for v in values], left=floor, color=colours, height=0.6)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([r["name"] for r in rows])
    ax.invert_yaxis()
    for i, v in enumerate(values):
        ax.text(v, i, f" {fmt.percent(v)}", va="center", fontsize=7.5)
    ax.set_xlim(floor, 100 + (100 - floor) * 0.12)
    ax.set_xlabel("service availability (%)")
    _style(ax)
    ax.grid(axis="x", color=GRID, linewidth=0.6)
    ax.grid(axis="y", visible=False)
    return _png(fig)


def render_all(data: Data) -> list[tuple[str, str, bytes, int, int]]:
    """[(key, title, png, width, height)] for every chart of the report."""
    out: list[tuple[str, str, bytes, int, int]] = []

    def add(key: str, title: str, result: Png | None) -> None:
        if result is not None:
            png, w, h = result
            out.append((key, title, png, w, h))

    if data.get("fleet"):
        add("fleet-availability", "Service availability per cluster", fleet_availability(data["fleet"], data))
        fd = data["fleet"].get("digests")
        if fd:
            add("fleet-digests", "Top query digests by total time, whole fleet", digests({"digests": fd}, data))
    for s in data["clusters"]:
        if not s.get("detailed", True):
            continue
        p = f"c{s['id']}-"
        add(p + "timeline", f"{s['name']}: availability over time", timeline(s, data))
        add(p + "writer", f"{s['name']}: writer interruption per change", writer_changes(s, data))
        add(p + "traffic", f"{s['name']}: traffic", traffic(s, data))
        add(p + "connerr", f"{s['name']}: connection errors", conn_err(s, data))
        add(p + "digests", f"{s['name']}: top query digests by total time", digests(s, data))
        add(p + "mirror", f"{s['name']}: mirror queue", mirror(s, data))
    return out
