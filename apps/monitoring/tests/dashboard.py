"""docs/grafana-dashboard.json read the way Grafana reads it: its variables and the PromQL of every panel."""

import json
import re
from pathlib import Path

PATH = Path(__file__).resolve().parents[3] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\b(proxysql_fleet_[a-z0-9_]+)\b(\{[^}]*\})?")


def load():
    return json.loads(PATH.read_text())


def panels(dashboard=None):
    out = []
    for p in (dashboard or load())["panels"]:
        out += [p] + p.get("panels", [])
    return [p for p in out if p["type"] != "row"]


def expressions(dashboard=None):
    """[(panel title, PromQL as written)] of every target, then the variables' queries."""
    dashboard = dashboard or load()
    out = [(p["title"], t["expr"]) for p in panels(dashboard) for t in p["targets"]]
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append((f"variable {v['name']}", query))
    return out


def as_promql(expr, cluster=".*", rate="1m", range_="1h"):
    """What Grafana sends to Prometheus for this expression (its variables replaced)."""
    return expr.replace("$__rate_interval", rate).replace("$__range", range_).replace("$cluster", cluster)


def exported_names(client):
    """Every sample name a scrape of /metrics and each cluster's /metrics/pool carries (as Prometheus stores them)."""
    from prometheus_client.parser import text_string_to_metric_families

    bodies = [client.get("/metrics").content.decode()] + [
        client.get("/metrics/pool", {"cluster": target["labels"]["__param_cluster"]}).content.decode()
        for target in client.get("/metrics/targets").json()
        if target["labels"]["__metrics_path__"] == "/metrics/pool"
    ]
    return {s.name for body in bodies for f in text_string_to_metric_families(body) for s in f.samples}
