"""Hostile input to every API endpoint, as an admin (who gets furthest): query strings on every GET, JSON
bodies (and bodies that are not JSON) on every POST, odd path segments. A 4xx in the error shape, or a
2xx: never a 500."""

import json

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accounts import tokens
from apps.accounts.tests.hostile import BOUNDARY_DATES, HUGE_NUMBERS, boundary_date, hostile_number, hostile_text
from apps.configuration.tables import TABLES as REAL_TABLES

from .conftest import ApiClient, api_patterns, kwargs_for, view_class

PARAMS = [
    "page",
    "page_size",
    "cluster",
    "node",
    "hostgroup",
    "user",
    "schema",
    "q",
    "sort",
    "dir",
    "window",
    "start",
    "end",
    "range",
    "resolution",
    "a",
    "b",
    "before",
    "after",
    "actor",
    "action",
    "target",
    "outcome",
    "kind",
    "state",
    "hostname",
    "port",
    "maintenance",
    "name",
    "period",
    "format",
    "lang",
    "version",
    "script",
]
FIELDS = [
    "new_writer",
    "drain_timeout_ms",
    "on_timeout",
    "lower_autoinc",
    "old_writer_to",
    "note",
    "node",
    "override_reason",
    "reason",
    "edits",
    "file",
    "expect_version",
]
EXAMPLES = 12
fuzz = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    hostile_text.filter(lambda t: len(t) < 20_000),
    hostile_number,
    boundary_date,
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12,
)
TABLES = [
    "mysql_servers",
    "mysql_users",
    "mysql_query_rules",
    "scheduler",
    "mysql_galera_hostgroups",
    "mysql_replication_hostgroups",
    "global_variables",
    "nope",
]
COLUMNS = [
    "hostgroup_id",
    "hostname",
    "port",
    "status",
    "weight",
    "username",
    "password",
    "active",
    "rule_id",
    "match_digest",
    "destination_hostgroup",
    "id",
    "filename",
    "interval_ms",
    "writer_hostgroup",
    "comment",
]
hostile_edit = st.fixed_dictionaries(
    {"op": st.sampled_from(["upsert", "delete", "set", "roles", "other"])},
    optional={
        "table": st.sampled_from(TABLES),
        "row": st.dictionaries(st.sampled_from(COLUMNS), json_value, max_size=6),
        "key": st.lists(json_value, max_size=4),
        "name": st.one_of(
            hostile_text,
            st.sampled_from(["mysql-max_connections", "mysql-monitor_password", "mysql-threads", "admin-version"]),
        ),
        "value": json_value,
        "roles": st.dictionaries(st.sampled_from(["writer", "reader", "offline", "x"]), json_value, max_size=4),
    },
)


def plausible_row(table):
    """A row of a real table: every column present, each a plausible value or a hostile one."""

    def value(col):
        plausible = (
            st.sampled_from(col.choices)
            if col.choices
            else st.integers(min_value=(col.min or 0), max_value=col.max or 2**31 - 1)
            if col.type == "int"
            else st.sampled_from(["127.0.0.1", "app", "^SELECT", "(unclosed", "x" * 300])
        )
        return st.one_of(plausible, plausible, json_scalar)

    return st.fixed_dictionaries({c.name: value(c) for c in table.columns})


real_upsert = st.sampled_from(REAL_TABLES).flatmap(
    lambda t: st.fixed_dictionaries({"op": st.just("upsert"), "table": st.just(t.name), "row": plausible_row(t)})
)
real_set = st.fixed_dictionaries(
    {
        "op": st.just("set"),
        "name": st.sampled_from(
            [
                "mysql-max_connections",
                "mysql-monitor_password",
                "mysql-threads",
                "admin-version",
                "mysql-query_retries_on_failure",
                "mysql-default_query_timeout",
                "mysql-server_version",
            ]
        ),
        "value": st.one_of(hostile_number, hostile_text),
    }
)
hostile_edit = st.one_of(hostile_edit, real_upsert, real_upsert, real_set)
hostile_body = st.dictionaries(
    st.sampled_from(FIELDS), st.one_of(json_value, st.lists(hostile_edit, max_size=4)), max_size=5
)


def endpoints(objects, method):
    for name, pattern in api_patterns():
        cls = view_class(pattern)
        if cls is not None and method in cls.roles:
            yield reverse(name, kwargs=kwargs_for(name, pattern, objects))


@pytest.fixture
def admin_api(admin_user_role):
    return ApiClient(tokens.create(admin_user_role, "fuzz")[1])


def fails(response):
    if response.status_code >= 500:
        return True
    if response["Content-Type"] == "application/json" and response.status_code >= 400:
        return set(response.json()) != {"error"}  # a 4xx in another shape
    return False


@pytest.mark.django_db
@fuzz
@given(
    params=st.dictionaries(
        st.sampled_from(PARAMS),
        st.one_of(hostile_text.filter(lambda t: len(t) < 20_000), hostile_number, boundary_date),
        max_size=5,
    )
)
def test_no_get_endpoint_fails_on_hostile_query_strings(admin_api, objects, settings, params):
    settings.API_THROTTLE_RATES = {"read": "1000000/min", "write": "1000000/min"}
    failures = [
        f"GET {url} {params!r}: {r.status_code}"
        for url in endpoints(objects, "get")
        if fails(r := admin_api.get(url, params))
    ]
    assert not failures, "\n".join(failures)


@pytest.mark.django_db
def test_boundary_dates_and_huge_numbers_get_a_400_never_a_500(admin_api, objects, settings):
    settings.API_THROTTLE_RATES = {"read": "1000000/min", "write": "1000000/min"}
    queries = [
        {name: value for name in ("start", "end", "before", "after", "a", "b", "page", "cluster", "node")}
        for value in BOUNDARY_DATES + HUGE_NUMBERS
    ]
    queries += [{"window": "custom", "start": s, "end": e} for s in BOUNDARY_DATES for e in BOUNDARY_DATES[:3]]
    failures = [
        f"GET {url} {q!r}: {r.status_code}"
        for url in endpoints(objects, "get")
        for q in queries
        if fails(r := admin_api.get(url, q))
    ]
    assert not failures, "\n".join(failures[:40]) + f"\n({len(failures)} in all)"


@pytest.mark.django_db
@fuzz
@given(data=hostile_body)
def test_no_post_endpoint_fails_on_hostile_json(admin_api, objects, settings, data):
    settings.API_THROTTLE_RATES = {"read": "1000000/min", "write": "1000000/min"}
    failures = [
        f"POST {url} {json.dumps(data)[:300]}: {r.status_code} {r.content[:300]!r}"
        for url in endpoints(objects, "post")
        if fails(r := admin_api.post(url, data))
    ]
    assert not failures, "\n".join(failures)


@pytest.mark.django_db
@fuzz
@given(
    raw=st.one_of(st.binary(max_size=200), hostile_text.filter(lambda t: len(t) < 20_000).map(str.encode)),
    content_type=st.sampled_from(
        ["application/json", "multipart/form-data; boundary=x", "text/yaml", "application/json; charset=utf-8", ""]
    ),
)
def test_no_post_endpoint_fails_on_bodies_that_are_not_json(admin_api, objects, settings, raw, content_type):
    settings.API_THROTTLE_RATES = {"read": "1000000/min", "write": "1000000/min"}
    failures = [
        f"POST {url} {raw[:100]!r} as {content_type!r}: {r.status_code}"
        for url in endpoints(objects, "post")
        if fails(r := admin_api.post(url, raw, content_type=content_type))
    ]
    assert not failures, "\n".join(failures)


@pytest.mark.django_db
def test_odd_path_segments_are_json_404s(admin_api, objects):
    for path in [
        "/api/v1/proxysql-nodes/%d/history/%s/" % (objects["node"], "x" * 300),
        "/api/v1/servers/%d/history/queries/" % objects["server"],
        "/api/v1/clusters/-1/",
        "/api/v1/clusters/0/",
        "/api/v1/digests/1e3/",
        "/api/v1/clusters/%E2%80%AE/",
        "/api/v1/../admin/",
        "/api/v1/clusters/1/%00/",
    ]:
        response = admin_api.get(path)
        assert response.status_code == 404 and set(response.json()) == {"error"}, path


@pytest.mark.django_db
@fuzz
@given(edits=st.lists(hostile_edit, min_size=1, max_size=4))
def test_hostile_edits_of_a_change_set_are_refused_with_a_reason(admin_api, objects, settings, edits):
    settings.API_THROTTLE_RATES = {"read": "1000000/min", "write": "1000000/min"}
    url = f"/api/v1/clusters/{objects['cluster']}/config/change-sets/"
    response = admin_api.post(url, {"reason": "fuzz", "edits": edits})
    assert not fails(response), (response.status_code, response.content[:500])
    if response.status_code == 201:  # it applied: planning it must not fail either
        plan = admin_api.post(f"/api/v1/config/change-sets/{response.json()['id']}/plan/")
        assert not fails(plan), (plan.status_code, plan.content[:500])


@pytest.mark.django_db
def test_a_user_name_of_ten_thousand_characters_is_refused_or_stored_never_a_500(admin_api, objects):
    """Found by the fuzzer on MariaDB: the secret's reference was built from the name and overflowed its column."""
    row = {"username": "x" * 10_000, "password": "pw", "default_hostgroup": 100}
    response = admin_api.post(
        f"/api/v1/clusters/{objects['cluster']}/config/change-sets/",
        {"reason": "long name", "edits": [{"op": "upsert", "table": "mysql_users", "row": row}]},
    )
    assert response.status_code in (201, 409), response.content[:300]


def test_the_schema_ignores_a_version_parameter_even_a_hostile_one(admin_api):
    """Found by the fuzzer: ?version=%0D%0A reached the schema's Content-Disposition header and answered 500."""
    plain = admin_api.get("/api/v1/schema/")
    assert plain.status_code == 200
    for version in ("\r\n", "v1\nX-Injected: 1", "9" * 5000, "v2"):
        response = admin_api.get("/api/v1/schema/", {"version": version})
        assert response.status_code == 200, (version[:20], response.status_code)
        assert response.content == plain.content and "\n" not in response.get("Content-Disposition", "")
