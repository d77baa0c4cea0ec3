"""One error shape for every status; the limits: page sizes, request size (413), rates per token (429 with
Retry-After) counted in Redis, and in local memory while Redis does not answer; Redis down never a 500."""

import pytest
from django.core.cache import caches

from apps.accounts import tokens
from apps.api import errors
from apps.api.throttling import PerTokenThrottle

from .conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(viewer_user):
    return ApiClient(tokens.create(viewer_user, "t")[1])


@pytest.fixture
def operator_api(operator_user):
    return ApiClient(tokens.create(operator_user, "t")[1])


def test_each_status_has_the_one_shape(api, operator_api, objects):
    assert error_of(api.get("/api/v1/no/such/endpoint/"), 404)["code"] == "not_found"
    assert error_of(api.get("/api/nothing"), 404)["code"] == "not_found"  # outside v1 too: JSON, not a page
    assert error_of(api.get("/api/v1/clusters/999999/"), 404)["code"] == "not_found"
    assert error_of(api.get("/api/v1/clusters/" + "9" * 30 + "/"), 404)["code"] == "not_found"
    put = api.request("put", f"/api/v1/clusters/{objects['cluster']}/")
    assert error_of(put, 405)["code"] == "method_not_allowed" and put["Allow"] == "GET, HEAD"
    options = api.request("options", "/api/v1/clusters/")
    assert error_of(options, 405)["code"] == "method_not_allowed"
    bad_json = operator_api.post(f"/api/v1/clusters/{objects['cluster']}/switchover/", "{nope")
    assert error_of(bad_json, 400)["code"] == "invalid"
    text = operator_api.post(f"/api/v1/clusters/{objects['cluster']}/switchover/", "x", content_type="text/plain")
    assert error_of(text, 415)["code"] == "unsupported_media_type"
    array = operator_api.post(f"/api/v1/clusters/{objects['cluster']}/switchover/", "[1, 2]")
    assert error_of(array, 400)["fields"] == {"non_field_errors": ["The body must be a JSON object."]}
    invalid = operator_api.post(
        f"/api/v1/clusters/{objects['cluster']}/switchover/",
        {"new_writer": "x", "drain_timeout_ms": 10, "on_timeout": "later"},
    )
    error = error_of(invalid, 400)
    assert set(error["fields"]) == {"new_writer", "drain_timeout_ms", "on_timeout"}
    assert "greater than or equal to 50" in error["fields"]["drain_timeout_ms"][0]
    other_cluster = operator_api.post(f"/api/v1/clusters/{objects['cluster']}/switchover/", {"new_writer": 999})
    assert error_of(other_cluster, 400)["fields"] == {"new_writer": ["No backend #999 in cluster perm."]}
    nested = operator_api.post(
        f"/api/v1/clusters/{objects['cluster']}/config/change-sets/",
        {"reason": "r", "edits": [{"op": "upsert", "table": "mysql_servers", "row": {}}, {"op": "nope"}]},
    )
    assert set(error_of(nested, 400)["fields"]) == {"edits.1.op"}
    refused = operator_api.post(f"/api/v1/operations/{objects['operation']}/cancel/")
    assert error_of(refused, 409) == {
        "code": "refused",
        "message": "Too late to cancel: the operation finished or passed its point of no return.",
    }


def test_an_unexpected_exception_is_a_500_in_the_shape_without_a_traceback():
    response = errors.exception_handler(ZeroDivisionError("secret detail"), {"request": None, "view": None})
    assert response.status_code == 500
    body = response.content.decode()
    assert '"code":"internal_error"' in body and "secret detail" not in body and "Traceback" not in body


def test_page_sizes_are_bounded(api, objects, settings):
    assert api.get("/api/v1/clusters/", {"page_size": 500}).status_code == 200
    assert error_of(api.get("/api/v1/clusters/", {"page_size": 501}), 400)["fields"] == {
        "page_size": ["A whole number from 1 to 500."]
    }
    assert set(error_of(api.get("/api/v1/clusters/", {"page": 2}), 400)["fields"]) == {"page"}
    assert set(error_of(api.get("/api/v1/clusters/", {"page": "9" * 5000}), 400)["fields"]) == {"page"}
    settings.API_PAGE_SIZE = 1
    page = api.get("/api/v1/operations/").json()
    assert page["count"] == 1 and len(page["results"]) == 1 and page["next"] is None


def test_a_body_over_the_limit_is_413_before_it_is_read(operator_api, objects, settings):
    settings.API_MAX_REQUEST_BYTES = 1000
    url = f"/api/v1/clusters/{objects['cluster']}/config/change-sets/"
    big = operator_api.post(url, {"reason": "x" * 2000, "edits": []})
    assert error_of(big, 413)["code"] == "request_too_large"
    small = operator_api.post(url, {"reason": "x"})
    assert small.status_code == 400  # within the limit: read and validated


def test_rates_are_per_token_with_retry_after(viewer_user, operator_user, objects, settings):
    settings.API_THROTTLE_RATES = {"read": "3/min", "write": "1/min"}
    caches["api-throttle-local"].clear()
    PerTokenThrottle.cache.down_until = 0
    first, second = ApiClient(tokens.create(viewer_user, "a")[1]), ApiClient(tokens.create(viewer_user, "b")[1])
    assert [first.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]
    limited = first.get("/api/v1/me/")
    assert error_of(limited, 429)["code"] == "throttled" and 1 <= int(limited["Retry-After"]) <= 60
    assert second.get("/api/v1/me/").status_code == 200  # another token of the same user counts apart
    writer = ApiClient(tokens.create(operator_user, "w")[1])
    assert writer.post(f"/api/v1/operations/{objects['operation']}/cancel/").status_code == 409
    assert writer.post(f"/api/v1/operations/{objects['operation']}/cancel/").status_code == 429
    assert writer.get("/api/v1/me/").status_code == 200  # reads and writes are counted apart


def test_rates_count_in_redis_and_in_local_memory_when_redis_is_down(viewer_user, settings, redis_server, live_redis):
    settings.API_THROTTLE_RATES = {"read": "2/min", "write": "1/min"}
    settings.CACHES = {**settings.CACHES, "api-throttle": {**settings.CACHES["api-throttle"], "LOCATION": redis_server}}
    PerTokenThrottle.cache.down_until = 0
    token, raw = tokens.create(viewer_user, "a")
    api = ApiClient(raw)
    assert [api.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 429]
    assert any(b"throttle-read-token-" in key for key in live_redis.keys("*"))  # shared by every web process

    settings.CACHES = {
        **settings.CACHES,
        "api-throttle": {**settings.CACHES["api-throttle"], "LOCATION": "redis://127.0.0.1:9/0"},
    }  # nothing listens
    caches["api-throttle-local"].clear()
    assert [api.get("/api/v1/me/").status_code for _ in range(3)] == [200, 200, 429]  # no 500: counted locally
    assert PerTokenThrottle.cache.down_until > 0


def test_latest_state_says_unavailable_when_redis_is_down(api, objects, settings):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"
    for url in (
        f"/api/v1/proxysql-nodes/{objects['node']}/state/",
        f"/api/v1/servers/{objects['server']}/state/",
        f"/api/v1/clusters/{objects['cluster']}/state/",
    ):
        response = api.get(url)
        assert response.status_code == 200 and "127.0.0.1:9" in response.json()["unavailable"], url


def test_json_bodies_stop_at_djangos_upload_limit_and_a_big_file_goes_as_an_upload(operator_api, objects, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 2000
    url = f"/api/v1/clusters/{objects['cluster']}/config/change-sets/"
    big = operator_api.post(url, {"reason": "r", "file": "# " + "x" * 3000})
    assert "multipart upload" in error_of(big, 413)["message"]
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("perm.yaml", ("# " + "x" * 3000 + "\n").encode())
    response = operator_api.client.post(url, {"reason": "from a file", "file": upload}, **operator_api.headers)
    # Read whole: the file is refused for what it says (no tables), not for its size.
    assert "The file cannot be used" in error_of(response, 409)["message"]
