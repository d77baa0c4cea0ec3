"""The report's numbers on known history: availability, writer interruption, trends, saturation, reachability."""

from datetime import date, timedelta

import pytest

from apps.audit.actor import Actor
from apps.audit.services import verify_chain
from apps.monitoring.models import HOUR, MINUTE
from apps.operations.models import Operation, OperationStep
from apps.reports import content, fmt, periods, services
from apps.reports.history import as_dt
from lab.report_history import _append_event

from .conftest import INTERVAL, epoch

pytestmark = pytest.mark.django_db
H = 3600


def section(cluster, span):
    return services.build_data(cluster, "daily", span)["clusters"][0]


def test_ten_minutes_unreachable_out_of_a_day_is_99_31_percent(report_cluster, history, day):
    s1, s2, _ = report_cluster.servers_
    a, b = day.start.timestamp(), day.end.timestamp()
    down = (a + 9 * H, a + 9 * H + 600)
    history.backend(s1, a, b, fn=lambda t: {"reachable": False, "local_state": None} if down[0] <= t < down[1] else {})
    history.backend(s2, a, b, step=60, resolution=MINUTE)
    backends = {x["name"]: x for x in section(report_cluster, day)["backends"]}
    one = backends[str(s1)]
    assert one["durations"]["unreachable"] == pytest.approx(600)
    assert one["observed_s"] == pytest.approx(86400)
    assert fmt.percent(one["availability"]) == "99.31 %"
    assert one["stretches"] == [
        {"category": "unreachable", "start": down[0], "end": down[1], "seconds": 600.0, "why": "the poll failed"}
    ]
    assert fmt.percent(backends[str(s2)]["availability"]) == "100 %"


def test_finest_resolution_per_stretch_and_what_a_rollup_bucket_counts(report_cluster, history, day):
    """Minute rollups where raw polls are gone, raw polls after: a 20-second blip read from a rollup counts as
    its whole minute; the same blip in raw polls counts 20 seconds."""
    s1 = report_cluster.servers_[0]
    a, b = day.start.timestamp(), day.end.timestamp()
    half = a + 12 * H
    blip_old, blip_new = a + 3 * H + 10, half + 3 * H + 10
    history.backend(
        s1, a, half, step=60, resolution=MINUTE, fn=lambda t: {"reachable": False} if t <= blip_old < t + 60 else {}
    )
    history.backend(s1, half, b, fn=lambda t: {"reachable": False} if blip_new <= t < blip_new + 20 else {})
    s = section(report_cluster, day)
    one = next(x for x in s["backends"] if x["id"] == s1.pk)
    assert one["durations"]["unreachable"] == pytest.approx(60 + 20)
    assert s["coverage"]["resolutions"] == {
        "raw polls": pytest.approx(12 * H),
        "1-minute rollups": pytest.approx(12 * H),
    }


def _switchover(cluster, old, new, at, drain_to_move_ms, state="done"):
    op = Operation.objects.create(
        cluster=cluster,
        kind="switchover",
        state=state,
        title=f"Switchover {old} → {new}",
        actor="otto",
        plan={
            "kind": "switchover",
            "cluster_id": cluster.pk,
            "title": "t",
            "guards": [],
            "steps": [],
            "options": {"old_writer": old.pk, "new_writer": new.pk},
        },
        started_at=as_dt(at),
        finished_at=as_dt(at + 0.2),
        timings={"drain": 5.0, "wait_drain": 30.0, "move": 12.0, "total_ms": 200.0},
    )
    t = at + 0.003
    for i, (key, ms) in enumerate([("drain", 5.0), ("wait_drain", None), ("move", 12.0)]):
        if key == "move":
            start, end = at + 0.003 + drain_to_move_ms / 1000 - 0.012, at + 0.003 + drain_to_move_ms / 1000
        else:
            start, end = t, t + (ms or 30) / 1000
        OperationStep.objects.create(
            operation=op,
            index=i,
            key=key,
            title=key,
            state="done",
            started_at=as_dt(start),
            finished_at=as_dt(end),
            duration_ms=(end - start) * 1000,
        )
        t = end
    return op


def test_writer_interruption_of_a_planned_switchover_from_its_steps(report_cluster, history, day):
    s1, s2, _ = report_cluster.servers_
    a, b = day.start.timestamp(), day.end.timestamp()
    history.healthy(a, b, step=3600, resolution=HOUR)
    _switchover(report_cluster, s1, s2, a + 14 * H + 307, 82)
    s = section(report_cluster, day)
    [w] = s["writer_changes"]
    assert w["interruption_ms"] == pytest.approx(82, abs=0.5)
    assert (w["old"], w["new"], w["changed"]) == (str(s1), str(s2), True)
    assert "drain step start" in w["how"]
    assert (
        s["summary"]["headline"] == "lab-east: 100 % available; one planned switchover, 82 ms of writer interruption."
    )


def _failover(cluster, old, new, moved):
    op = Operation.objects.create(
        cluster=cluster,
        kind="failover",
        state="done",
        title="Failover",
        actor="automatic failover",
        plan={
            "kind": "failover",
            "cluster_id": cluster.pk,
            "title": "f",
            "guards": [],
            "steps": [{"key": "inventory", "params": {"old": old.pk, "new": new.pk}}],
        },
        started_at=as_dt(moved - 0.03),
        finished_at=as_dt(moved + 0.01),
        timings={"total_ms": 40.0},
    )
    OperationStep.objects.create(
        operation=op,
        index=0,
        key="move",
        title="move",
        state="done",
        started_at=as_dt(moved - 0.02),
        finished_at=as_dt(moved),
        duration_ms=20,
    )
    return op


def test_failover_interruption_runs_from_the_last_good_poll_to_the_new_writer(report_cluster, history, day):
    """Issue 23: the writer was gone from some moment after its last good poll, not from the first failed one
    (a poll interval later) nor from the operation's start: the report counts from the last good poll and
    says so."""
    s1, s2, s3 = report_cluster.servers_
    a, b = day.start.timestamp(), day.end.timestamp()
    crash = a + 3 * H + 5  # polls at 10 s: the last good poll is at +0, the first failed one at +10
    moved = crash + 5 + 2 * INTERVAL + 0.73
    history.backend(s1, a, b, fn=lambda t: {"reachable": False} if t >= crash else {})
    _failover(report_cluster, s1, s2, moved)
    [w] = section(report_cluster, day)["writer_changes"]
    last_good = a + 3 * H
    assert w["interruption_ms"] == pytest.approx((moved - last_good) * 1000, abs=1)
    assert w["how"].startswith(
        f"from the last good poll of the old writer ({fmt.clock(last_good)}; its first failed "
        f"poll at {fmt.clock(last_good + INTERVAL)}) to the new writer ONLINE"
    )


def test_failover_before_any_failed_poll_still_counts_from_the_last_good_poll(report_cluster, history, day):
    """The writer died between two polls and the failover (a manual one, say) moved it before the next poll: the
    operation's own 40 ms were counted as the whole interruption."""
    s1, s2, s3 = report_cluster.servers_
    a, b = day.start.timestamp(), day.end.timestamp()
    moved = a + 3 * H + 2.5  # polls at 10 s: the last good poll at +0, the next at +10 already fails
    history.backend(s1, a, b, fn=lambda t: {"reachable": False} if t > moved else {})
    _failover(report_cluster, s1, s2, moved)
    [w] = section(report_cluster, day)["writer_changes"]
    assert w["interruption_ms"] == pytest.approx(2500, abs=1)
    assert "last good poll of the old writer" in w["how"] and "no failed poll before the failover" in w["how"]


def test_service_down_while_the_writer_hostgroup_has_no_online_writer(report_cluster, history, day):
    span = periods.Span(day.start + timedelta(hours=8), day.start + timedelta(hours=12))  # four hours
    a, b = span.start.timestamp(), span.end.timestamp()
    gap = (a + 2 * H, a + 2 * H + 120)  # two one-minute buckets in which the writer was not ONLINE
    for s in report_cluster.servers_:
        history.backend(s, a, b, step=60, resolution=MINUTE)
    for n in report_cluster.nodes_:
        history.proxysql(n, a, b, step=60, resolution=MINUTE)
        history.pool(
            n,
            a,
            b,
            step=60,
            resolution=MINUTE,
            fn=lambda t, hg, s: {"status": "OFFLINE_SOFT"} if hg == 100 and gap[0] <= t < gap[1] else {},
        )
    s = section(report_cluster, span)
    assert s["service"]["down_s"] == pytest.approx(120)
    assert s["service"]["stretches"][0]["why"] == "no usable ONLINE writer on px-1, px-2"
    writer = next(h for h in s["hostgroups"] if h["hostgroup"] == 100)
    assert writer["durations"]["none"] == pytest.approx(120) and writer["longest_none_s"] == pytest.approx(120)
    reader = next(h for h in s["hostgroups"] if h["hostgroup"] == 101)
    assert reader["durations"]["all"] == pytest.approx(4 * H)
    assert fmt.percent(s["service"]["availability"]) == "99.17 %"
    assert s["summary"]["headline"] == "lab-east: 99.17 % available; no writer change; 2 min of service interruption."


def test_connection_errors_and_their_trend_against_the_day_before(report_cluster, history, day):
    prev = day.previous()
    a, b = day.start.timestamp(), day.end.timestamp()
    pa, pb = prev.start.timestamp(), prev.end.timestamp()
    node = report_cluster.nodes_[0]
    history.proxysql(node, pa, pb, step=60, resolution=MINUTE, fn=lambda t: {"conn_err_ps": 0.01})  # 864
    history.proxysql(
        node,
        a,
        b,
        step=60,
        resolution=MINUTE,
        fn=lambda t: {"conn_err_ps": 0.1 if a + 11 * H <= t < a + 11 * H + 3600 else 0.0},
    )  # 360
    history.pool(
        node,
        a,
        b,
        step=60,
        resolution=MINUTE,
        fn=lambda t, hg, s: (
            {"conn_err_ps": 0.1} if hg == 101 and s.port == 3312 and a + 11 * H <= t < a + 12 * H else {}
        ),
    )
    s = section(report_cluster, day)
    ce = s["conn_err"]
    assert (ce["total"], ce["previous"], ce["change_pct"]) == (360, 864, pytest.approx(-58.3, abs=0.1))
    assert ce["buckets"][11] == 360 and sum(v or 0 for v in ce["buckets"]) == 360
    assert ce["worst_bucket"]["start"] == a + 11 * H
    assert ce["per_backend"] == [{"name": "127.0.0.1:3312", "hostgroups": [101], "total": 360}]
    assert any(
        p["text"] == "360 connection errors (ConnERR), 58 % fewer than the day before." for p in s["summary"]["points"]
    )


def test_mirror_saturation_and_proxysql_unreachable_periods(report_cluster, history, day):
    a, b = day.start.timestamp(), day.end.timestamp()
    p1, p2 = report_cluster.nodes_
    full = (a + 16 * H, a + 16 * H + 240)
    history.proxysql(
        p1,
        a,
        b,
        step=30,
        fn=lambda t: {
            "mirror_queue_length": 110000 if full[0] <= t < full[1] else 500,
            "mirror_max_queue_length": 32000,
            "mysql_threads": 4,
            "mirror_concurrency": 8,
            "mirror_max_concurrency": 16,
        },
    )
    out = (a + 19 * H + 40 * 60, a + 19 * H + 43 * 60 + 30)
    history.proxysql(
        p2, a, b, step=30, fn=lambda t: {"reachable": False, "questions_ps": None} if out[0] <= t < out[1] else {}
    )
    s = section(report_cluster, day)
    m = s["mirror"]
    assert m["count"] == 1 and m["stretches"][0]["seconds"] == pytest.approx(240)
    assert m["stretches"][0]["peak_pct"] == pytest.approx(85.9, abs=0.1) and m["stretches"][0]["node"] == "px-1"
    px = {p["name"]: p for p in s["proxysql"]}
    assert px["px-2"]["unreachable_s"] == pytest.approx(210) and len(px["px-2"]["stretches"]) == 1
    assert px["px-1"]["unreachable_s"] == 0
    texts = [p["text"] for p in s["summary"]["points"]]
    assert "ProxySQL px-2 unreachable for 3 min 30 s." in texts
    assert any(t.startswith("Mirror queue saturated one time (4 min)") for t in texts)


def test_drift_found_and_fixed_from_the_audit_log_and_read_pool_actions(report_cluster, day):
    at = day.start + timedelta(hours=21)
    # Events dated inside the period (record() stamps "now"): appended to the chain the same way.
    _append_event(
        at, "drift found", cluster=report_cluster, target="px-2", outcome="failure", details={"summary": "weight"}
    )
    _append_event(
        at + timedelta(minutes=12),
        "drift fixed",
        cluster=report_cluster,
        target="px-2",
        details={"summary": "weight back"},
    )
    _append_event(
        at + timedelta(minutes=13),
        "read-pool rules (dry run)",
        cluster=report_cluster,
        outcome="dry_run",
        details={"would_change": {"2:101": ["OFFLINE_SOFT", "recv queue 180"]}},
    )
    _append_event(
        day.start - timedelta(minutes=1), "drift found", cluster=report_cluster, target="px-1"
    )  # the day before
    s = section(report_cluster, day)
    assert (s["drift"]["found"], s["drift"]["fixed"]) == (1, 1)
    assert [e["what"] for e in s["drift"]["events"]] == ["weight", "weight back"]
    assert s["read_pool"]["dry_run_count"] == 1 and "OFFLINE_SOFT" in s["read_pool"]["dry_runs"][0]["would"]
    assert verify_chain()[1] is None


def test_no_history_says_so(report_cluster, day):
    s = section(report_cluster, day)
    assert s["service"]["availability"] is None
    assert s["summary"]["headline"] == "lab-east: no monitoring data for this period."


def test_fleet_report_ranks_clusters_least_available_first(report_cluster, history, day):
    from apps.fleet.models import Cluster

    other = Cluster.objects.create(name="quiet-west", writer_hostgroup=10, reader_hostgroup=11)
    a, b = day.start.timestamp(), day.end.timestamp()
    history.healthy(a, b, step=3600, resolution=HOUR)
    data = services.build_data(None, "daily", day)
    assert [r["name"] for r in data["fleet"]["clusters"]] == ["lab-east", "quiet-west"]
    assert data["fleet"]["clusters"][1]["availability"] is None
    assert data["summary"]["headline"].startswith("The fleet: 100 % available across two clusters")
    assert other.pk in [s["id"] for s in data["clusters"]]


def test_a_big_fleet_lists_its_worst_clusters_read_finely_and_summarises_the_tail(
    report_cluster, history, day, monkeypatch
):
    """Above FLEET_TABLE_ROWS clusters, every cluster is first read from its hourly rollups (where a
    2-minute writer outage counts as its whole hour), the worst again at the finest resolution kept: the
    table's figures are those of the polls, the others are one line."""
    from apps.fleet.models import Cluster

    Cluster.objects.create(name="quiet-west", writer_hostgroup=10, reader_hostgroup=11)
    a, b = day.start.timestamp(), day.end.timestamp()
    outage = (a + 5 * H + 600, a + 5 * H + 720)  # the writer away for 2 minutes
    s1, s2, s3 = report_cluster.servers_
    gone = {"reachable": False, "local_state": None, "primary": None, "ready": None}
    for step, resolution in ((H, HOUR), (60, MINUTE)):  # both levels, as the rollups keep them
        history.backend(
            s1, a, b, step, resolution, fn=lambda t, step=step: gone if t < outage[1] and t + step > outage[0] else {}
        )
        for server in (s2, s3):
            history.backend(server, a, b, step, resolution)
        for node in report_cluster.nodes_:
            history.proxysql(node, a, b, step, resolution)
            history.pool(node, a, b, step, resolution)

    monkeypatch.setattr(content, "FLEET_TABLE_ROWS", 1)
    data = services.build_data(None, "daily", day)
    fleet = data["fleet"]
    assert fleet["listed"] == 1 and [r["name"] for r in fleet["clusters"]] == ["lab-east", "quiet-west"]
    assert fleet["clusters"][0]["down_s"] == 120  # read again from the 1-minute rows, not the hour
    assert fleet["tail"] == {
        "clusters": 1,
        "least_availability": None,
        "no_data": 1,
        "down_s": 0,
        "writer_changes": 0,
        "conn_err": 0,
        "mirror_saturations": 0,
        "drift_found": 0,
        "backends_below_100": 0,
        "proxysql_unreachable_s": 0,
        "hourly_only": 1,
    }
    assert [s["name"] for s in data["clusters"]] == ["lab-east"]  # only the listed clusters' sections are kept
    hourly = content.ClusterSection(report_cluster, a, b, *epoch(day.previous()), 3600, hourly_only=True).build()
    assert hourly["service"]["down_s"] == H  # what the first pass saw: worse, never better

    monkeypatch.setattr(content, "FLEET_TABLE_ROWS", 25)  # a small fleet: one pass, at the finest resolution
    assert services.build_data(None, "daily", day)["fleet"]["clusters"][0] == fleet["clusters"][0]

    monkeypatch.setattr(content, "FLEET_TABLE_ROWS", 1)
    report = services.build_report(None, "daily", day)
    assert "1 more cluster, the least of them not available (1 with no monitoring data)" in report.html
    assert "quiet-west" not in report.html.split("data-tail")[0].split("<table")[1]  # not a row of the table


def test_daily_periods_are_local_midnights_and_the_period_before_has_the_same_days(settings):
    settings.TIME_ZONE = "Europe/Paris"
    from django.utils import timezone

    timezone.activate("Europe/Paris")
    try:
        span = periods.ending_on("daily", date(2026, 3, 30))  # 29 March: clocks go forward, a 23 h day
        assert span.seconds == 23 * 3600
        assert span.previous().seconds == 24 * 3600 and span.previous().end == span.start
        week = periods.last_complete("weekly", span.end + timedelta(days=2))
        assert timezone.localtime(week.start).weekday() == 0 and (week.end - week.start).days in (6, 7)
    finally:
        timezone.deactivate()


def test_content_definitions_match_the_category_names():
    assert content.BACKEND_CATS == ("synced", "desynced", "out", "unreachable")


def test_an_interruption_inside_a_switchover_counts_its_measured_hold_not_a_poll_interval(report_cluster, history, day):
    """The real run: one poll caught the drain of a switchover whose writes were held 59 ms, and the report
    counted a whole poll interval of "no usable ONLINE writer". Inside an operation the operation's own
    window counts; an interruption no operation explains stays as the polls sampled it; the report says
    which is which."""
    s1, s2, _ = report_cluster.servers_
    span = periods.Span(day.start + timedelta(hours=14), day.start + timedelta(hours=15))
    a, b = span.start.timestamp(), span.end.timestamp()
    during, alone = a + 600, a + 1800  # two polls that saw the writer hostgroup without a usable writer
    for s in report_cluster.servers_:
        history.backend(s, a, b)
    for n in report_cluster.nodes_:
        history.proxysql(n, a, b)
        history.pool(
            n,
            a,
            b,
            writer=lambda t: s1 if t < during else s2,
            fn=lambda t, hg, s: {"status": "OFFLINE_SOFT"} if hg == 100 and t in (during, alone) else {},
        )
    op = _switchover(report_cluster, s1, s2, during - 0.02, 59)  # the poll ran 17 ms into the 59 ms hold

    data = services.build_data(report_cluster, "daily", span)
    s = data["clusters"][0]
    svc = s["service"]
    assert svc["down_s"] == pytest.approx(0.059 + INTERVAL, abs=0.001)  # not 2 x 10 s
    assert (svc["measured_s"], svc["sampled_s"], svc["measured_ops"]) == (pytest.approx(0.059, abs=0.001), INTERVAL, 1)
    held, sampled = svc["stretches"]
    assert held["seconds"] == pytest.approx(0.059, abs=0.001) and held["start"] == pytest.approx(
        during - 0.017, abs=0.001
    )
    assert [m["id"] for m in held["measured_by"]] == [op.pk] and held["sampled_s"] == 0
    assert "drain step start" in held["measured_by"][0]["how"]
    assert (sampled["start"], sampled["seconds"], sampled["measured_by"]) == (alone, INTERVAL, [])
    writer = next(h for h in s["hostgroups"] if h["hostgroup"] == 100)
    assert writer["durations"]["none"] == pytest.approx(0.059 + INTERVAL, abs=0.001)
    [change] = s["writer_changes"]
    assert change["interruption_ms"] == pytest.approx(59, abs=0.5) and change["polls_saw_none_s"] == INTERVAL
    point = next(p["text"] for p in s["summary"]["points"] if p["text"].startswith("Service interrupted"))
    assert point.startswith(
        "Service interrupted for 10 s in total (59 ms measured by the operation's own clock, "
        "10 s sampled by polls every 10 s)"
    )

    report = services.build_report(report_cluster, "daily", span, actor=Actor.system())
    assert report.html.count('data-source="measured"') == 1 and report.html.count('data-source="sampled"') == 1
    assert (
        f'measured by <a href="{settings_base()}{op.get_absolute_url()}">planned switchover #{op.pk}</a>' in report.html
    )
    assert "sampled: polls every 10 s" in report.html


def test_a_gap_longer_than_the_operation_stays_sampled(report_cluster, history, day):
    """A maintenance drain of the only writer: the writer hostgroup stays empty long after the drain operation
    ended. The operation does not explain that: the polls' figure stands."""
    span = periods.Span(day.start + timedelta(hours=14), day.start + timedelta(hours=15))
    a, b = span.start.timestamp(), span.end.timestamp()
    out = (a + 600, a + 900)
    for s in report_cluster.servers_:
        history.backend(s, a, b)
    for n in report_cluster.nodes_:
        history.proxysql(n, a, b)
        history.pool(
            n, a, b, fn=lambda t, hg, s: {"status": "OFFLINE_SOFT"} if hg == 100 and out[0] <= t < out[1] else {}
        )
    drain = Operation.objects.create(
        cluster=report_cluster,
        kind="drain",
        state="done",
        title="Drain",
        actor="otto",
        plan={"kind": "drain", "steps": []},
        started_at=as_dt(out[0] - 0.01),
        finished_at=as_dt(out[0] + 0.2),
        timings={"total_ms": 210.0},
    )
    svc = section(report_cluster, span)["service"]
    assert svc["down_s"] == pytest.approx(300) and svc["measured_s"] == 0 and svc["measured_ops"] == 0
    assert svc["stretches"][0]["measured_by"] == [] and drain.pk


def settings_base():
    from django.conf import settings

    return settings.REPORTS_BASE_URL.rstrip("/")
