"""docs/grafana-dashboard.json: valid JSON with a datasource and a cluster variable; every expression names only
metrics /metrics and /metrics/pool export, is filtered by the cluster variable where its metric has a cluster, and is valid PromQL
(promtool). A real Prometheus evaluates them all in test_prometheus_scrape.py."""

import shutil
import subprocess

import pytest
import yaml

from . import dashboard
from .test_metrics import everything  # noqa: F401 (fixture)
from conftest import missing

FLEET_WIDE = {
    "proxysql_fleet_live_up",
    "proxysql_fleet_database_up",
    "proxysql_fleet_operation_duration_seconds_bucket",
}


def test_the_dashboard_has_its_variables_and_panels():
    board = dashboard.load()
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert (
        variables["cluster"]["type"] == "query" and variables["cluster"]["multi"] and variables["cluster"]["includeAll"]
    )
    titles = " | ".join(p["title"] for p in dashboard.panels(board)).lower()
    for topic in (
        "writer status",
        "connections used",
        "queries per second",
        "errors",
        "latency",
        "mirror queue",
        "mirror loss",
        "wsrep state",
        "receive queue",
        "flow control",
        "poll age",
        "operations",
        "alerts open",
        "read_only",
        "maintenance",
    ):
        assert topic in titles, topic
    for p in dashboard.panels(board):
        assert p["datasource"]["uid"] == "${datasource}" and p["targets"], p["title"]
        assert all(t["datasource"]["uid"] == "${datasource}" and t["expr"] for t in p["targets"]), p["title"]
    assert len({p["id"] for p in dashboard.panels(board)}) == len(dashboard.panels(board))


@pytest.mark.django_db
def test_every_expression_names_only_exported_metrics(client, everything):  # noqa: F811
    exported = dashboard.exported_names(client)
    assert "proxysql_fleet_pool_connections_used" in exported and "proxysql_fleet_backend_up" in exported
    wrong, unfiltered = [], []
    for title, expr in dashboard.expressions():
        found = dashboard.METRIC.findall(expr)
        assert found, f"{title}: {expr} names no proxysql_fleet_ metric"
        for name, selector in found:
            if name not in exported:
                wrong.append(f"{title}: {name}")
            elif name not in FLEET_WIDE and not title.startswith("variable") and 'cluster=~"$cluster"' not in selector:
                unfiltered.append(f"{title}: {name}{selector}")
    assert not wrong, "the dashboard names metrics /metrics does not export:\n" + "\n".join(wrong)
    assert not unfiltered, "not filtered by the cluster variable:\n" + "\n".join(unfiltered)


def test_every_expression_is_valid_promql(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        reason = "promtool is not installed (Debian package prometheus; bin/setup installs it)"
        missing(reason)
    rules = [
        {"record": f"dashboard:expression_{i}", "expr": dashboard.as_promql(expr)}
        for i, (_, expr) in enumerate(dashboard.expressions())
        if not expr.startswith("label_values(")
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
