"""Every page and endpoint, as an admin, with hostile query strings: a page or a clear 4xx, never a 500.
(POST forms are fuzzed beside their apps: fleet, operations, reports.)"""
import pytest
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .hostile import hostile_number, hostile_text
from .test_url_permissions import NOT_ROLE_CHECKED, kwargs_for, objects, url_patterns  # noqa: F401

PARAMS = ["page", "q", "search", "sort", "order", "dir", "range", "from", "to", "start", "end", "window", "cluster",
          "node", "hostgroup", "user", "schema", "action", "outcome", "actor", "target", "attention", "format", "period"]


@pytest.mark.django_db
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(params=st.dictionaries(st.sampled_from(PARAMS), st.one_of(hostile_text.filter(lambda t: len(t) < 20_000),
                                                                   hostile_number), max_size=5))
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
