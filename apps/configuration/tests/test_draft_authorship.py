"""A draft change set is its author's (issue 22): a second operator who edits or removes its rows, or rewrites
its reason, is refused with 403 and a clear message, through the page and the API; the author and an admin may,
and every edit (who, which table and row, what) is in the audit log; the change set page names its editors."""

import html

import pytest
from django.test import Client
from django.urls import reverse

from apps.api.tests.conftest import token_client
from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import services
from apps.configuration.models import ChangeSet
from apps.configuration.tests.test_change_sets import versioned_lab  # noqa: F401 (a fixture)
from apps.configuration.tests.test_secret_places import form_data
from conftest import _user_with_role

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def second_operator(django_user_model):
    return _user_with_role(django_user_model, "oscar-operator", "operator")


def logged_in(user):
    client = Client()
    client.force_login(user)
    return client


def edits_audited(cs):
    return [
        (e.actor, e.details["action"], e.details["table"], e.details["row"])
        for e in AuditEvent.objects.filter(action="change set edited", target=str(cs)).order_by("id")
    ]


def test_only_the_author_or_an_admin_edits_a_draft_on_the_page(
    versioned_lab, operator_user, second_operator, admin_user_role
):
    cluster, doubles, v1 = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="more connections")
    author, other, admin = logged_in(operator_user), logged_in(second_operator), logged_in(admin_user_role)
    variable = reverse("configuration:set_variable", args=[cs.pk])
    key = {"key": ["101", "127.0.0.1", "3312"]}

    # the author sets a variable and deletes a row
    assert author.post(variable, {"name": "mysql-max_connections", "value": "4096"}).status_code == 302
    assert author.post(reverse("configuration:delete_row", args=[cs.pk, "mysql_servers"]), key).status_code == 302
    # a second operator may do none of it: set, delete, remove an edit, rewrite the reason, discard
    for url, data in [
        (variable, {"name": "mysql-max_connections", "value": "1"}),
        (reverse("configuration:delete_row", args=[cs.pk, "mysql_servers"]), {"key": ["101", "127.0.0.1", "3313"]}),
        (reverse("configuration:remove_edit", args=[cs.pk, 0]), {}),
        (reverse("configuration:plan", args=[cs.pk]), {"reason": "mine now"}),
        (reverse("configuration:discard", args=[cs.pk]), {}),
    ]:
        response = other.post(url, data)
        assert response.status_code == 403, (url, response.status_code)
        assert "only its author or an admin may edit it" in response.content.decode(), url
    row = next(r for r in v1.content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3313)
    refused = other.post(
        reverse("configuration:row_form", args=[cs.pk, "mysql_servers"]),
        {
            "save": "1",
            "key": ["101", "127.0.0.1", "3313"],
            **form_data("row-mysql_servers", {**row, "comment": "theirs"}),
        },
    )
    assert refused.status_code == 403 and "otto-operator's draft" in html.unescape(refused.content.decode())
    cs.refresh_from_db()
    assert [e.get("name") or e.get("key") for e in cs.edits] == ["mysql-max_connections", [101, "127.0.0.1", 3312]]
    assert cs.reason == "more connections" and cs.state == "draft"
    assert AuditEvent.objects.filter(action="change set edit refused", actor="oscar-operator").exists()

    # an admin may: removes the delete
    assert admin.post(reverse("configuration:remove_edit", args=[cs.pk, 1])).status_code == 302
    cs.refresh_from_db()
    assert len(cs.edits) == 1
    assert edits_audited(cs) == [
        ("otto-operator", "edit added", "global_variables", "mysql-max_connections"),
        ("otto-operator", "edit added", "mysql_servers", [101, "127.0.0.1", 3312]),
        ("ada-admin", "edit removed", "mysql_servers", [101, "127.0.0.1", 3312]),
    ]
    page = author.get(cs.get_absolute_url()).content.decode()
    assert "edited by ada-admin, otto-operator" in page


def test_the_api_refuses_a_second_operator_rewriting_a_draft_and_audits_the_author(
    versioned_lab, operator_user, second_operator, admin_user_role
):
    cluster, doubles, v1 = versioned_lab
    created = token_client(operator_user).post(
        f"/api/v1/clusters/{cluster.pk}/config/change-sets/",
        {"reason": "more connections", "edits": [{"op": "set", "name": "mysql-max_connections", "value": "4096"}]},
    )
    assert created.status_code == 201, created.content[:300]
    cs = ChangeSet.objects.get(pk=created.json()["id"])
    plan = f"/api/v1/config/change-sets/{cs.pk}/plan/"
    refused = token_client(second_operator).post(plan, {"reason": "mine now"})
    assert refused.status_code == 403, refused.content[:300]
    assert "only its author or an admin may edit it" in refused.json()["error"]["message"]
    assert ChangeSet.objects.get(pk=cs.pk).reason == "more connections"
    assert ChangeSet.objects.get(pk=cs.pk).state == "draft"
    planned = token_client(admin_user_role).post(plan, {"reason": "more connections, checked by an admin"})
    assert planned.status_code == 201, planned.content[:300]
    event = AuditEvent.objects.get(action="change set edited", target=str(cs))
    assert event.actor.startswith("ada-admin") and event.details["action"] == "reason changed"
    assert event.details["after"] == "more connections, checked by an admin"
