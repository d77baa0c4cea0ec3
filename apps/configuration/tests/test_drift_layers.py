"""Issue 21: one drift engine (drift.py) over the three layers. Each node's memory, runtime and disk against the
current configuration version, for every table the version holds: the configuration page's partial and the API
say which layer of which node differs, in an operator's words; equal layers say nothing."""

import pytest
from django.utils.html import escape

from apps.accounts import tokens
from apps.api.tests.conftest import ApiClient

from .test_change_sets import sql, versioned_lab  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def saved_lab(versioned_lab):
    """The versioned lab pair with what it loaded saved too: every layer of both nodes equals version 1."""
    cluster, doubles, version = versioned_lab
    for double in doubles:
        sql(double, "SAVE MYSQL USERS TO DISK")
        sql(double, "SAVE MYSQL QUERY RULES TO DISK")
    return cluster, doubles


def read(cluster, viewer_client, viewer_user):
    """(the configuration page's drift partial, the API's drift answer) read now."""
    page = viewer_client.get(f"/configuration/clusters/{cluster.pk}/drift/")
    api = ApiClient(tokens.create(viewer_user, "drift")[1]).get(f"/api/v1/clusters/{cluster.pk}/drift/")
    assert page.status_code == 200 and api.status_code == 200, api.content[:300]
    return page.content.decode(), api.json()


def node(answer, name):
    return next(n for n in answer["nodes"] if n["name"] == name)


def test_equal_layers_report_nothing(saved_lab, viewer_client, viewer_user):
    cluster, _ = saved_lab
    page, api = read(cluster, viewer_client, viewer_user)
    assert page.count('data-config-drift="none"') == 2 and "data-layer=" not in page
    assert api["in_sync"] and api["version"] == 1
    assert [(n["name"], n["in_sync"], n["layers"], n["findings"]) for n in api["nodes"]] == [
        ("proxysql-1", True, [], []),
        ("proxysql-2", True, [], []),
    ]


def test_an_edit_left_unloaded_in_memory(saved_lab, viewer_client, viewer_user):
    cluster, (first, second) = saved_lab
    sql(second, "UPDATE mysql_query_rules SET match_digest='^SELECT c' WHERE rule_id=20")
    page, api = read(cluster, viewer_client, viewer_user)
    words = "unloaded edit in memory: query rule 20 match_digest ^SELECT c (runtime ^SELECT; a LOAD would apply it)"
    assert node(api, "proxysql-1")["in_sync"] and not api["in_sync"]
    second_node = node(api, "proxysql-2")
    assert second_node["findings"] == [
        {"layer": "memory", "table": "mysql_query_rules", "words": words, "writer": False}
    ]
    assert second_node["layers"] == [
        {
            "table": "mysql_query_rules",
            "key": [20],
            "field": "match_digest",
            "intended": "^SELECT",
            "memory": "^SELECT c",
            "runtime": "^SELECT",
            "disk": "^SELECT",
            "differs": ["memory"],
            "row": None,
        }
    ]
    assert page.count('data-config-drift="none"') == 1 and page.count('data-config-drift="differs"') == 1
    assert f'data-layer="memory" data-table="mysql_query_rules">{words}' in page
    assert page.index("proxysql-2") < page.index(words)


def test_an_edit_loaded_but_not_saved(saved_lab, viewer_client, viewer_user):
    cluster, (first, second) = saved_lab
    sql(first, "UPDATE mysql_users SET max_connections=50 WHERE username='app'")
    sql(first, "LOAD MYSQL USERS TO RUNTIME")
    page, api = read(cluster, viewer_client, viewer_user)
    words = (
        "loaded, not saved: proxysql-1 runs user app max_connections 50 instead of 10000; a restart of "
        "proxysql-1 would load version 1's from disk"
    )
    assert node(api, "proxysql-2")["in_sync"]
    first_node = node(api, "proxysql-1")
    assert first_node["findings"] == [{"layer": "runtime", "table": "mysql_users", "words": words, "writer": False}]
    # the password, clear text on the node and a hash in the version, is the same secret: not a difference
    assert first_node["layers"] == [
        {
            "table": "mysql_users",
            "key": ["app"],
            "field": "max_connections",
            "intended": 10000,
            "memory": 50,
            "runtime": 50,
            "disk": 10000,
            "differs": ["memory", "runtime"],
            "row": None,
        }
    ]
    assert f'data-layer="runtime" data-table="mysql_users">{escape(words)}' in page
    assert page.index("proxysql-1") < page.index(escape(words)) < page.index("proxysql-2")


def test_a_query_rule_changed_only_on_disk(saved_lab, viewer_client, viewer_user):
    cluster, (first, second) = saved_lab
    sql(second, "UPDATE mysql_query_rules SET destination_hostgroup=100 WHERE rule_id=20")
    sql(second, "SAVE MYSQL QUERY RULES TO DISK")
    sql(second, "SAVE MYSQL QUERY RULES TO MEMORY")  # memory back from runtime: only the disk holds the edit
    page, api = read(cluster, viewer_client, viewer_user)
    words = "a restart of proxysql-2 would load query rule 20 destination_hostgroup 100 (disk) instead of 101"
    assert node(api, "proxysql-1")["in_sync"]
    second_node = node(api, "proxysql-2")
    assert second_node["findings"] == [{"layer": "disk", "table": "mysql_query_rules", "words": words, "writer": False}]
    assert second_node["layers"] == [
        {
            "table": "mysql_query_rules",
            "key": [20],
            "field": "destination_hostgroup",
            "intended": 101,
            "memory": 101,
            "runtime": 101,
            "disk": 100,
            "differs": ["disk"],
            "row": None,
        }
    ]
    assert f'data-layer="disk" data-table="mysql_query_rules">{words}' in page
    assert page.index("proxysql-2") < page.index(words)


def test_a_disk_with_another_writer_says_where_a_restart_would_send_writes(saved_lab, viewer_client, viewer_user):
    """As a rolled-back switchover left a real pair: memory and runtime on the old writer, disk on the new one."""
    cluster, (first, second) = saved_lab
    for statement in (
        "DELETE FROM mysql_servers WHERE hostgroup_id=100",
        "INSERT INTO mysql_servers (hostgroup_id,hostname,port,weight,max_connections,comment)"
        " VALUES (100,'127.0.0.1',3312,1000000,2000,'writer')",
        "SAVE MYSQL SERVERS TO DISK",
        "SAVE MYSQL SERVERS TO MEMORY",
    ):
        sql(second, statement)
    page, api = read(cluster, viewer_client, viewer_user)
    words = "a restart of proxysql-2 would send writes to 127.0.0.1:3312 instead of 127.0.0.1:3311"
    second_node = node(api, "proxysql-2")
    assert second_node["findings"] == [{"layer": "disk", "table": "mysql_servers", "words": words, "writer": True}]
    assert [
        (d["key"], d["field"], d["memory"], d["runtime"], d["disk"], d["differs"]) for d in second_node["layers"]
    ] == [
        ([100, "127.0.0.1", 3311], "row", "present", "present", "missing", ["disk"]),
        ([100, "127.0.0.1", 3312], "row", "missing", "missing", "present", ["disk"]),
    ]
    assert node(api, "proxysql-1")["in_sync"]
    assert f'<li class="bad" data-layer="disk" data-table="mysql_servers">{words}</li>' in page


def test_a_password_changed_on_disk_is_said_without_its_value(saved_lab, viewer_client, viewer_user):
    """The node keeps the password in clear text, the version its hash: equal as secrets. Another password on disk
    is a difference, shown as (secret) and never as its value."""
    cluster, (first, second) = saved_lab
    for statement in (
        "UPDATE mysql_users SET password='n3w-pass' WHERE username='app'",
        "SAVE MYSQL USERS TO DISK",
        "UPDATE mysql_users SET password='app-secret' WHERE username='app'",
    ):
        sql(first, statement)
    page, api = read(cluster, viewer_client, viewer_user)
    words = "a restart of proxysql-1 would load user app password (secret) (disk) instead of (secret)"
    first_node = node(api, "proxysql-1")
    assert first_node["findings"] == [{"layer": "disk", "table": "mysql_users", "words": words, "writer": False}]
    assert first_node["layers"] == [
        {
            "table": "mysql_users",
            "key": ["app"],
            "field": "password",
            "intended": "(secret)",
            "memory": "(secret)",
            "runtime": "(secret)",
            "disk": "(secret)",
            "differs": ["disk"],
            "row": None,
        }
    ]
    assert node(api, "proxysql-2")["in_sync"]
    assert "n3w-pass" not in page and "n3w-pass" not in str(api) and "app-secret" not in page
    assert escape(words) in page


def test_null_and_defaults_as_proxysql_loads_them_are_no_drift(adopted_lab, viewer_client, viewer_user):
    """Issue 33: users and query rules configured the ordinary way (no default_schema, no password, re_modifiers NULL
    or in lower case, a '' digest, an inactive rule and user), which the double now loads as a real 2.5.5/2.7.1 does
    (NULL reads '' at runtime, '' digest NULL, re_modifiers upper-cased, inactive rows not loaded): the page and the
    API say in sync, on a version recorded from a node's runtime."""
    from apps.configuration import services
    from apps.configuration.models import ConfigVersion

    cluster, doubles = adopted_lab
    for double in doubles:
        sql(
            double,
            "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','pw',100),('nopass',NULL,100)",
        )
        sql(double, "INSERT INTO mysql_users (username,password,default_hostgroup,active) VALUES ('retired','x',100,0)")
        sql(
            double,
            "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply,"
            "re_modifiers) VALUES (20,1,'^SELECT',101,1,NULL),(30,1,'^SHOW',101,1,'caseless'),"
            "(40,0,'^DELETE',100,1,'CASELESS')",
        )
        sql(double, "INSERT INTO mysql_query_rules (rule_id,active,digest,match_pattern,apply) VALUES (50,1,'','^x',1)")
        for statement in (
            "LOAD MYSQL USERS TO RUNTIME",
            "SAVE MYSQL USERS TO DISK",
            "LOAD MYSQL QUERY RULES TO RUNTIME",
            "SAVE MYSQL QUERY RULES TO DISK",
        ):
            sql(double, statement)
    assert sql(doubles[0], "SELECT default_schema FROM runtime_mysql_users WHERE username='app'") == (("",), ("",))
    ConfigVersion.objects.filter(cluster=cluster).delete()
    services.record_adopted(cluster, cluster.proxysql_nodes.order_by("pk").first())
    page, api = read(cluster, viewer_client, viewer_user)
    assert api["in_sync"], [n["findings"] for n in api["nodes"]]
    assert page.count('data-config-drift="none"') == 2 and "data-layer=" not in page
