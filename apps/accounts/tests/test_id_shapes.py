"""Ids that are not ids: a 20-digit object id in any URL, and digits that only look like digits ("²", "٣")
in id parameters, get a 404 or a page, never a 500 (SQLite raised OverflowError; int("²") ValueError)."""

import pytest
from django.urls import reverse

from controlplane.converters import parse_id

from .test_url_permissions import NOT_ROLE_CHECKED, kwargs_for, objects, url_patterns  # noqa: F401

SENTINEL = 987654321012345  # an id no test object has: replaced in the URL by the hostile text


def test_parse_id_takes_ascii_digits_that_fit_a_key():
    assert parse_id("42") == 42 and parse_id(" 7 ") == 7
    for raw in ("²", "٣", "1²", "9" * 19, "-1", "1.0", "", None, "0x10"):
        assert parse_id(raw) is None, raw


@pytest.mark.django_db
def test_a_huge_or_odd_id_in_any_url_is_a_404(client, admin_user_role, objects):
    client.force_login(admin_user_role)
    client.raise_request_exception = False  # list every 500, not only the first
    checked, failures = 0, []
    for name, pattern in url_patterns():
        ids = [k for k, c in pattern.pattern.converters.items() if type(c).__name__ == "IdConverter"]
        if name in NOT_ROLE_CHECKED or not ids:
            continue
        for key in ids:
            url = reverse(name, kwargs={**kwargs_for(name, pattern, objects), key: SENTINEL})
            for hostile in ("9" * 20, str(2**63), "²"):
                checked += 1
                response = client.get(url.replace(str(SENTINEL), hostile))
                if response.status_code != 404:
                    failures.append(f"GET {url} with {key}={hostile}: {response.status_code}")
    assert checked > 100  # every page with an id was tried
    assert not failures, "\n".join(failures)


@pytest.mark.django_db
def test_look_alike_digits_in_id_parameters_are_ignored(client, admin_user_role, objects):
    client.force_login(admin_user_role)
    assert client.get(reverse("alerts:silences"), {"cluster": "²"}).status_code == 200
    response = client.post(reverse("alerts:silence_create"), {"from_alert": "²", "cluster": objects["cluster"]})
    assert response.status_code in (200, 302, 400)
    response = client.post(reverse("configuration:write_back", args=[objects["cluster"]]), {"node": "²"})
    assert response.status_code < 500


def test_look_alike_digits_in_hostgroups_are_a_form_error():
    from django import forms

    from apps.fleet.forms import parse_hostgroups

    assert parse_hostgroups("100, 101 102") == [100, 101, 102]
    for text in ("²", "10²", "9" * 5000):
        with pytest.raises(forms.ValidationError, match="is not a hostgroup id"):
            parse_hostgroups(text)
