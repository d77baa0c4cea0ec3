"""The weekly report lists the rollouts of its week with their waves and halts (issue 38, "alerts and reports"): the
fleet report every rollout, a cluster's report those that selected it; a rollout outside the week is not listed."""

from datetime import timedelta

from django.utils import timezone

from apps.audit.actor import Actor
from apps.fleet.models import Cluster
from apps.reports import periods
from apps.reports import services as reports
from apps.rollouts.models import Rollout, RolloutCluster, RolloutState


def a_rollout(clusters, at, state, waves, halt_reason=""):
    rollout = Rollout.objects.create(
        reason=f"{state} one",
        change={"edits": []},
        selector={},
        waves_text="1,100%",
        waves=waves,
        state=state,
        halt_reason=halt_reason,
        planner="ops",
    )
    for n, c in enumerate(clusters):
        RolloutCluster.objects.create(rollout=rollout, cluster=c, wave=min(n, len(waves) - 1), position=n)
    Rollout.objects.filter(pk=rollout.pk).update(created_at=at, updated_at=at + timedelta(minutes=5))  # its time
    return rollout


def test_the_weekly_report_lists_the_rollouts_of_its_week_with_their_waves_and_halts(db):
    a, b, c = (Cluster.objects.create(name=name, writer_hostgroup=100, reader_hostgroup=101) for name in "abc")
    week = periods.last_complete("weekly", timezone.now())
    inside = week.start + timedelta(days=2)
    passed = {"state": "passed", "gate": {"ok": True, "failed": []}}
    done = a_rollout(
        [a, b, c],
        inside,
        RolloutState.DONE,
        [
            {"clusters": [a.pk], "node": 1, **passed},
            {"clusters": [a.pk], **passed},
            {"clusters": [b.pk, c.pk], **passed},
        ],
    )
    why = "wave 2 failed its health gate: the errors gate on b-proxysql-1: 40.0 errors/s since the change"
    halted = a_rollout(
        [a, b],
        inside + timedelta(hours=3),
        RolloutState.HALTED,
        [
            {"clusters": [a.pk], "node": 1, **passed},
            {"clusters": [a.pk], **passed},
            {
                "clusters": [b.pk],
                "state": "rolled_back",
                "gate": {"ok": False, "failed": [{"gate": "errors"}, {"gate": "alerts"}]},
            },
        ],
        halt_reason=why,
    )
    a_rollout([a], week.start - timedelta(days=3), RolloutState.DONE, [{"clusters": [a.pk], **passed}])  # before

    report = reports.build_report(None, "weekly", week, actor=Actor.system())
    listed = report.data["fleet"]["rollouts"]
    assert [r["id"] for r in listed["rollouts"]] == [halted.pk, done.pk] and listed["halted"] == 1
    first = listed["rollouts"][0]
    assert first["halted"] and first["halt_reason"] == why
    assert [(w["wave"], w["canary"], w["clusters"], w["state"], w["failed"]) for w in first["waves"]] == [
        (0, True, ["a"], "passed", []),
        (1, False, ["a"], "passed", []),
        (2, False, ["b"], "rolled_back", ["alerts", "errors"]),
    ]
    assert [w["clusters"] for w in listed["rollouts"][1]["waves"]] == [["a"], ["a"], ["b", "c"]]
    html = report.html
    assert f'data-rollout="{halted.pk}" data-state="halted"' in html and f'data-halt="{halted.pk}"' in html
    assert "Halted: " + why in html
    assert 'data-wave="2" data-wave-state="rolled_back">b: rolled_back, failed its alerts, errors gates' in html
    assert "2 rollouts, 1 halted" in html

    # a cluster's weekly report: the rollouts that selected it only
    by_cluster = reports.build_data(c, "weekly", week)["clusters"][0]["rollouts"]
    assert [r["id"] for r in by_cluster["rollouts"]] == [done.pk] and by_cluster["halted"] == 0


def rollout_queries(week):
    """The queries a fleet report's build makes to the rollouts' tables, for these clusters."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as seen:
        data = reports.build_data(None, "weekly", week)
    assert all(s["rollouts"]["rollouts"] for s in data["clusters"])  # each cluster lists its rollout
    return [q["sql"] for q in seen.captured_queries if "rollouts_rollout" in q["sql"]]


def test_a_fleet_report_reads_the_rollouts_of_all_its_clusters_in_a_constant_number_of_queries(db):
    week = periods.last_complete("weekly", timezone.now())
    passed = {"state": "passed", "gate": {"ok": True, "failed": []}}

    def fleet(names):
        clusters = [Cluster.objects.create(name=name, writer_hostgroup=100, reader_hostgroup=101) for name in names]
        for c in clusters:
            a_rollout([c], week.start + timedelta(days=1), RolloutState.DONE, [{"clusters": [c.pk], **passed}])
        return clusters

    fleet(["a", "b"])
    few = rollout_queries(week)
    fleet([f"more-{n}" for n in range(8)])
    many = rollout_queries(week)
    assert len(many) == len(few), (len(few), len(many))  # before: one more query per cluster
    by_cluster = reports.build_data(Cluster.objects.get(name="more-3"), "weekly", week)["clusters"][0]["rollouts"]
    assert [r["reason"] for r in by_cluster["rollouts"]] == ["done one"] and by_cluster["more"] == 0
