"""In a real browser, the issue's "done when": an operator adds a backend, moves a weight, adds a mirror rule and
changes mysql-mirror_max_concurrency on the lab cluster, sees the effect check and the SQL for both ProxySQL
nodes, applies it (a real Celery worker), diffs it against the previous version, and reverts it."""

import pytest

from apps.configuration import services
from lab import demo

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def runtime(double, sql):
    return demo.admin_sql(double.port, sql, user=double.user, password=double.password)


def add_row(page, table, values, expect):
    page.click(f"[data-add={table}]")
    form = page.locator(f"[data-row-form={table}]")
    form.wait_for()
    for name, value in values.items():
        field = form.locator(f"[name='row-{table}-{name}']")
        if field.evaluate("e => e.tagName") == "SELECT":
            field.select_option(str(value))
        else:
            field.fill(str(value))
    form.locator("button[name=save]").click()
    page.wait_for_selector(f'ol.edits li:has-text("{expect}")')


def test_operator_changes_applies_diffs_and_reverts_the_configuration(
    page, live_server, browser_login, operator_user, adopted_lab, redis_server, celery_broker, celery_factory
):
    cluster, doubles = adopted_lab
    celery_factory("worker", redis_server)
    browser_login(operator_user)
    page.goto(f"{live_server.url}{cluster.get_absolute_url()}")
    page.click("[data-link=configuration]")
    page.wait_for_selector("[data-config-drift=none] >> nth=1")  # both nodes equal version 1
    page.click("button[name=new]")

    # A new backend in a mirror hostgroup, and a mirror rule to it.
    add_row(
        page,
        "mysql_servers",
        {"hostgroup_id": 200, "hostname": "127.0.0.1", "port": 3313, "comment": "mirror target"},
        "mysql_servers [200, '127.0.0.1', 3313]",
    )
    add_row(
        page,
        "mysql_query_rules",
        {"rule_id": 5, "active": 1, "match_digest": "^INSERT", "mirror_hostgroup": 200},
        "mysql_query_rules [5]",
    )
    # Move a weight; a bad value is refused inline first (htmx validation on change).
    page.click("[data-edit='101/127.0.0.1/3312']")
    form = page.locator("[data-row-form=mysql_servers]")
    form.locator("[name='row-mysql_servers-weight']").fill("-5")
    form.locator("[name='row-mysql_servers-weight']").press("Tab")
    page.wait_for_selector("[data-row-form=mysql_servers] [data-check=invalid]")
    assert "greater than or equal to 0" in page.inner_text("[data-row-form=mysql_servers] .form-check")
    page.locator("[data-row-form=mysql_servers] [name='row-mysql_servers-weight']").fill("20000")
    page.locator("[data-row-form=mysql_servers] button[name=save]").click()
    page.wait_for_selector("ol.edits li:has-text(\"mysql_servers [101, '127.0.0.1', 3312]\")")
    # A variable: an out-of-range value is refused inline, then a good one.
    page.fill("[data-variable-form] [name=name]", "mysql-mirror_max_concurrency")
    page.fill("[data-variable-form] [name=value]", "9000")
    page.locator("[data-variable-form] [name=value]").press("Tab")
    page.wait_for_selector("[data-variable-form] [data-check=invalid]:has-text('8192')")
    assert "between 1 and 8192" in page.inner_text("[data-variable-form] .form-check")
    page.fill("[data-variable-form] [name=value]", "100")
    page.click("[data-variable-form] button[name=set]")
    page.wait_for_selector("ol.edits li:has-text('mysql-mirror_max_concurrency = 100')")
    edits = page.locator("ol.edits li").all_inner_texts()
    assert len(edits) == 4, edits

    page.fill("[name=reason]", "mirror inserts to 200, more reads on 3312")
    page.click("button[name=plan]")
    page.wait_for_selector("#config-plan")
    assert page.locator("[data-findings=none]").count() == 1
    sql = page.inner_text(".plan-steps")
    for name in ("proxysql-1", "proxysql-2"):
        assert name in sql
    # The nodes run the same statements: shown once, the second node says so (issue 36 item 11).
    assert sql.count("REPLACE INTO mysql_query_rules") == 1 and sql.count("mysql-mirror_max_concurrency") >= 1
    assert "proxysql-2: the same " in sql and " and rollback as proxysql-1" in sql
    page.click("button[name=confirm]")
    page.wait_for_selector("[data-state=done]", timeout=30_000)
    for d in doubles:
        assert runtime(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3312") == (
            ("20000",),
        )
        assert runtime(d, "SELECT mirror_hostgroup FROM runtime_mysql_query_rules WHERE rule_id=5") == (("200",),)

    # Diff version 2 against version 1, then revert to version 1.
    page.goto(f"{live_server.url}/configuration/clusters/{cluster.pk}/diff/?a=1&b=2")
    diff = page.inner_text("main")
    assert "20000" in diff and "^INSERT" in diff and "mysql-mirror_max_concurrency" in diff
    page.goto(f"{live_server.url}{services.latest(cluster).parent.get_absolute_url()}")
    page.click("button[name=revert]")
    page.wait_for_selector("#config-plan")
    page.click("button[name=confirm]")
    page.wait_for_selector("[data-state=done]", timeout=30_000)
    for d in doubles:
        assert runtime(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3312") == (
            ("10000",),
        )
        assert runtime(d, "SELECT COUNT(*) FROM runtime_mysql_query_rules") == (("0",),)
        assert runtime(
            d, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-mirror_max_concurrency'"
        ) == (("16",),)
    assert services.latest(cluster).number == 3


def test_every_other_table_through_the_browser(
    page, live_server, browser_login, admin_user_role, adopted_lab, redis_server, celery_broker, celery_factory
):
    """Users (a password typed once, sent as its hash, never shown again), the native hostgroup tables, the
    scheduler and the hostgroup roles, in one change set applied to both doubles. By an admin: scheduler rows
    run commands on the ProxySQL host (issue 22; an operator is refused, test_host_level.py)."""
    cluster, doubles = adopted_lab
    celery_factory("worker", redis_server)
    browser_login(admin_user_role)
    page.goto(f"{live_server.url}/configuration/clusters/{cluster.pk}/")
    page.click("button[name=new]")
    add_row(
        page,
        "mysql_users",
        {"username": "app", "password": "s3cret 'quoted'", "default_hostgroup": 100, "max_connections": 500},
        "mysql_users ['app']",
    )
    add_row(
        page,
        "mysql_galera_hostgroups",
        {
            "writer_hostgroup": 300,
            "backup_writer_hostgroup": 302,
            "reader_hostgroup": 301,
            "offline_hostgroup": 309,
            "active": 0,
        },
        "mysql_galera_hostgroups [300]",
    )
    add_row(
        page,
        "mysql_replication_hostgroups",
        {"writer_hostgroup": 400, "reader_hostgroup": 401},
        "mysql_replication_hostgroups [400]",
    )
    add_row(
        page, "scheduler", {"id": 1, "active": 0, "interval_ms": 5000, "filename": "/usr/bin/true"}, "scheduler [1]"
    )
    page.fill("[name=offline]", "9102")
    page.click("button[name=roles]")
    page.wait_for_selector("ol.edits li:has-text('hostgroup roles')")
    assert "s3cret" not in page.content()  # never rendered back
    page.fill("[name=reason]", "the application user and the rest")
    page.click("button[name=plan]")
    page.wait_for_selector("#config-plan")
    assert "s3cret" not in page.content() and "__SECRET__" in page.inner_text(".plan-steps")  # a marker, not the value
    page.click("button[name=confirm]")
    page.wait_for_selector("[data-state=done]", timeout=30_000)
    from apps.configuration.content import mysql_native_hash

    for d in doubles:
        assert runtime(
            d, "SELECT password, default_hostgroup, max_connections FROM runtime_mysql_users WHERE frontend=1"
        ) == ((mysql_native_hash("s3cret 'quoted'"), "100", "500"),)
        assert runtime(d, "SELECT reader_hostgroup, active FROM runtime_mysql_galera_hostgroups") == (("301", "0"),)
        assert runtime(d, "SELECT reader_hostgroup FROM runtime_mysql_replication_hostgroups") == (("401",),)
        assert runtime(d, "SELECT filename, interval_ms FROM runtime_scheduler") == (("/usr/bin/true", "5000"),)
    cluster.refresh_from_db()
    assert cluster.offline_hostgroup == 9102
