"""Every console form (issue 22), posted as an admin (who gets furthest) with the hostile shapes: every field name
of every form class, each value hostile text, a huge number, control characters, a lone surrogate (sent as the
bytes a browser would send for it), or several values where one is expected. A page, a redirect or a clear 4xx,
never a 500; and a refusal (4xx) saves nothing. (Query strings: test_hostile_queries.py; configuration files:
apps/configuration/tests/test_files_fuzz.py; the JSON API: apps/api/tests/test_hostile_input.py.)"""

import importlib
from urllib.parse import quote

import pytest
from django import forms
from django.apps import apps
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from apps.accounts.roles import ADMIN, OPERATOR
from apps.configuration.tables import TABLES

from .hostile import boundary_date, hostile_number, hostile_text
from .test_url_permissions import NOT_ROLE_CHECKED, kwargs_for, objects, url_patterns  # noqa: F401

FORM_MODULES = ["accounts", "alerts", "audit", "configuration", "digests", "dr", "fleet", "operations", "reports"]
# What a post may add besides what it was for: the audit trail of the refusal, the login and throttle bookkeeping.
BOOKKEEPING = {"audit", "sessions", "admin", "contenttypes"}


def field_names():
    """Every field of every form class of the console, and the per-table row forms' prefixed fields."""
    names = set()
    for app in FORM_MODULES:
        module = importlib.import_module(f"apps.{app}.forms")
        for obj in vars(module).values():
            if isinstance(obj, type) and issubclass(obj, forms.BaseForm):
                names |= set(obj.base_fields)
    for table in TABLES:
        names |= {c.name for c in table.columns} | {f"add-{table.name}-{c.name}" for c in table.columns}
    return sorted(names)


FIELDS = field_names()
control_text = st.text(alphabet=st.characters(max_codepoint=0x1F), min_size=1, max_size=8)
surrogate_text = st.sampled_from(["\ud800", "a\udfffb", "\udc80" * 3, "x\ud83d"])
value = st.one_of(
    hostile_text.filter(lambda t: len(t) < 20_000), hostile_number, boundary_date, control_text, surrogate_text
)
values = st.one_of(value, st.lists(value, min_size=2, max_size=3))


def encoded(data):
    """The form body as a browser sends it (UTF-8, percent-encoded; a lone surrogate as its three bytes)."""
    pairs = [(k, v) for k, vs in data.items() for v in (vs if isinstance(vs, list) else [vs])]
    return "&".join(f"{quote(k)}={quote(v.encode('utf-8', 'surrogatepass'))}" for k, v in pairs)


def counts():
    return {m._meta.label: m.objects.count() for m in apps.get_models() if m._meta.app_label not in BOOKKEEPING}


@pytest.mark.django_db
@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@example(everywhere=str(2**64), some={})  # the shapes the probe found, always tried
@example(everywhere=["1", "99999999999999999999"], some={})
@example(everywhere="\ud800", some={"comment": "a\x00b", "name": "x\r\ny"})
@given(everywhere=values, some=st.dictionaries(st.sampled_from(FIELDS), values, max_size=8))
def test_no_form_fails_or_saves_on_hostile_input(client, admin_user_role, objects, settings, everywhere, some):
    """One hostile value in every field of every form at once, and a few fields with values of their own."""
    data = {**{name: everywhere for name in FIELDS}, **some}
    settings.ADOPT_ATTEMPTS_PER_MINUTE = 1_000_000  # the fuzzer's posts are not the scan the limit is for
    client.force_login(admin_user_role)
    client.raise_request_exception = False  # list every 500, not only the first
    body = encoded(data)
    failures = []
    for name, pattern in url_patterns():
        if name in NOT_ROLE_CHECKED or getattr(pattern.callback, "required_role", None) not in (OPERATOR, ADMIN):
            continue
        url = reverse(name, kwargs=kwargs_for(name, pattern, objects))
        before = counts()
        status = client.post(url, body, content_type="application/x-www-form-urlencoded").status_code
        if status >= 500:
            failures.append(f"POST {url} {body[:300]}: {status}")
        elif 400 <= status < 500 and counts() != before:
            changed = {k: (v, counts()[k]) for k, v in before.items() if counts()[k] != v}
            failures.append(f"POST {url} {body[:300]}: {status} but saved {changed}")
    assert not failures, "\n".join(failures)
