"""The incident view: audit events, operations with their steps, and the cluster's monitoring history in
one window, on one time axis; first from history written to the database, then from the real lab."""

import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from apps.audit.actor import Actor
from apps.pages.incident import COLUMNS, build
from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring.models import MINUTE, RAW, BackendSample

pytestmark = pytest.mark.django_db
FMT = "%Y-%m-%dT%H:%M:%S"


def test_one_window_holds_events_operations_and_samples(viewer_client, incident):
    alpha, start, end, op, server = incident
    response = viewer_client.get(
        reverse("pages:incident"), {"cluster": alpha.pk, "start": start.strftime(FMT), "end": end.strftime(FMT)}
    )
    assert response.status_code == 200
    timeline = response.context["timeline"]
    story = [(row["time"][11:19], row["kind"], row["what"]) for row in timeline["story"]]
    t = lambda minutes, s=0: (start + timedelta(minutes=minutes, seconds=s)).strftime("%H:%M:%S")  # noqa: E731
    assert story == [
        (t(10), "backend", "Synced → Donor/Desynced"),
        (t(10), "backend", "recv queue 250 over max_replication_lag 100"),
        (t(11), "audit", "drain planned — Drain 127.0.0.1:23300"),
        (t(12), "operation", f"#{op.pk} Drain 127.0.0.1:23300 started"),
        (t(12), "step", "step 1 preflight: done"),
        (t(12), "step", "step 2 drain: done"),
        (t(12, 41.2045), "step", "step 3 verify: done"),
        (t(13), "audit", "drain done — Drain 127.0.0.1:23300"),
        (t(13), "operation", f"#{op.pk} Drain 127.0.0.1:23300: done"),
        (t(20), "backend", "Donor/Desynced → unreachable"),
        (t(30), "backend", "unreachable → Synced"),
        (t(30), "backend", "recv queue back to 0"),
        (t(40), "proxysql", "reachable → unreachable"),
        (t(45), "proxysql", "unreachable → reachable"),
        (t(50), "audit", "change hostgroupmembership — 127.0.0.1:23300"),
    ]
    steps = [row for row in timeline["story"] if row["kind"] == "step"]
    assert [s["duration_ms"] for s in steps] == [4.5, 41200.0, 9.25]

    events, operations, proxysql, backends = timeline["sections"]
    assert [lane.label for lane in events.lanes] == ["otto", "ada"]
    assert [len(lane.marks) for lane in events.lanes] == [2, 1]
    assert operations.lanes[0].label == f"#{op.pk} maintenance drain" and len(operations.lanes[0].rects) == 4
    # one time axis: the drain's bar starts where its "planned" mark is plus one minute of the hour
    x = lambda minutes: 190 + minutes / 60 * (1200 - 190 - 12)  # noqa: E731
    assert operations.lanes[0].rects[0]["x"] == pytest.approx(x(12), abs=0.2)
    assert events.lanes[0].marks[0]["x"] == pytest.approx(x(11), abs=0.2)
    states = [(r["cls"], round((r["x"] - 190) / (1200 - 202) * 60)) for r in backends.lanes[0].rects]
    assert states == [("ok", 0), ("warn", 10), ("bad", 20), ("ok", 30)]
    assert backends.lanes[0].note == "recv queue peak 250" and backends.lanes[1].note == "recv queue 0"
    assert [r["cls"] for r in proxysql.lanes[0].rects] == ["ok", "bad", "ok"]
    assert backends.lanes[0].polylines  # the receive queue, drawn under the state band

    page = response.content.decode()
    assert page.count('<circle class="mark') == 3 and "change cluster" not in page and "too late" not in page
    assert re.search(r'<rect class="warn"[^>]*><title>127\.0\.0\.1:23300: Donor/Desynced \d\d:\d\d:\d\d–', page)
    assert f'href="{op.get_absolute_url()}"' in page and '<td class="num">41 s</td>' in page  # 41,200 ms, said in s


def test_a_long_window_reads_rollups_and_the_raw_tail(viewer_client, incident):
    alpha, start, end, op, server = incident
    # two days of minute rollups before the raw hour (the tail the rollup has not reached yet)
    BackendSample.objects.bulk_create(
        [
            BackendSample(
                server=server, ts=start - timedelta(minutes=m), resolution=MINUTE, local_state=4, recv_queue=3
            )
            for m in range(1, 2 * 24 * 60)
        ]
    )
    timeline = build(alpha, start - timedelta(days=2), end)
    assert timeline["resolution"] == MINUTE
    backends = timeline["sections"][3]
    assert backends.lanes[0].rects[0]["cls"] == "ok" and backends.lanes[0].rects[-1]["cls"] == "ok"
    covered = sum(r["w"] for r in backends.lanes[0].rects)
    assert covered == pytest.approx(1200 - 202, rel=0.01)  # every column has data: rollups, then raw
    assert "warn" in [r["cls"] for r in backends.lanes[0].rects]  # the raw hour's desync is there


def test_event_detail_links_to_its_window_and_the_page_shifts(viewer_client, incident):
    alpha, start, end, op, server = incident
    from apps.audit.models import AuditEvent

    event = AuditEvent.objects.get(action="drain planned")
    detail = viewer_client.get(reverse("audit:detail", args=[event.pk])).content.decode()
    link = re.search(r'href="(/audit/incident/\?[^"]+)">Incident view around this event', detail).group(1)
    response = viewer_client.get(link.replace("&amp;", "&"))
    timeline = response.context["timeline"]
    assert timeline["end"] - timeline["start"] == timedelta(hours=1) and timeline["marker"] is not None
    assert [row for row in timeline["story"] if row.get("highlight")][0]["what"].startswith("drain planned")
    shift = response.context["shift"]
    earlier = viewer_client.get(reverse("pages:incident") + shift["earlier"]).context["timeline"]
    assert earlier["start"] == timeline["start"] - timedelta(minutes=30)
    assert viewer_client.get(reverse("pages:incident")).status_code == 200  # no cluster chosen yet
    bad = viewer_client.get(
        reverse("pages:incident"), {"cluster": alpha.pk, "start": "2026-01-01T00:00", "end": "2026-06-01T00:00"}
    )
    assert bad.status_code == 200 and "at most 31 days" in bad.content.decode()


def test_the_lab_cluster_from_adoption_through_a_desync_and_a_drain(
    viewer_client, adopted_lab, live_redis, galera_healthy, operator_user
):
    """Real services end to end: adoption (audited), polls of the Galera lab and the ProxySQL doubles,
    a desynced node, a drain run by the executor; the page shows them on one axis."""
    from apps.monitoring import pollers
    from apps.operations import drain, executor, services

    cluster, _ = adopted_lab
    servers = list(Server.objects.select_related("cluster").filter(cluster=cluster).order_by("port"))
    nodes = list(ProxySQLNode.objects.select_related("cluster").filter(cluster=cluster))
    begin = timezone.now()
    pollers.backend_round(servers)
    pollers.proxysql_round(nodes)
    galera_healthy.set_desync(3, True)
    pollers.backend_round(servers)
    galera_healthy.set_desync(3, False)
    op = services.save_plan(
        drain.plan_drain(servers[1], drain_timeout_ms=2000, note="disk swap"), actor=Actor.command(operator_user)
    )
    services.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    executor.run(op.pk)
    pollers.backend_round(servers)
    pollers.proxysql_round(nodes)

    response = viewer_client.get(reverse("pages:incident"), {"cluster": cluster.pk})  # the last hour
    timeline = response.context["timeline"]
    whats = [row["what"] for row in timeline["story"]]
    assert "adopt proxysql node — proxysql-1 (127.0.0.1:%d)" % adopted_lab[1][0].port in whats
    assert any(w.startswith("drain planned") for w in whats) and any(w.startswith("drain confirmed") for w in whats)
    assert any(w.startswith("drain done") for w in whats)
    assert "Synced → Donor/Desynced" in whats and "Donor/Desynced → Synced" in whats
    op.refresh_from_db()
    steps = [row for row in timeline["story"] if row["kind"] == "step"]
    assert steps and all(row["duration_ms"] is not None for row in steps)
    assert f"#{op.pk} {op.title}: done" in whats
    events, operations, proxysql, backends = timeline["sections"]
    assert len(proxysql.lanes) == 2 and all(lane.rects for lane in proxysql.lanes)
    assert [lane.label for lane in backends.lanes] == [str(s) for s in servers]
    assert "warn" in [r["cls"] for r in backends.lanes[2].rects]
    times = [row["ts"] for row in timeline["story"] if row["ts"] >= begin.timestamp()]
    assert times == sorted(times)
    assert 0 < len(backends.lanes[0].rects) <= COLUMNS and RAW == timeline["resolution"]


@pytest.mark.parametrize(
    "params, field",
    [
        ({"start": "9999-12-31T23:59:59"}, "start"),
        ({"end": "0001-01-01"}, "end"),
        ({"start": "0001-01-01T00:00", "end": "0001-01-01T00:30"}, "start"),
        ({"start": "9999-12-31T23:00", "end": "9999-12-31T23:59:59"}, "end"),
    ],
)
def test_a_window_at_the_ends_of_time_is_refused_with_a_message(viewer_client, incident, params, field):
    alpha = incident[0]
    response = viewer_client.get(reverse("pages:incident"), {"cluster": alpha.pk, **params})
    assert response.status_code == 200 and "timeline" not in response.context
    assert response.context["form"].errors[field] == ["must be between 1970-01-01 and 9999-01-01 (UTC)"]
    assert "must be between 1970-01-01 and 9999-01-01 (UTC)" in response.content.decode()
