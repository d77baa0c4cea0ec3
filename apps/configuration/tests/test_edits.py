"""Issue 25: one edit builder (apps/configuration/edits.py) behind the editor's forms, the API and the services.
Before it, the form hashed a password with one helper and the API with another (a hash typed into the form was
hashed again), a service caller's clear-text password went into the change set as is, and only the API knew that
a `set` is on global_variables."""

import pytest
from django.urls import reverse

from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import edits, services
from apps.configuration.forms import RowForm
from apps.configuration.models import ConfigSecret
from apps.configuration.tables import MYSQL_USERS
from apps.configuration.tests.test_change_sets import versioned_lab  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

HASH = C.mysql_native_hash("from-mysql-user-table")


def stored_password(cs, username):
    cs.refresh_from_db()  # the page's request changed it
    row = next(r for r in services.target_of(cs)["mysql_users"] if r["username"] == username)
    assert C.is_secret(row["password"]), row["password"]  # a reference, never the value, in the change set
    return ConfigSecret.objects.get(cluster=cs.cluster, ref=row["password"]["secret"]).value


def post_user(client, cs, **fields):
    defaults = {
        name: field.initial for name, field in RowForm(table=MYSQL_USERS).fields.items() if field.initial is not None
    }
    data = {**defaults, "username": "app", "default_hostgroup": "100", **fields}
    return client.post(
        reverse("configuration:row_form", args=[cs.pk, "mysql_users"]) + "?key=app",
        {"key": "app", "save": "1", **{f"row-mysql_users-{k}": v for k, v in data.items()}},
    )


def test_the_form_and_the_api_store_a_password_the_same_way(versioned_lab, operator_user, client):
    cluster, _, _ = versioned_lab
    client.force_login(operator_user)
    by_form = services.start_change_set(cluster, actor=Actor.command(operator_user))
    assert post_user(client, by_form, password=HASH.lower()).status_code == 302
    by_api = services.create_change_set(
        cluster,
        actor=Actor.command(operator_user),
        reason="same user",
        edits=[
            {
                "op": "upsert",
                "table": "mysql_users",
                "key": ["app"],
                "row": {"username": "app", "default_hostgroup": 100, "password": HASH.lower()},
            }
        ],
    )
    # A hash (copied from mysql.user) is kept as that hash by both doors; clear text becomes its hash.
    assert stored_password(by_form, "app") == stored_password(by_api, "app") == HASH
    clear = services.start_change_set(cluster, actor=Actor.command(operator_user))
    assert post_user(client, clear, password="new-secret").status_code == 302
    assert stored_password(clear, "app") == C.mysql_native_hash("new-secret")


def test_an_empty_password_keeps_the_current_one_whichever_door(versioned_lab, operator_user, client):
    cluster, _, version = versioned_lab
    current = next(r for r in version.content["mysql_users"] if r["username"] == "app")["password"]
    client.force_login(operator_user)
    by_form = services.start_change_set(cluster, actor=Actor.command(operator_user))
    assert post_user(client, by_form, password="", max_connections="2000").status_code == 302
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user))
    services.add_edit(
        cs,
        edits.upsert(MYSQL_USERS, {"username": "app", "default_hostgroup": 100}, key=["app"]),
        actor=Actor.command(operator_user),
    )
    for each in (by_form, cs):
        each.refresh_from_db()
        row = next(r for r in services.target_of(each)["mysql_users"] if r["username"] == "app")
        assert row["password"] == current


def test_a_service_caller_gets_the_apis_checks_and_never_stores_a_clear_password(versioned_lab, operator_user):
    cluster, _, _ = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user))
    # The API's shape: a set names no table (it is always global_variables).
    services.add_edit(
        cs, {"op": "set", "name": "mysql-max_connections", "value": "4096"}, actor=Actor.command(operator_user)
    )
    assert services.target_of(cs)["global_variables"]["mysql-max_connections"] == "4096"
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_users",
            "key": ["app"],
            "row": {"username": "app", "default_hostgroup": 100, "password": "clear-text"},
        },
        actor=Actor.command(operator_user),
    )
    assert "clear-text" not in str(cs.edits)
    assert stored_password(cs, "app") == C.mysql_native_hash("clear-text")
    with pytest.raises(services.Refused, match=r"edit 3: table: one of .*mysql_servers"):
        services.add_edit(cs, {"op": "upsert", "table": "nope", "row": {}}, actor=Actor.command(operator_user))
    with pytest.raises(services.Refused, match=r"edit 3: .*holds no secret 'mysql_users/x#0'"):
        services.add_edit(
            cs,
            {
                "op": "upsert",
                "table": "mysql_users",
                "row": {"username": "x", "default_hostgroup": 100, "password": {"secret": "mysql_users/x#0"}},
            },
            actor=Actor.command(operator_user),
        )


def test_the_shape_check_names_every_missing_field():
    with pytest.raises(edits.EditRefused) as refused:
        edits.shape({"op": "upsert"})
    assert refused.value.fields == {"table": "upsert needs table.", "row": "upsert needs row."}
    assert edits.shape({"op": "set", "name": "mysql-max_connections", "value": "1"})["table"] == "global_variables"
    with pytest.raises(edits.EditRefused, match="delete needs the row's key"):
        edits.shape({"op": "delete", "table": "mysql_servers"})


def test_every_row_of_every_table_opens_in_the_editor_and_saves_unchanged(versioned_lab, operator_user, client):
    """The editor's row form for each row the version holds: it opens (a mysql_users row was a 500) and saving it
    as shown changes nothing but the edit list (its password kept)."""
    from apps.configuration.tables import TABLES

    cluster, _, version = versioned_lab
    client.force_login(operator_user)
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user))
    opened = 0
    for table in TABLES:
        for row in version.content.get(table.name) or []:
            key = [str(v) for v in table.key_of(row)]
            url = reverse("configuration:row_form", args=[cs.pk, table.name]) + "?" + "&".join(f"key={k}" for k in key)
            page = client.get(url)
            assert page.status_code == 200, (table.name, key, page.status_code)
            opened += 1
            form = page.context["form"]
            data = {
                f"row-{table.name}-{name}": ("" if value is None else value)
                for name, value in form.initial.items()
                if name in form.fields
            }
            saved = client.post(url, {"key": key, "save": "1", **data})
            assert saved.status_code == 302, (table.name, key, saved.content.decode()[:2000])
    assert opened >= 5  # servers, the user, the two rules at least
    cs.refresh_from_db()
    assert services.target_of(cs) == services.target_of(
        services.start_change_set(cluster, actor=Actor.command(operator_user))
    )


def test_an_empty_value_proxysql_refuses_at_load_is_refused_with_its_reason(versioned_lab, operator_user):
    """Issue 33: a real 2.7.1/2.5.5 keeps mysql-default_schema='' in memory and silently does not apply it at LOAD
    (lab/reference/conformance/variables-blank.sql): the edit is refused before it reaches a node."""
    cluster, _, _ = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user))
    with pytest.raises(services.Refused, match="mysql-default_schema.*cannot be empty: ProxySQL keeps '' in memory"):
        services.add_edit(
            cs, {"op": "set", "name": "mysql-default_schema", "value": ""}, actor=Actor.command(operator_user)
        )
    services.add_edit(cs, {"op": "set", "name": "mysql-init_connect", "value": ""}, actor=Actor.command(operator_user))
    assert services.target_of(cs)["global_variables"]["mysql-init_connect"] == ""
