"""Every API endpoint, every method, every role (the API's twin of accounts' URL permission test).

Each view declares {method: role}; a view that handles a method without declaring it fails here, and is
refused at run time (fail closed). With a token of the no-role user, a viewer, an operator and an admin,
every endpoint is called with every method it handles: below the role the answer is 403, at or above it
anything but 403 and 500. Without credentials every endpoint answers 401 with WWW-Authenticate.
"""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER, _RANK
from apps.api.base import ApiView
from apps.api.permissions import required_role

from .conftest import ApiClient, api_patterns, kwargs_for, token_client, view_class

METHODS = ("get", "post", "put", "patch", "delete")
CATCH_ALL = "api:not_found"


def endpoints(objects=None):
    for name, pattern in api_patterns():
        if name == CATCH_ALL:
            continue
        cls = view_class(pattern)
        url = reverse(name, kwargs=kwargs_for(name, pattern, objects)) if objects else None
        yield name, url, cls, [m for m in METHODS if cls is not None and hasattr(cls, m)]


def test_every_endpoint_declares_a_role_for_each_method_it_handles():
    wrong = []
    for name, _, cls, methods in endpoints():
        if cls is None or not issubclass(cls, ApiView):
            wrong.append(f"{name}: not an apps.api.base.ApiView (no role table)")
            continue
        for method in methods:
            if required_role(cls, method) not in (VIEWER, OPERATOR, ADMIN):
                wrong.append(f"{name} {method.upper()}: no role declared in {cls.__name__}.roles")
    assert not wrong, "\n".join(wrong)
    assert len(list(endpoints())) >= 40


@pytest.mark.django_db
@pytest.mark.parametrize("role", [None, VIEWER, OPERATOR, ADMIN])
def test_each_role_gets_what_its_rank_allows(django_user_model, objects, role):
    user = django_user_model.objects.create_user(username=f"api-{role}", password="x")
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    api = token_client(user)
    wrong = []
    for name, url, cls, methods in endpoints(objects):
        for method in methods:
            needed = required_role(cls, method)
            response = api.request(method, url)
            allowed = _RANK[role] >= _RANK[needed]
            if (response.status_code == 403) == allowed or response.status_code >= 500:
                wrong.append(
                    f"{method.upper()} {url} ({name}, needs {needed}) as {role or 'no role'}: "
                    f"{response.status_code} {response.content[:200]!r}"
                )
            if response.status_code == 403:
                assert response.json()["error"]["code"] == "permission_denied"
    assert not wrong, "\n".join(wrong)


@pytest.mark.django_db
def test_without_credentials_every_endpoint_answers_401_json(objects):
    anonymous = ApiClient()
    wrong = []
    for name, url, cls, methods in endpoints(objects):
        for method in methods:
            response = anonymous.request(method, url)
            if response.status_code != 401 or response["WWW-Authenticate"] != 'Bearer realm="api"':
                wrong.append(f"{method.upper()} {url}: {response.status_code}")
            elif response.json()["error"]["code"] != "not_authenticated":
                wrong.append(f"{method.upper()} {url}: {response.json()}")
    assert not wrong, "\n".join(wrong)
