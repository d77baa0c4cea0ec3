"""The review page: filters, free-text search, keyset paging, exports, roles, hostile input."""

import csv
import io
import json
from datetime import timedelta

import pytest
from django.urls import reverse

from apps.audit import search, selectors
from apps.audit.models import AuditEvent, AuditSearchToken
from apps.audit.services import append_event, verify_chain

pytestmark = pytest.mark.django_db


@pytest.fixture
def log(at, clusters):
    alpha, beta = clusters
    at(
        200,
        "change hostgroupmembership",
        actor="ada",
        cluster=alpha,
        target="127.0.0.1:23300",
        details={"changed": {"weight": [1000, 10]}},
    )
    at(
        150,
        "drain planned",
        actor="otto",
        cluster=alpha,
        target="Drain 127.0.0.1:23300",
        details={"operation": 7, "ticket": "INC-4821"},
    )
    at(
        140,
        "drain done",
        actor="otto",
        cluster=alpha,
        target="Drain 127.0.0.1:23300",
        duration_ms=123.4,
        details={"operation": 7},
    )
    at(
        100,
        "adopt proxysql node",
        actor="ada",
        cluster=beta,
        target="px-beta (127.0.0.1:17001)",
        details={"admin_password": "s3cret-pw", "hostgroups": [10, 11]},
    )
    at(
        90,
        "read-pool alert",
        actor="read-pool rules",
        kind="rule",
        cluster=alpha,
        outcome="failure",
        details={"alerts": ["only 0 reader(s) left in hostgroup 11, minimum 1"]},
    )
    at(
        30,
        "refused drain_view",
        cluster=alpha,
        outcome="refused",
        details={"needed_role": "operator", "path": "/operations/", "method": "POST"},
    )
    at(
        20,
        "switchover done",
        actor="otto",
        cluster=beta,
        target="Switchover beta",
        details={
            "statements": {
                "px-beta": ["UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostname='127.0.0.1' AND port=23301"]
            },
            "note": "Zürich café",
        },
    )
    at(10, "login")
    return alpha, beta


def shown(client, **params):
    response = client.get(reverse("audit:list"), params)
    assert response.status_code == 200
    return [e.action for e in response.context["page"].events]


def test_newest_first_and_each_filter(viewer_client, log):
    alpha, beta = log
    assert shown(viewer_client) == [
        "login",
        "switchover done",
        "refused drain_view",
        "read-pool alert",
        "adopt proxysql node",
        "drain done",
        "drain planned",
        "change hostgroupmembership",
    ]
    assert shown(viewer_client, cluster=beta.pk) == ["switchover done", "adopt proxysql node"]
    assert shown(viewer_client, actor="otto") == ["switchover done", "drain done", "drain planned"]
    assert shown(viewer_client, actor="read-pool rules") == ["read-pool alert"]
    assert shown(viewer_client, outcome="refused") == ["refused drain_view"]
    assert shown(viewer_client, action="drain done") == ["drain done"]
    assert shown(viewer_client, target="23300") == ["drain done", "drain planned", "change hostgroupmembership"]
    assert shown(viewer_client, target="PX-BETA") == ["adopt proxysql node"]


def test_time_window_and_quick_ranges(viewer_client, log, at):
    fmt = "%Y-%m-%dT%H:%M:%S"
    start, end = at.now - timedelta(minutes=160), at.now - timedelta(minutes=95)
    assert shown(viewer_client, start=start.strftime(fmt), end=end.strftime(fmt)) == [
        "adopt proxysql node",
        "drain done",
        "drain planned",
    ]
    assert shown(viewer_client, range="1h") == ["login", "switchover done", "refused drain_view"]
    assert shown(viewer_client, range="1h", cluster=log[0].pk) == ["refused drain_view"]
    # explicit times win over a quick range; "to" alone bounds the end only
    assert shown(viewer_client, range="1h", end=(at.now - timedelta(minutes=145)).strftime(fmt)) == [
        "drain planned",
        "change hostgroupmembership",
    ]


@pytest.mark.parametrize("index_limit", [search.DRIVER_LIMIT, 0], ids=["through-the-index", "walking-the-log"])
def test_free_text_search(viewer_client, log, monkeypatch, index_limit):
    monkeypatch.setattr(search, "DRIVER_LIMIT", index_limit)  # both plans must give the same answers
    assert shown(viewer_client, q="INC-4821") == ["drain planned"]
    assert shown(viewer_client, q="inc-4821") == ["drain planned"]
    assert shown(viewer_client, q="switch") == ["switchover done"]  # beginnings of words
    assert shown(viewer_client, q="port=23301") == ["switchover done"]  # inside the details' SQL
    assert shown(viewer_client, q="127.0.0.1:23300") == ["drain done", "drain planned", "change hostgroupmembership"]
    assert shown(viewer_client, q="zürich") == ["switchover done"]
    assert shown(viewer_client, q='"only 0 reader"') == ["read-pool alert"]  # a quoted phrase
    assert shown(viewer_client, q="otto drain") == ["drain done", "drain planned"]  # every term, any field
    assert shown(viewer_client, q="needed_role operator") == ["refused drain_view"]  # keys and values
    assert shown(viewer_client, q="10.0.0.7 login") == ["login"]  # source address
    assert shown(viewer_client, q="s3cret") == []  # credentials never reached the log
    assert shown(viewer_client, q="nothing-like-this") == []
    assert shown(viewer_client, q="otto", cluster=log[1].pk, range="1h") == ["switchover done"]
    assert shown(viewer_client, q="x") == ["switchover done", "adopt proxysql node"]  # one letter: the LIKE alone


def test_every_event_is_indexed_and_the_index_is_not_hashed(log):
    event = AuditEvent.objects.get(action="switchover done")
    tokens = set(AuditSearchToken.objects.filter(event=event).values_list("token", flat=True))
    assert {"switchover", "otto", "beta", "127.0.0.1", "23301", "zürich", "café", "offline_soft"} <= tokens
    assert "zürich café" in event.search_text
    assert verify_chain()[1] is None  # search_text and tokens are outside the hash


def test_keyset_pages_walk_the_whole_log_both_ways(viewer_client, at):
    same_time = at.now - timedelta(minutes=500)
    for i in range(60):
        at(400 - i, f"step {i}")
    for i in range(30):  # ties on created_at are ordered by id
        append_event(created_at=same_time, actor="tie", actor_kind="system", action=f"tie {i}")
    expected = list(AuditEvent.objects.order_by("-created_at", "-id").values_list("pk", flat=True))
    seen, url = [], reverse("audit:list")
    pages = 0
    while url:
        response = viewer_client.get(url)
        seen += [e.pk for e in response.context["page"].events]
        url = response.context["older_url"] and reverse("audit:list") + response.context["older_url"]
        pages += 1
    assert seen == expected and pages == 2
    back = []
    response = viewer_client.get(reverse("audit:list"), {"before": expected[49]})  # the second page
    back += [e.pk for e in response.context["page"].events]
    response = viewer_client.get(reverse("audit:list") + response.context["newer_url"])
    assert [e.pk for e in response.context["page"].events] == expected[:50]
    assert response.context["newer_url"] is None and back == expected[50:]


def test_list_page_query_count_does_not_grow(viewer_client, log, at, django_assert_max_num_queries):
    for i in range(120):
        at(300 + i, "login", actor=f"user{i % 7}")
    with django_assert_max_num_queries(12):
        viewer_client.get(reverse("audit:list"), {"q": "login", "outcome": "success", "range": "7d"})


def test_csv_export_of_the_filtered_set(viewer_client, log):
    response = viewer_client.get(reverse("audit:export_csv"), {"cluster": log[1].pk})
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"].startswith("text/csv") and "attachment" in response["Content-Disposition"]
    body = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert [r["action"] for r in rows] == ["switchover done", "adopt proxysql node"]
    assert list(rows[0]) == list(selectors.EXPORT_FIELDS)
    adopt = json.loads(rows[1]["details"])
    assert adopt == {"admin_password": "(hidden)", "hostgroups": [10, 11]} and "s3cret" not in body
    assert rows[0]["cluster_name"] == "beta" and len(rows[0]["hash"]) == 64
    assert json.loads(rows[0]["details"])["note"] == "Zürich café"
    exported = AuditEvent.objects.get(action="export audit log")  # exports are audited
    assert exported.actor == "vera-viewer" and exported.details == {
        "format": "csv",
        "filters": {"cluster": str(log[1].pk)},
        "up_to_event": exported.pk - 1,
    }


def test_json_export_streams_in_chunks(viewer_client, log, monkeypatch):
    monkeypatch.setattr(selectors, "EXPORT_CHUNK", 3)
    response = viewer_client.get(reverse("audit:export_json"), {"q": "otto"})
    data = json.loads(b"".join(response.streaming_content))
    assert data["filters"] == {"q": "otto"}
    assert [e["action"] for e in data["events"]] == ["switchover done", "drain done", "drain planned"]
    assert data["events"][2]["details"] == {"operation": 7, "ticket": "INC-4821"}
    everything = json.loads(b"".join(viewer_client.get(reverse("audit:export_json")).streaming_content))
    ids = [e["id"] for e in everything["events"]]
    assert len(ids) == len(set(ids)) == AuditEvent.objects.count() - 1  # 8 and the first export's event


def test_roles_viewer_reads_admin_verifies(client, viewer_user, operator_user, admin_user_role, log):
    event = AuditEvent.objects.get(action="drain done")
    client.force_login(viewer_user)
    for url in (
        reverse("audit:list"),
        reverse("audit:detail", args=[event.pk]),
        reverse("pages:incident"),
        reverse("pages:incident") + f"?cluster={log[0].pk}",
        reverse("audit:export_csv"),
    ):
        assert client.get(url).status_code == 200, url
    assert client.get(reverse("audit:verify")).status_code == 403
    assert client.post(reverse("audit:verify")).status_code == 403
    refusal = AuditEvent.objects.filter(action="refused verify").latest("id")
    assert refusal.outcome == "refused" and refusal.actor == "vera-viewer"
    client.force_login(operator_user)
    assert client.get(reverse("audit:verify")).status_code == 403
    client.force_login(admin_user_role)
    assert client.get(reverse("audit:verify")).status_code == 200
    page = client.get(reverse("audit:list")).content.decode()
    link = f'href="{reverse("audit:verify")}"'
    assert link in page  # admins get the link; viewers do not
    client.force_login(viewer_user)
    assert link not in client.get(reverse("audit:list")).content.decode()


HOSTILE = [
    {"q": "a\x00b"},
    {"q": "' OR 1=1 --"},
    {"q": "x" * 5000},
    {"actor": "\x00"},
    {"target": "%_%"},
    {"start": "yesterday"},
    {"start": "2026-13-45T99:99"},
    {"end": "2020-01-01", "start": "2021-01-01"},
    {"cluster": "999999"},
    {"cluster": "x"},
    {"outcome": "nope"},
    {"range": "5y"},
    {"before": "abc"},
    {"after": "99999999999999999999"},
    {"q": "\U0001f600 é \u202e"},
    {"action": "a" * 200},
]


def test_hostile_filters_never_fail(viewer_client, log):
    for params in HOSTILE:
        response = viewer_client.get(reverse("audit:list"), params)
        assert response.status_code == 200, params
        for name in ("audit:export_csv", "audit:export_json", "pages:incident"):
            if name == "pages:incident" and "cluster" not in params:
                params = {**params, "cluster": log[0].pk}
            response = viewer_client.get(reverse(name), params)
            assert response.status_code == 200, (name, params)
            if response.streaming:
                b"".join(response.streaming_content)


def test_percent_and_underscore_are_literal(viewer_client, at):
    at(5, "change comment", target="50% off_peak")
    at(4, "change comment", target="500 offXpeak")
    assert shown(viewer_client, target="0% off_") == ["change comment"]
    assert shown(viewer_client, q="50% off_peak") == ["change comment"]


def test_csv_cells_that_a_spreadsheet_would_run_are_neutralised(viewer_client, at):
    at(3, '=HYPERLINK("http://evil.example/","x")', actor="@SUM(1+1)", target="+cmd|' /C calc'!A0")
    at(2, "-2+3", actor="\tlead", target="\r=1+1")
    at(1, "plain action", actor="vera", target="a=b-c", duration_ms=-1.5)
    body = b"".join(viewer_client.get(reverse("audit:export_csv")).streaming_content).decode()
    rows = {r["action"].lstrip("'"): r for r in csv.DictReader(io.StringIO(body))}
    first, second, plain = rows['=HYPERLINK("http://evil.example/","x")'], rows["-2+3"], rows["plain action"]
    assert (first["action"], first["actor"], first["target"]) == (
        '\'=HYPERLINK("http://evil.example/","x")',
        "'@SUM(1+1)",
        "'+cmd|' /C calc'!A0",
    )
    assert (second["action"], second["actor"], second["target"]) == ("'-2+3", "'\tlead", "'\r=1+1")
    assert (plain["action"], plain["actor"], plain["target"], plain["duration_ms"]) == (
        "plain action",
        "vera",
        "a=b-c",
        "-1.5",
    )  # untouched: only a leading formula character counts
    assert not [
        cell
        for r in csv.reader(io.StringIO(body))
        for cell in r
        if cell[:1] in ("=", "+", "-", "@", "\t", "\r") and cell != "-1.5"
    ]
