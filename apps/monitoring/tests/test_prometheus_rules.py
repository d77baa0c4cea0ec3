"""docs/prometheus-rules.yaml, for those who alert from Prometheus: promtool accepts it and its unit tests
(docs/prometheus-rules.test.yaml) pass; those tests catch a rule that would page for planned work; every rule has
a severity, a summary and a unit test, and names only metrics /metrics and /metrics/pool export. A real Prometheus
loads and evaluates the rules against the lab in test_prometheus_scrape.py."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from . import dashboard
from .test_metrics import everything  # noqa: F401 (fixture)
from conftest import missing

DOCS = Path(__file__).resolve().parents[3] / "docs"
RULES = DOCS / "prometheus-rules.yaml"
UNIT_TESTS = DOCS / "prometheus-rules.test.yaml"


def promtool():
    path = shutil.which("promtool")
    if path is None:
        reason = "promtool is not installed (Debian package prometheus; bin/setup installs it)"
        missing(reason)
    return path


def run(*args, cwd=DOCS):
    result = subprocess.run([promtool(), *args], capture_output=True, text=True, timeout=60, cwd=cwd)
    return result.returncode, result.stdout + result.stderr


def rules():
    return [r for group in yaml.safe_load(RULES.read_text())["groups"] for r in group["rules"]]


def test_promtool_accepts_the_rules_and_their_unit_tests_pass():
    code, out = run("check", "rules", RULES.name)
    assert code == 0 and f"SUCCESS: {len(rules())} rules found" in out, out
    code, out = run("test", "rules", UNIT_TESTS.name)
    assert code == 0, out


def test_the_unit_tests_catch_a_rule_that_pages_for_planned_work(tmp_path):
    # The same rules without the maintenance clause: a backend the console drained would page as down.
    text = RULES.read_text()
    clause = " unless on (cluster, server) (proxysql_fleet_backend_maintenance == 1)\n        for: 1m"
    assert text.count(clause) == 1
    (tmp_path / RULES.name).write_text(text.replace(clause, "\n        for: 1m"))
    (tmp_path / UNIT_TESTS.name).write_text(UNIT_TESTS.read_text())
    code, out = run("test", "rules", UNIT_TESTS.name, cwd=tmp_path)
    assert code != 0 and "ProxySQLBackendDown" in out and "127.0.0.1:3312" in out, out


def test_every_rule_has_a_severity_a_summary_and_a_unit_test():
    tested = {
        case["alertname"]
        for test in yaml.safe_load(UNIT_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    for rule in rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["alert"] in tested, f"{rule['alert']} is never seen firing in {UNIT_TESTS.name}"


@pytest.mark.django_db
def test_every_rule_names_only_exported_metrics(client, everything):  # noqa: F811
    exported = dashboard.exported_names(client)
    named = {name for rule in rules() for name in re.findall(r"\bproxysql_fleet_[a-z0-9_]+\b", rule["expr"])}
    assert "proxysql_fleet_backend_maintenance" in named
    assert named - exported == set(), "the rules name metrics /metrics does not export"
