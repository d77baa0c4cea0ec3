"""A real Prometheus server (Debian's prometheus package, which bin/setup installs) discovers its targets from
/metrics/targets (HTTP service discovery) and scrapes /metrics and each cluster's /metrics/pool of a live server in
front of the lab: two ProxySQL doubles and the Galera lab, polled by the real pollers, which write
the latest state to a real Redis. The series are read back through Prometheus's HTTP API, and every expression of
the Grafana dashboard (docs/grafana-dashboard.json) is evaluated there as Grafana would send it; the alerting rules
(docs/prometheus-rules.yaml) are loaded and evaluated, and none fires on the healthy lab."""

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring import pollers

from . import dashboard
from .test_prometheus_rules import RULES, rules
from conftest import missing

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "a-scrape-token-for-the-prometheus-test"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Prometheus:
    def __init__(self, port, proc, log):
        self.url, self.proc, self.log = f"http://127.0.0.1:{port}", proc, log

    def query(self, expr):
        """The instant vector of a PromQL expression: [(labels, value)]."""
        with urllib.request.urlopen(
            f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}", timeout=5
        ) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def rules(self):
        """{rule name: (health, state, last error)} of every loaded rule."""
        with urllib.request.urlopen(f"{self.url}/api/v1/rules", timeout=5) as response:
            groups = json.load(response)["data"]["groups"]
        return {r["name"]: (r["health"], r.get("state"), r.get("lastError", "")) for g in groups for r in g["rules"]}

    def targets(self):
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=5) as response:
            return json.load(response)["data"]["activeTargets"]


@pytest.fixture
def prometheus(tmp_path):
    """start(target "host:port", token) runs `prometheus` on a free port, discovering what to scrape from the target's
    /metrics/targets and scraping it every second, both with the token, as README "Prometheus" says; stopped after
    the test."""
    binary = shutil.which("prometheus")
    if binary is None:
        reason = "the prometheus server is not installed (Debian package prometheus; bin/setup installs it)"
        missing(reason)
    started = []

    def start(target, token):
        (tmp_path / "token").write_text(token)
        config = tmp_path / "prometheus.yml"
        config.write_text(
            json.dumps(
                {  # YAML is a superset of JSON
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(RULES)],
                    "scrape_configs": [
                        {
                            "job_name": "proxysql-fleet",
                            "authorization": {"type": "Bearer", "credentials_file": str(tmp_path / "token")},
                            "http_sd_configs": [
                                {
                                    "url": f"http://{target}/metrics/targets",
                                    "refresh_interval": "5s",
                                    "authorization": {"type": "Bearer", "credentials_file": str(tmp_path / "token")},
                                }
                            ],
                        }
                    ],
                }
            )
        )
        port = free_port()
        log = open(tmp_path / "prometheus.log", "w+")
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        server = Prometheus(port, proc, log)
        started.append(server)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{server.url}/-/ready", timeout=1) as response:
                    if response.status == 200:
                        return server
            except OSError:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.2)
        log.seek(0)
        pytest.fail(f"prometheus did not become ready:\n{log.read()[-3000:]}")

    yield start
    for server in started:
        server.proc.terminate()
        try:
            server.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.proc.kill()


def test_a_real_prometheus_scrapes_the_lab(live_server, adopted_lab, live_redis, galera_healthy, prometheus, settings):
    settings.METRICS_TOKEN = TOKEN
    settings.METRICS_ALLOWED_ADDRESSES = []  # the token alone lets Prometheus in
    nodes = list(ProxySQLNode.objects.select_related("cluster").order_by("name"))
    servers = list(Server.objects.select_related("cluster"))
    pollers.proxysql_round(nodes)
    pollers.backend_round(servers)
    server = prometheus(live_server.url.split("://", 1)[1], TOKEN)

    writer = 'proxysql_fleet_pool_connections_used{cluster="galera-lab",node="proxysql-1",hostgroup="100",server="127.0.0.1:3311"}'
    rate = 'rate(proxysql_fleet_proxysql_questions_total{cluster="galera-lab"}[10s])'
    wanted = {
        "up": 'up{job="proxysql-fleet"}',
        "writer": writer,
        "rate": rate,
        "synced": 'proxysql_fleet_backend_wsrep_local_state{cluster="galera-lab"} == 4',
    }
    got = {}
    deadline = time.monotonic() + 45
    while time.monotonic() < deadline:
        pollers.proxysql_round(nodes)  # the pollers keep the latest state fresh, as beat would
        pollers.backend_round(servers)
        got = {name: server.query(expr) for name, expr in wanted.items()}
        if (
            len(got["up"]) == 2
            and all(v == 1 for _, v in got["up"])
            and got["writer"]
            and len(got["rate"]) == 2
            and all(v > 0 for _, v in got["rate"])
            and len(got["synced"]) == 3
        ):
            break
        time.sleep(0.5)
    else:
        server.log.seek(0)
        pytest.fail(f"Prometheus did not read the lab: {got}\ntargets: {server.targets()}\n{server.log.read()[-2000:]}")
    assert got["writer"][0][1] == 4  # the lab's four writer sessions pinned on 3311
    assert {labels["server"] for labels, _ in got["synced"]} == {"127.0.0.1:3311", "127.0.0.1:3312", "127.0.0.1:3313"}
    assert {labels["node"] for labels, _ in got["rate"]} == {"proxysql-1", "proxysql-2"}
    # Two targets, found by discovery: the fleet's /metrics and the lab cluster's pool, each up.
    targets = {t["scrapeUrl"]: t for t in server.targets()}
    assert set(targets) == {f"{live_server.url}/metrics", f"{live_server.url}/metrics/pool?cluster=galera-lab"}
    assert all(t["health"] == "up" and t["lastError"] == "" for t in targets.values())
    assert {labels["instance"] for labels, _ in got["up"]} == {live_server.url.split("://", 1)[1], "pool/galera-lab"}

    # Grafana's view: every expression of the dashboard, as Grafana sends it for the lab cluster, evaluates; the
    # panels about what the lab has show it.
    results = {}
    for title, expr in dashboard.expressions():
        if not expr.startswith("label_values("):
            results.setdefault(title, []).extend(
                server.query(dashboard.as_promql(expr, cluster="galera-lab", rate="10s", range_="1m"))
            )
    writers = {
        (labels["node"], labels["server"], labels["status"]) for labels, _ in results["Writer status per ProxySQL node"]
    }
    assert writers == {("proxysql-1", "127.0.0.1:3311", "ONLINE"), ("proxysql-2", "127.0.0.1:3311", "ONLINE")}
    assert [v for _, v in results["ProxySQL nodes answering"]] == [2, 2]
    assert len(results["wsrep state per backend"]) == 3 and all(v == 4 for _, v in results["wsrep state per backend"])
    for title in (
        "Connections used per node and hostgroup (ConnUsed)",
        "Queries per second per ProxySQL node (Questions)",
        "Latency per backend (ProxySQL's ping, Latency_us)",
        "Poll age (seconds since the latest poll)",
        "Mirror queue against its limit (per-thread limit × mysql-threads)",
        "Flow control: share of time paused",
        "read_only per backend",
        "Backends in maintenance (drained by the console)",
        "Client sessions by command",
        "Queries per second by command, and backend errors",
    ):
        assert results[title], f"{title}: no data"

    # The alerting rules: all loaded, evaluated without error, none pending or firing on the healthy lab; the
    # writer rule's join finds each node's ONLINE writer on the real labels (so its silence is not an empty join).
    loaded = {}
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        loaded = server.rules()
        if loaded and all(health != "unknown" for health, _, _ in loaded.values()):
            break
        time.sleep(0.5)
    assert set(loaded) == {r["alert"] for r in rules()}
    assert {name: v for name, v in loaded.items() if v[0] != "ok" or v[1] != "inactive"} == {}
    writer_rows = server.query(
        'count by (cluster, node) (proxysql_fleet_pool_server_status{status="ONLINE"} '
        '* on (cluster, hostgroup) group_left (role) proxysql_fleet_hostgroup_info{role="writer"})'
    )
    assert {(labels["cluster"], labels["node"]) for labels, _ in writer_rows} == {
        ("galera-lab", "proxysql-1"),
        ("galera-lab", "proxysql-2"),
    }
