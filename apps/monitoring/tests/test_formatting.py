"""One way to say a duration, a percentage and a figure (apps/monitoring/formatting.py), and the pages' filters, the
reports and the commands saying them through it (issue 35: three copies printed the same time three ways)."""

from apps.digests.templatetags import digest_format
from apps.monitoring import formatting
from apps.monitoring.templatetags import monitoring as monitoring_tags
from apps.reports import fmt
from apps.reports.templatetags import report_format


def test_durations_from_microseconds_to_days():
    said = {
        v: formatting.duration(v)
        for v in (None, -3, 0, 0.00085, 0.082, 0.0123, 0.9996, 1.04, 1.1, 12.3, 59.6, 190, 7500, 3 * 86400 + 4 * 3600)
    }
    assert said == {
        None: "–",
        -3: "0 s",
        0: "0 s",
        0.00085: "850 µs",
        0.082: "82 ms",
        0.0123: "12.3 ms",
        0.9996: "1 s",
        1.04: "1.04 s",
        1.1: "1.1 s",
        12.3: "12 s",
        59.6: "1 min",
        190: "3 min 10 s",
        7500: "2 h 05 min",
        3 * 86400 + 4 * 3600: "3 d 4 h",
    }
    assert [formatting.duration(v, parts=1) for v in (190, 7500, 3 * 86400 + 4 * 3600)] == ["3 min", "2 h", "3 d"]
    # An age under 10 s in seconds to a tenth (the overview's chips: "0.4 s", as before the one module), not "400 ms"
    assert [formatting.duration(v, parts=1) for v in (0.4, 3.3, 9.96, 12.4)] == ["0.4 s", "3.3 s", "10 s", "12 s"]
    assert formatting.milliseconds(41200.0) == "41 s" and formatting.microseconds(12_300) == "12.3 ms"
    assert formatting.ago(None) == "never" and formatting.ago(4000) == "1 h ago"


def test_percentages_never_round_a_loss_away_nor_a_trace_to_nothing():
    assert [formatting.percent(v) for v in (None, 0, 0.004, 99.31, 99.9996, 100)] == [
        "–",
        "0 %",
        "<0.01 %",
        "99.31 %",
        "99.9996 %",
        "100 %",
    ]
    assert [formatting.share(v, digits=0) for v in (0.42, 0.004, 0.996, "")] == ["42 %", "<1 %", "99.6 %", "–"]


def test_figures_at_a_glance():
    assert [
        formatting.number(v)
        for v in (True, None, "", float("nan"), 0.25, 12.34, 3353.47, 12_345, 241_361.7, 21_151_075.5, 1.5e9)
    ] == ["yes", "–", "–", "–", "0.25", "12.3", "3,353", "12,345", "241 k", "21.2 M", "1.5 G"]
    assert formatting.count(1234567) == "1,234,567"


def test_every_page_report_and_message_says_them_the_same_way():
    """The same two hours and five minutes, as the monitoring, digests and reports pages and the report text say it:
    before, "2 h" (an age), "2 h 5 min" (a digest) and "2 h 05 min" (a report); a share 0.429 was "43%" and "42.9 %"."""
    seconds = 7500
    assert (
        digest_format.duration_us(seconds * 1_000_000)
        == report_format.dur(seconds)
        == fmt.duration(seconds)
        == "2 h 05 min"
    )
    assert monitoring_tags.age(seconds) == "2 h"  # an age keeps its largest unit, on purpose
    assert monitoring_tags.num(241_361.7) == report_format.num(241_361.7) == "241 k"
    assert digest_format.share(0.429) == "42.9 %" and monitoring_tags.pct(0.429) == "43 %"
    assert report_format.pct(42.9) == "42.90 %" and report_format.share(3, 7) == "42.86 %"
    assert {monitoring_tags.num(None), digest_format.duration_us(None), report_format.dur(None)} == {formatting.MISSING}
