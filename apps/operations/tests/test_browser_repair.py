"""In a real browser: a ProxySQL node that hung mid-switchover leaves its rollback pending; the cluster page
says so (which operation, which node, the statements still to run), and the operator repairs the node from
the drift view (plan, confirm, a real Celery worker runs it): the banner goes, drift is in sync. And one that
hung past the point of no return leaves a finish pending, which the operator finishes from the operation page."""

import pytest

from apps.audit.actor import Actor
from apps.fleet.models import Server
from apps.operations import services, switchover
from apps.operations.models import Operation
from lab import demo

from .conftest import run_plan, runtime, servers, variable
from .test_faults import draining, pin_writers, state, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_rollback_pending_banner_then_repair_from_the_drift_view(
    page,
    live_server,
    browser_login,
    operator_user,
    adopted_lab,
    redis_server,
    live_redis,
    celery_broker,
    celery_factory,
):
    cluster, (first, second) = adopted_lab
    for double in (first, second):
        pin_writers(double)
    celery_factory("worker", redis_server)  # no beat: nothing retries by itself, the operator acts
    plan = switchover.plan_switchover(
        cluster, Server.objects.get(port=3312), lower_autoinc=True, drain_timeout_ms=30_000
    )
    op = services.save_plan(plan, actor=Actor.command(operator_user))
    services.confirm(op, actor=Actor.command(operator_user))
    assert wait_for(lambda: draining(op), 20)
    second.set_mode("hang")
    assert wait_for(lambda: state(op) == "rollback_pending", 20), Operation.objects.get(pk=op.pk).error
    second.set_mode("normal")

    browser_login(operator_user)
    page.goto(f"{live_server.url}{cluster.get_absolute_url()}")
    banner = page.inner_text("#pending-rollbacks")
    assert f"Operation #{op.pk}" in banner and "proxysql-2" in banner and "REPLACE INTO mysql_servers" in banner
    assert "mysql-auto_increment_delay_multiplex" in banner
    page.click("button[name=repair_node][data-node=proxysql-2]")  # in the drift view, loaded by htmx
    page.wait_for_selector("text=Confirm and run")
    assert "REPLACE INTO mysql_servers" in page.inner_text(".plan-steps")
    assert f"#{op.pk} on proxysql-2" in page.inner_text("#repair-changes")
    page.click("button[name=confirm]")
    page.wait_for_selector("[data-state=done]", timeout=20_000)
    page.goto(f"{live_server.url}{cluster.get_absolute_url()}")
    page.wait_for_selector("[data-drift=none]")
    assert page.locator("#pending-rollbacks").count() == 0
    assert Operation.objects.get(pk=op.pk).state == "rolled_back"
    assert servers(second) == servers(first) and runtime(second, 100) == [("127.0.0.1", 3311, "ONLINE")]
    assert variable(second, "mysql-auto_increment_delay_multiplex") == "5"


def test_finish_pending_banner_then_finish_on_the_node_from_the_operation_page(
    page, live_server, browser_login, operator_user, adopted_lab, live_redis
):
    """proxysql-2 stops answering after the switchover's point of no return: the cluster page says the switchover is
    done elsewhere and what is left to finish on proxysql-2 (never "rollback"); once it answers, the operator finishes
    it from the operation page and the banner goes."""
    cluster, (first, second) = adopted_lab
    # applied, then no answer (held), as a real node SIGSTOPped while it restored the auto-increment delay
    demo.admin_sql(
        second.port,
        'LAB FAIL_STATEMENTS {"text": "SET variable_value=\'5\'", "pause": true}',
        user=second.user,
        password=second.password,
    )
    op = run_plan(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    assert op.state == "finish_pending", op.error
    second.set_mode("normal")

    browser_login(operator_user)
    page.goto(f"{live_server.url}{cluster.get_absolute_url()}")
    banner = page.inner_text("#pending-rollbacks")
    assert "Finish pending on 1 ProxySQL node" in banner and "nothing was rolled back" in banner
    assert "finish pending on proxysql-2: 2 statement(s) past the point of no return not taken yet" in banner
    assert "LOAD MYSQL VARIABLES TO RUNTIME" in banner and "rollback pending" not in banner.lower()
    page.click(f"#pending-rollbacks a:has-text('Operation #{op.pk}')")
    page.get_by_role("button", name="Finish on the node now").click()
    page.wait_for_selector("[data-state=done]")
    assert "proxysql-2: 2 statement(s) ran; the operation is finished there" in page.content()
    page.goto(f"{live_server.url}{cluster.get_absolute_url()}")
    page.wait_for_selector("[data-drift=none]")
    assert page.locator("#pending-rollbacks").count() == 0
    assert variable(second, "mysql-auto_increment_delay_multiplex") == "5" and servers(second) == servers(first)
