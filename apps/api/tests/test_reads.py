"""What the API reads is what the pages read: the polled lab's inventory, latest state, history and drift; the
digest page's window, filters, search, sort and pages; the audit log's filters and cursor pages; reports."""

import time

import pytest

from apps.accounts import tokens
from apps.audit.services import record
from apps.digests.models import RAW, DigestStat
from apps.digests.tests.factories import digest, fleet, polls, source
from apps.fleet.models import ProxySQLNode
from apps.monitoring import charts
from apps.monitoring.tests.test_pages import poll  # real poll rounds of the lab
from lab import demo

from .conftest import ApiClient

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(viewer_user):
    return ApiClient(tokens.create(viewer_user, "reader")[1])


def ok(response):
    assert response.status_code == 200, response.content[:500]
    return response.json()


def test_the_polled_lab_inventory_latest_state_history_and_drift(adopted_lab, live_redis, api):
    cluster, _ = adopted_lab
    poll()
    clusters = ok(api.get("/api/v1/clusters/"))
    assert clusters["count"] == 1 and clusters["results"][0]["name"] == "galera-lab"
    assert ok(api.get("/api/v1/clusters/", {"kind": "async"}))["count"] == 0
    hostgroups = {h["id"]: h for h in ok(api.get(f"/api/v1/clusters/{cluster.pk}/hostgroups/"))}
    assert hostgroups[100]["role"] == "writer" and [m["port"] for m in hostgroups[100]["members"]] == [3311]
    servers = ok(api.get("/api/v1/servers/", {"cluster": cluster.pk, "hostname": "127.0.0.1", "port": 3312}))
    assert servers["count"] == 1
    server = servers["results"][0]
    assert {m["hostgroup_id"] for m in server["memberships"]} == {101, 102}
    nodes = ok(api.get("/api/v1/proxysql-nodes/", {"cluster": cluster.pk}))["results"]
    assert [n["name"] for n in nodes] == ["proxysql-1", "proxysql-2"] and "admin_password" not in nodes[0]

    state = ok(api.get(f"/api/v1/proxysql-nodes/{nodes[0]['id']}/state/"))
    assert state["state"] == "ok" and state["unavailable"] == "" and state["age_s"] < 5
    assert {(r["hostgroup"], r["port"], r["role"]) for r in state["pool"]} >= {
        (100, 3311, "writer"),
        (101, 3312, "reader"),
    }
    assert state["figures"]["questions_ps"] is not None and "queue_ratio" in state["mirror"]
    wsrep = ok(api.get(f"/api/v1/servers/{server['id']}/state/"))
    assert wsrep["label"] == "Synced" and wsrep["wsrep"]["cluster_status"] == "Primary" and wsrep["problems"] == []
    whole = ok(api.get(f"/api/v1/clusters/{cluster.pk}/state/"))
    assert [n["state"] for n in whole["nodes"]] == ["ok", "ok"] and len(whole["backends"]) == 3
    writer_row = next(s for h in whole["hostgroups"] if h["id"] == 100 for s in h["servers"])
    assert writer_row["port"] == 3311 and {r["status"] for r in writer_row["nodes"]} == {"ONLINE"}

    node = ProxySQLNode.objects.get(pk=nodes[0]["id"])
    history = ok(api.get(f"/api/v1/proxysql-nodes/{node.pk}/history/queries/", {"range": "1h"}))
    assert history["resolution"] == 0 and len(history["t"]) >= 2
    assert history["series"][0]["label"] == "Questions/s (all)" and len(history["series"][0]["values"]) == len(
        history["t"]
    )
    page = charts.chart("proxysql", "queries", node, "1h", now=history["end"] / 1000)
    assert page["t"] == history["t"] and page["series"] == history["series"]  # the page's chart, the same series
    minutes = ok(api.get(f"/api/v1/proxysql-nodes/{node.pk}/history/queries/", {"range": "1h", "resolution": "1m"}))
    assert minutes["resolution"] == 60 and minutes["bucket"] == 60
    queue = ok(api.get(f"/api/v1/servers/{server['id']}/history/recv_queue/", {"range": "6h"}))
    assert queue["unit"] == "write-sets" and queue["t"]
    missing = api.get(f"/api/v1/servers/{server['id']}/history/queries/")
    assert missing.status_code == 404 and "wsrep_state, recv_queue, flow_control" in missing.json()["error"]["message"]

    drift = ok(api.get(f"/api/v1/clusters/{cluster.pk}/drift/"))
    assert drift["in_sync"] and [n["name"] for n in drift["nodes"]] == ["proxysql-1", "proxysql-2"]
    _, (first, second) = adopted_lab
    demo.admin_sql(
        second.port,
        "UPDATE mysql_servers SET weight=7 WHERE hostgroup_id=101 AND port=3313",
        "SAVE MYSQL SERVERS TO DISK",
        "SAVE MYSQL SERVERS TO MEMORY",
        user=second.user,
        password=second.password,
    )
    node = ok(api.get(f"/api/v1/clusters/{cluster.pk}/drift/"))["nodes"][1]
    assert not node["in_sync"] and node["findings"] == [
        {
            "layer": "disk",
            "table": "mysql_servers",
            "writer": False,
            "words": "a restart of proxysql-2 would load hg 101 127.0.0.1:3313 weight 7 (disk) instead of 10000",
        }
    ]
    assert node["layers"] == [
        {
            "table": "mysql_servers",
            "key": [101, "127.0.0.1", 3313],
            "field": "weight",
            "intended": 10000,
            "memory": 10000,
            "runtime": 10000,
            "disk": 7,
            "differs": ["disk"],
            "row": None,
        }
    ]


def test_digests_with_the_pages_window_filters_search_sort_and_pages(api):
    now = int(time.time())
    cluster, (n1, n2) = fleet(2, "shop")
    reader, reporter = source(n1), source(n2, 100, "report", "archive")
    rows = [
        DigestStat(
            resolution=RAW,
            ts=now - 1200,
            source=reader,
            digest=digest(f"SELECT c{i} FROM orders", h=f"0x{i + 1:016X}"),
            count_star=10 + i,
            sum_time=(10 + i) * (5000 - 30 * i),
        )
        for i in range(60)
    ]
    special = digest("UPDATE accounts SET balance = ?", h="0x00000000DEADBEEF")
    rows.append(
        DigestStat(resolution=RAW, ts=now - 180, source=reporter, digest=special, count_star=3, sum_time=3_000_000)
    )
    DigestStat.objects.bulk_create(rows)
    polls(n1, now - 3600, now)
    polls(n2, now - 3600, now)

    first = ok(api.get("/api/v1/digests/", {"page_size": 25}))
    assert first["count"] == 61 and first["pages"] == 3 and len(first["results"]) == 25
    assert first["results"][0]["digest"] == "0x00000000DEADBEEF"  # most total time first, as the page sorts
    by_count = ok(api.get("/api/v1/digests/", {"sort": "count", "dir": "asc"}))["results"]
    assert by_count[0]["digest"] == "0x00000000DEADBEEF" and by_count[1]["count"] == 10
    assert ok(api.get("/api/v1/digests/", {"q": "balance"}))["results"][0]["id"] == special.pk
    assert ok(api.get("/api/v1/digests/", {"q": "0x00000000deadbeef"}))["count"] == 1
    filtered = ok(api.get("/api/v1/digests/", {"node": n2.pk, "user": "report", "hostgroup": 100}))
    assert [r["digest"] for r in filtered["results"]] == ["0x00000000DEADBEEF"]
    assert filtered["results"][0]["where"] == {"hostgroups": [100], "users": ["report@archive"], "nodes": 1}
    assert ok(api.get("/api/v1/digests/", {"window": "5m"}))["count"] == 1
    assert ok(api.get("/api/v1/digests/", {"page": 99, "page_size": 25}))["page"] == 3  # clamped, as the page does
    custom = {
        "window": "custom",
        "start": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - 1500)),
        "end": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - 900)),
    }
    assert ok(api.get("/api/v1/digests/", custom))["count"] == 60
    assert api.get("/api/v1/digests/", {"cluster": 999999}).json()["error"]["fields"] == {
        "cluster": ["No cluster #999999."]
    }
    assert set(api.get("/api/v1/digests/", {"window": "custom"}).json()["error"]["fields"]) == {"start"}

    detail = ok(api.get(f"/api/v1/digests/{special.pk}/"))
    assert detail["text"].startswith("UPDATE accounts") and detail["breakdown"][0]["username"] == "report"
    assert detail["breakdown"][0]["count"] == 3 and detail["breakdown"][0]["node"] == n2.pk
    history = ok(api.get(f"/api/v1/digests/{special.pk}/history/"))
    assert history["bucket_s"] == 60 and any(p["rate"] for p in history["points"])


def test_audit_events_filters_and_cursor_pages(api, viewer_user):
    for i in range(120):
        record("api test event", details={"n": i}, target=f"node-{i % 3}")
    record("something else", outcome="failure")
    seen, url, pages = [], "/api/v1/audit/events/?action=api+test+event&page_size=50", 0
    while url:
        page = ok(api.get(url))
        seen += [e["details"]["n"] for e in page["results"]]
        url, pages = page["next"], pages + 1
    assert seen == list(range(119, -1, -1)) and pages == 3  # newest first, each once, no OFFSET
    first = ok(api.get("/api/v1/audit/events/", {"action": "api test event", "page_size": 50}))
    second = ok(api.get(first["next"]))
    back = ok(api.get(second["previous"]))  # the newer page again, by the cursor
    assert [e["details"]["n"] for e in back["results"]] == list(range(119, 69, -1))
    assert ok(api.get("/api/v1/audit/events/", {"outcome": "failure"}))["results"][0]["action"] == "something else"
    assert len(ok(api.get("/api/v1/audit/events/", {"target": "node-1", "action": "api test event"}))["results"]) == 40
    assert ok(api.get("/api/v1/audit/events/", {"q": "else"}))["results"][0]["action"] == "something else"
    bad = api.get("/api/v1/audit/events/", {"outcome": "maybe", "start": "yesterday", "cluster": "999"})
    assert bad.status_code == 400 and set(bad.json()["error"]["fields"]) == {"outcome", "start", "cluster"}
    newest = ok(api.get("/api/v1/audit/events/"))["results"][0]
    assert ok(api.get(f"/api/v1/audit/events/{newest['id']}/")) == newest and newest["hash"] and newest["prev_hash"]


def test_reports_list_and_one_with_its_data(api, objects):
    listed = ok(api.get("/api/v1/reports/", {"period": "daily"}))
    assert listed["count"] == 1 and "data" not in listed["results"][0] and listed["results"][0]["title"]
    report = ok(api.get(f"/api/v1/reports/{objects['report']}/"))
    assert report["title"] == listed["results"][0]["title"] and report["data"]["title"] == report["title"]
    assert ok(api.get("/api/v1/reports/", {"period": "weekly"}))["count"] == 0


def test_the_long_lists_rows_are_the_detail_endpoints_rows(api, objects):
    """The long lists build their rows from plain values (fast at 500 a page): the same shape and values as the
    serializers that document them and serve one object."""
    for listing, detail in [
        ("/api/v1/clusters/", f"/api/v1/clusters/{objects['cluster']}/"),
        ("/api/v1/servers/", f"/api/v1/servers/{objects['server']}/"),
        ("/api/v1/proxysql-nodes/", f"/api/v1/proxysql-nodes/{objects['node']}/"),
    ]:
        assert ok(api.get(listing))["results"] == [ok(api.get(detail))], listing
    row = ok(api.get("/api/v1/operations/"))["results"][0]
    one = ok(api.get(f"/api/v1/operations/{objects['operation']}/"))
    assert row == {k: v for k, v in one.items() if k not in ("plan", "steps", "pending_rollbacks")}
