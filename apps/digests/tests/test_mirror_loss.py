"""Measured mirror loss, end to end over the wire: two adopted ProxySQL doubles with a mirror rule (seed 004,
samples/mirror.jsonl), real Redis, the digest poll twice with real traffic between; the loss stored per rule
and window is held against the double's own account of what it mirrored, dropped and skipped."""

import time

import pytest
from django.urls import reverse

from apps.digests import services
from apps.fleet.models import MirrorRule
from apps.monitoring import charts, formatting
from apps.monitoring.models import RAW, MirrorRuleSample
from lab import demo

pytestmark = pytest.mark.django_db

RULE = (
    "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,mirror_hostgroup,apply)"
    " VALUES (10,1,'^INSERT',100,101,1)"
)


def admin_sql(double, *statements):
    demo.admin_sql(double.port, *statements, user=double.user, password=double.password)


def mirror_inserts(double, *, saturated):
    """Mirror the writer's INSERTs to the reader hostgroup; saturated: the sample's settings (one mirror
    slot, 50 queued per thread x 2 threads), else the defaults (16 slots, 32,000 a thread)."""
    admin_sql(double, RULE, "LOAD MYSQL QUERY RULES TO RUNTIME")
    if saturated:
        admin_sql(
            double,
            "SET mysql-mirror_max_concurrency=1",
            "SET mysql-mirror_max_queue_length=50",
            "LOAD MYSQL VARIABLES TO RUNTIME",
        )


def write_load(double, prepared_fraction=0.0):
    double.traffic.set_sessions(
        hostgroup=100, count=4, kind="write", pinned_reason="auto_increment", prepared_fraction=prepared_fraction
    )


def rule_counts(double):
    return dict(
        double.traffic.status()["mirror"]["by_rule"].get("10")
        or {"arrived": 0, "executed": 0, "dropped": 0, "skipped_prepared": 0}
    )


def measured_window(node, nodes, double, seconds=3.0):
    """Poll, let the traffic run, poll again: (the rule's sample of that window, the double's counts over it)."""
    services.poll_round(nodes, now=time.time())
    before = rule_counts(double)
    time.sleep(seconds)
    ts = int(time.time()) + 1
    services.poll_round(nodes, now=ts)
    after = rule_counts(double)
    sample = MirrorRuleSample.objects.get(node=node, rule_id=10, resolution=RAW, ts__gte=_dt(ts))
    return sample, {k: after[k] - before.get(k, 0) for k in after}


def _dt(ts):
    from datetime import datetime, timezone

    return datetime.fromtimestamp(ts, tz=timezone.utc)


def test_saturated_mirror_shows_the_loss_the_double_really_had(digest_lab):
    cluster, nodes, (first, _) = digest_lab
    mirror_inserts(first, saturated=True)
    write_load(first)
    time.sleep(0.5)  # the queue fills: 100 copies
    sample, truth = measured_window(nodes[0], nodes, first)
    true_loss = truth["dropped"] / truth["arrived"]
    assert true_loss > 0.4  # 560 copies a second for a mirror that runs 200
    assert sample.loss == pytest.approx(true_loss, abs=0.04)
    assert sample.prepared_share == pytest.approx(0.0, abs=0.005)
    hits = sample.hits_ps * sample.interval_s
    assert sample.expected_ps == pytest.approx(sample.hits_ps)
    assert sample.mirrored_ps * sample.interval_s == pytest.approx(truth["executed"], rel=0.08)
    assert hits == pytest.approx(truth["arrived"], rel=0.08)
    assert sample.mirror_hostgroup == 101 and not sample.ambiguous
    assert MirrorRuleSample.objects.filter(node=nodes[1]).count() == 0  # the second node mirrors nothing


def test_unsaturated_mirror_loses_nothing(digest_lab):
    cluster, nodes, (first, _) = digest_lab
    mirror_inserts(first, saturated=False)
    write_load(first)
    time.sleep(0.3)
    sample, truth = measured_window(nodes[0], nodes, first)
    assert truth["dropped"] == 0 and truth["arrived"] > 1000
    assert sample.loss == pytest.approx(0.0, abs=0.02)


def test_prepared_statements_are_expected_unmirrored(digest_lab):
    """Prepared executions hit the rule but are never mirrored: the expected copies are the hits less the
    prepared share, so an unsaturated mirror still shows no loss (hits alone would say 40 %)."""
    cluster, nodes, (first, _) = digest_lab
    mirror_inserts(first, saturated=False)
    write_load(first, prepared_fraction=0.4)
    time.sleep(0.3)
    sample, truth = measured_window(nodes[0], nodes, first)
    assert truth["skipped_prepared"] == pytest.approx(0.4 * (truth["arrived"] + truth["skipped_prepared"]), rel=0.03)
    assert sample.prepared_share == pytest.approx(0.4, abs=0.02)
    assert sample.expected_ps == pytest.approx(0.6 * sample.hits_ps, rel=0.04)
    assert 1 - sample.mirrored_ps / sample.hits_ps == pytest.approx(0.4, abs=0.03)  # what hits alone would say
    assert sample.loss == pytest.approx(0.0, abs=0.03)


def test_a_rule_added_after_adoption_is_read_and_measured(digest_lab):
    cluster, nodes, (first, _) = digest_lab
    services.poll_round(nodes, now=time.time())  # adopted without mirroring: nothing to measure
    assert not MirrorRule.objects.filter(proxysql_node=nodes[0]).exists()
    assert not MirrorRuleSample.objects.exists()
    time.sleep(1.0)
    mirror_inserts(first, saturated=True)
    write_load(first)
    time.sleep(2.0)
    services.poll_round(nodes, now=int(time.time()) + 1)
    truth = rule_counts(first)  # everything since the rule was loaded
    rule = MirrorRule.objects.get(proxysql_node=nodes[0])
    assert (rule.rule_id, rule.match_digest, rule.destination_hostgroup, rule.mirror_hostgroup) == (
        10,
        "^INSERT",
        100,
        101,
    )
    (sample,) = MirrorRuleSample.objects.filter(node=nodes[0])  # measured from the rule's first hit on
    # The queue started empty with the rule: the copies still queued at the end count as not run yet.
    assert sample.rule_id == 10 and sample.loss == pytest.approx(1 - truth["executed"] / truth["arrived"], abs=0.04)

    admin_sql(first, "DELETE FROM mysql_query_rules", "LOAD MYSQL QUERY RULES TO RUNTIME")
    time.sleep(1.0)
    services.poll_round(nodes, now=int(time.time()) + 2)
    assert not MirrorRule.objects.filter(proxysql_node=nodes[0]).exists()  # the latest read, not adoption's


def test_node_page_mirror_panel_shows_the_measured_loss_and_its_figures(digest_lab, viewer_client):
    cluster, nodes, (first, _) = digest_lab
    mirror_inserts(first, saturated=True)
    write_load(first)
    time.sleep(0.5)
    sample, truth = measured_window(nodes[0], nodes, first, seconds=2.0)
    panel = viewer_client.get(reverse("monitoring:proxysql_mirror", args=[nodes[0].pk])).content.decode()
    assert "data-mirror-rules" in panel and 'data-rule="10"' in panel
    assert f'data-loss="{sample.loss:.3f}"' in panel
    assert f"lost {formatting.share(sample.loss, digits=0)} of its copies" in panel  # "70 %": the one format
    assert "Measured: rule 10 lost" in panel or "Mirrored queries were lost" in panel
    assert "<code>^INSERT</code>" in panel and "100 → 101" in panel
    page = viewer_client.get(nodes[0].get_absolute_url()).content.decode()
    assert f'data-url="/monitoring/proxysql/{nodes[0].pk}/charts/mirror_loss.json"' in page
    data = charts.chart("proxysql", "mirror_loss", nodes[0], "1h", now=sample.ts.timestamp() + 1)
    (series,) = data["series"]
    assert series["label"] == "rule 10"
    assert [v for v in series["values"] if v is not None][-1] == pytest.approx(sample.loss * 100, abs=0.1)
    other = viewer_client.get(reverse("monitoring:proxysql_mirror", args=[nodes[1].pk])).content.decode()
    assert "No mirror rule at runtime" in other
