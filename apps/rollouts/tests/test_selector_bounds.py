"""A rollout's selector through the API is bounded before anything is read (issue 34: no request whose cost a
user's input makes unbounded): each tag of `select.tags` was one more nested subquery, any number of them, keys and
values unchecked (the command line's parse_selector checks them, the API did not)."""

import time

import pytest

from apps.api.tests.conftest import error_of, token_client
from apps.fleet.models import Cluster

pytestmark = pytest.mark.django_db

EDIT = {
    "op": "upsert",
    "table": "mysql_query_rules",
    "row": {"rule_id": 77, "active": 1, "match_digest": "^SELECT x", "destination_hostgroup": 101, "apply": 1},
}


def test_a_selector_of_thousands_of_tags_is_refused_at_once(operator_user):
    """Before: a 500 after about a minute of CPU (20,000 nested subqueries)."""
    Cluster.objects.create(name="c1", writer_hostgroup=100, reader_hostgroup=101)
    api = token_client(operator_user)
    started = time.monotonic()
    refused = api.post(
        "/api/v1/rollouts/", {"reason": "r", "edits": [EDIT], "select": {"tags": {f"k{i}": "v" for i in range(20_000)}}}
    )
    took = time.monotonic() - started
    assert "at most 20 tags" in str(error_of(refused, 400)["fields"]).lower(), refused.content[:300]
    assert took < 5, took


@pytest.mark.parametrize("key, value", [("env\r\nx", "prod"), ("env", "pro\u200bd"), ("", "prod"), ("env", "a,b")])
def test_a_selector_tag_is_checked_as_a_clusters_tag_is(operator_user, key, value):
    Cluster.objects.create(name="c1", writer_hostgroup=100, reader_hostgroup=101)
    api = token_client(operator_user)
    refused = error_of(
        api.post("/api/v1/rollouts/", {"reason": "r", "edits": [EDIT], "select": {"tags": {key: value}}}), 400
    )
    assert "select.tags" in refused["fields"], refused
