"""Every page and endpoint, as an admin, with hostile query strings: a page or a clear 4xx, never a 500.
(POST forms are fuzzed beside their apps: fleet, operations, reports.)"""

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .hostile import BOUNDARY_DATES, HUGE_NUMBERS, boundary_date, hostile_number, hostile_text
from .test_url_permissions import NOT_ROLE_CHECKED, kwargs_for, objects, url_patterns  # noqa: F401

PARAMS = [
    "page",
    "q",
    "search",
    "sort",
    "order",
    "dir",
    "range",
    "from",
    "to",
    "start",
    "end",
    "window",
    "cluster",
    "node",
    "hostgroup",
    "user",
    "schema",
    "action",
    "outcome",
    "actor",
    "target",
    "attention",
    "format",
    "period",
    "hostname",  # the cluster page's backend filter, with port and maintenance
    "port",
    "maintenance",
]


@pytest.mark.django_db
@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    params=st.dictionaries(
        st.sampled_from(PARAMS),
        st.one_of(hostile_text.filter(lambda t: len(t) < 20_000), hostile_number, boundary_date),
        max_size=5,
    )
)
def test_no_get_endpoint_fails_on_hostile_query_strings(client, admin_user_role, objects, params):
    client.force_login(admin_user_role)
    failures = []
    for name, pattern in url_patterns():
        if name in NOT_ROLE_CHECKED:
            continue
        url = reverse(name, kwargs=kwargs_for(name, pattern, objects))
        status = client.get(url, params).status_code
        if status >= 500:
            failures.append(f"GET {url} {params!r}: {status}")
    assert not failures, "\n".join(failures)


DATE_PARAMS = ("start", "end", "from", "to")
NUMBER_PARAMS = ("page", "before", "after", "event", "cluster", "node", "hostgroup", "id", "a", "b", "number", "port")


def boundary_queries(cluster_pk):
    """Query strings that put boundary dates and huge numbers into every date and number parameter,
    with a real cluster (the incident view only reads its window for one)."""
    for value in BOUNDARY_DATES:
        yield {"cluster": cluster_pk, "window": "custom", "start": value, "from": value}  # the end follows the start
        yield {"cluster": cluster_pk, "window": "custom", "end": value, "to": value}  # the start precedes the end
    for start, end in (
        ("0001-01-01", "9999-12-31T23:59:59"),
        ("9999-12-31T23:00", "9999-12-31T23:59:59"),
        ("0001-01-01T00:00", "0001-01-01T00:30"),
        ("9999-12-01", "9999-12-31"),
    ):
        yield {"cluster": cluster_pk, "window": "custom", "start": start, "end": end, "from": start, "to": end}
    for value in HUGE_NUMBERS:
        yield {name: value for name in NUMBER_PARAMS}
        yield {"cluster": cluster_pk, "event": value, "before": value, "after": value}


@pytest.mark.django_db
def test_boundary_dates_and_huge_numbers_get_a_message_never_a_500(client, admin_user_role, objects):
    client.force_login(admin_user_role)
    client.raise_request_exception = False  # list every 500, not only the first
    failures = []
    for name, pattern in url_patterns():
        if name in NOT_ROLE_CHECKED:
            continue
        url = reverse(name, kwargs=kwargs_for(name, pattern, objects))
        for params in boundary_queries(objects["cluster"]):
            status = client.get(url, params).status_code
            if status >= 500:
                failures.append(f"GET {url} {params!r}: {status}")
    assert not failures, "\n".join(failures[:40]) + f"\n({len(failures)} in all)"
