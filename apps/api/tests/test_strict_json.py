"""JSON bodies nested thousands deep, or holding a lone surrogate, are a 400 on every POST endpoint (issue 22: a
RecursionError 500; a change set saved with "\\ud800" in a row, then a 500 on every page and plan of it)."""

import pytest

from apps.configuration.models import ChangeSet

from .test_hostile_input import admin_api, endpoints, fails  # noqa: F401


@pytest.mark.django_db
def test_deep_or_surrogate_bodies_are_refused_by_every_post_endpoint(admin_api, objects, settings):
    settings.API_THROTTLE_RATES = {"read": "1000000/min", "write": "1000000/min"}
    deep = "[" * 20_000 + "]" * 20_000
    fairly_deep = '{"reason": ' + "[" * 40 + "]" * 40 + "}"
    surrogate = (
        '{"reason": "x", "edits": [{"op": "upsert", "table": "mysql_servers", "key": [101, "h", 3306], '
        '"row": {"comment": "\\ud800"}}]}'
    )
    before = ChangeSet.objects.count()
    urls = list(endpoints(objects, "post"))
    reading = [url for url in urls if url.endswith("/config/change-sets/")]  # one that reads edits[].row
    assert len(urls) > 10 and len(reading) == 1
    for url in urls:
        for body, words in (
            (deep, "nested more than 32 levels"),
            (fairly_deep, "nested more than 32 levels"),
            (surrogate, "lone surrogate"),
        ):
            response = admin_api.post(url, body)
            assert not fails(response), (url, response.status_code, response.content[:200])
            if response.status_code == 400 or url in reading:  # an endpoint that read the body says why
                assert words in response.json()["error"]["message"], (url, response.json())
    assert ChangeSet.objects.count() == before
