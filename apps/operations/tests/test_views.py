"""Operation pages: roles, the preview shows exact SQL, confirm runs it, progress stops polling."""

import re

import pytest
from django.urls import reverse

from apps.audit.actor import Actor
from apps.fleet.models import ProxySQLNode, Server
from apps.fleet.tests.conftest import admin_sql
from apps.operations import executor
from apps.operations.models import Operation
from apps.plans.vocabulary import Plan

pytestmark = pytest.mark.django_db


def test_viewer_cannot_plan_confirm_or_cancel(viewer_client, adopted_lab, operator_user):
    cluster, _ = adopted_lab
    assert viewer_client.get(reverse("operations:switchover", args=[cluster.pk])).status_code == 403
    plan = Plan("switchover", cluster.pk, "t", guards=[], steps=[])
    op = Operation.objects.create(cluster=cluster, kind="switchover", title="t", actor="x", plan=plan.to_json())
    assert viewer_client.post(reverse("operations:confirm", args=[op.pk])).status_code == 403
    assert viewer_client.post(reverse("operations:cancel", args=[op.pk])).status_code == 403
    assert viewer_client.get(op.get_absolute_url()).status_code == 200  # reading is fine


def test_an_operator_is_not_offered_a_confirm_that_only_an_admin_may_give(
    client, operator_user, admin_user_role, adopted_lab
):
    """A switchover planned onto a Donor/Desynced node: the operator saw "Confirm and run", clicked, and was refused
    with "only an admin can override them"; the page now says so instead of offering the button."""
    from apps.plans.vocabulary import Guard

    cluster, _ = adopted_lab
    plan = Plan(
        "switchover",
        cluster.pk,
        "t",
        steps=[],
        guards=[Guard("new_writer_synced", "127.0.0.1:3313 is Synced", False, "2 Donor/Desynced")],
    )
    op = Operation.objects.create(cluster=cluster, kind="switchover", title="t", actor="x", plan=plan.to_json())
    client.force_login(operator_user)
    page = client.get(op.get_absolute_url()).content.decode()
    assert "Confirm and run" not in page and 'name="confirm"' not in page
    assert "data-admin-override" in page and "only an admin can confirm this plan, with a reason" in page
    assert "127.0.0.1:3313 is Synced" in page and "Discard this plan" in page
    client.force_login(admin_user_role)
    page = client.get(op.get_absolute_url()).content.decode()
    assert "Confirm and run" in page and 'name="override_reason"' in page and "data-admin-override" not in page


def test_a_drain_whose_guard_cannot_be_overridden_offers_no_confirm_to_anyone(
    client, operator_user, admin_user_role, adopted_lab
):
    """A drain planned while a ProxySQL node was paused said "Guards failed: only an admin can override them" and
    offered "Confirm and run"; no one may override "Every ProxySQL node of the cluster answers"."""
    from apps.plans.vocabulary import Guard

    cluster, _ = adopted_lab
    plan = Plan(
        "drain",
        cluster.pk,
        "t",
        steps=[],
        guards=[
            Guard(
                "proxysql_reachable",
                "Every ProxySQL node of the cluster answers",
                False,
                "proxysql-2: no handshake within 0.5s",
                False,
            )
        ],
    )
    op = Operation.objects.create(cluster=cluster, kind="drain", title="t", actor="x", plan=plan.to_json())
    for user in (operator_user, admin_user_role):
        client.force_login(user)
        page = client.get(op.get_absolute_url()).content.decode()
        assert "Confirm and run" not in page and "only an admin" not in page
        assert "data-hard-failed" in page and "(Every ProxySQL node of the cluster answers): this plan" in page
        # Said first, above the guards and the SQL (a switchover's plan is some 2,500 px long), not only at the end.
        assert page.index("data-verdict") < page.index("<h2>Guards</h2>")
        assert (
            "This plan cannot run, and no one can override why:\n<strong>Every ProxySQL node of the cluster "
            "answers</strong> failed (proxysql-2: no handshake within 0.5s). Nothing was sent to any node."
        ) in page


def test_operator_plans_previews_confirms_and_watches(operator_client, adopted_lab):
    cluster, (first, second) = adopted_lab
    for double in (first, second):
        admin_sql(double, "SET mysql-show_processlist_extended=1", "LOAD MYSQL VARIABLES TO RUNTIME")
    target = Server.objects.get(port=3313)
    response = operator_client.post(
        reverse("operations:switchover", args=[cluster.pk]),
        {
            "new_writer": target.pk,
            "drain_timeout_ms": 2000,
            "on_timeout": "rollback",
            "lower_autoinc": "on",
            "old_writer_to": "reader",
        },
    )
    op = Operation.objects.get()
    assert response.status_code == 302 and response["Location"] == op.get_absolute_url()
    page = operator_client.get(op.get_absolute_url()).content.decode()
    assert "UPDATE mysql_servers SET status=&#x27;OFFLINE_SOFT&#x27; WHERE hostgroup_id=100" in page
    assert "auto_increment_delay_token" in page and "Confirm and run" in page
    # Confirm without a worker: the task goes to the broker; run it here as the worker would.
    from apps.operations import services

    services.confirm(op, actor=Actor.command(op.requested_by), enqueue=False)
    executor.run(op.pk)
    progress = operator_client.get(reverse("operations:progress", args=[op.pk]), HTTP_HX_REQUEST="true")
    assert progress.status_code == 286 and b'data-state="done"' in progress.content


def test_bad_switchover_form_is_a_400_not_a_500(operator_client, adopted_lab):
    cluster, _ = adopted_lab
    response = operator_client.post(
        reverse("operations:switchover", args=[cluster.pk]),
        {"new_writer": "999999", "drain_timeout_ms": "-5", "on_timeout": "boom"},
    )
    assert response.status_code == 400 and not Operation.objects.exists()


def test_pinned_reason_is_inferred_when_the_extended_processlist_is_off(operator_client, adopted_lab):
    cluster, _ = adopted_lab
    # The warning is for the operator who refused the auto-increment way (the default takes it since issue 23).
    operator_client.post(
        reverse("operations:switchover", args=[cluster.pk]),
        {
            "new_writer": Server.objects.get(port=3312).pk,
            "drain_timeout_ms": 500,
            "on_timeout": "rollback",
            "lower_autoinc": "off",
            "old_writer_to": "reader",
        },
    )
    page = operator_client.get(Operation.objects.get().get_absolute_url()).content.decode()
    assert "mysql-show_processlist_extended is 0 on proxysql-1, proxysql-2" in page
    assert "may be held by auto-increment tokens" in page and "this drain may not finish" in page
    assert "OFFLINE_HARD would cut 8 session(s)" in page


def test_the_default_plan_page_takes_the_autoinc_way_and_says_why(operator_client, adopted_lab):
    cluster, _ = adopted_lab
    response = operator_client.get(reverse("operations:switchover", args=[cluster.pk]))
    assert re.search(r'<input type="radio" name="lower_autoinc" value="auto"[^>]*checked', response.content.decode())
    operator_client.post(
        reverse("operations:switchover", args=[cluster.pk]),
        {
            "new_writer": Server.objects.get(port=3312).pk,
            "drain_timeout_ms": 500,
            "on_timeout": "rollback",
            "lower_autoinc": "auto",
            "old_writer_to": "reader",
        },
    )
    op = Operation.objects.get()
    page = operator_client.get(op.get_absolute_url()).content.decode()
    assert (
        "The auto-increment way: 8 connection(s) in use on the old writer, on nodes where "
        "mysql-auto_increment_delay_multiplex is not 0 (it keeps a connection to the writer for the next "
        "statements after an INSERT, so under continuous writes it may never be returned): lowering it to 0 for "
        "the drain, restored after (a precaution)."
    ) in page
    assert "will not finish" not in page and "Confirm and run" in page
    assert op.plan["options"]["lower_autoinc"] is True


def test_connections_in_use_are_said_plainly_when_the_extended_processlist_is_off(operator_client, adopted_lab):
    """Issue 36 item 4: with mysql-show_processlist_extended 0 the plan called 8 ordinary in-use writer connections
    "pinned ... as far as can be told" (reasons "unknown (extended processlist off) × 8"): a DBA hesitated to
    confirm. It says what is known, that the reason cannot be read and why, and what the drain does with them."""
    cluster, _ = adopted_lab
    operator_client.post(
        reverse("operations:switchover", args=[cluster.pk]),
        {
            "new_writer": Server.objects.get(port=3312).pk,
            "drain_timeout_ms": 1500,
            "on_timeout": "rollback",
            "lower_autoinc": "auto",
            "old_writer_to": "reader",
        },
    )
    page = operator_client.get(Operation.objects.get().get_absolute_url()).content.decode()
    start = page.index("<h2>", page.index('id="pinned"'))
    section = page[start : page.index("</section>", start)]
    assert "<h2>Connections in use on the server to drain (8 when planned)</h2>" in section
    assert (
        "8 connection(s) in use on the old writer 127.0.0.1:3311 when planned (proxysql-1: 4, proxysql-2: 4). "
        "Why they are in use cannot be read: mysql-show_processlist_extended is 0 on proxysql-1, proxysql-2 "
        "(SET mysql-show_processlist_extended=1; LOAD MYSQL VARIABLES TO RUNTIME there, and plan again, names the "
        "reason per connection)."
    ) in section
    assert (
        "The drain sets the old writer 127.0.0.1:3311 OFFLINE_SOFT: no new statement goes to it, and each "
        "connection is returned to the pool when its statement or transaction ends. It waits up to 1500 ms "
        "(probing every "
    ) in section
    assert (
        "if some are still in use then, it rolls back: the server ONLINE again as before, no connection cut." in section
    )
    for alarming in ("pinned", "as far as can be told", "unknown", "will not finish"):
        assert alarming not in section, alarming
    assert 'data-note="warning"' not in section and 'data-note="error"' not in section


def test_a_drain_held_by_user_variables_is_not_offered_to_run(operator_client, adopted_lab):
    cluster, doubles = adopted_lab
    for double in doubles:
        admin_sql(double, "SET mysql-show_processlist_extended=1", "LOAD MYSQL VARIABLES TO RUNTIME")
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="user_variable")
    operator_client.post(
        reverse("operations:switchover", args=[cluster.pk]),
        {
            "new_writer": Server.objects.get(port=3312).pk,
            "drain_timeout_ms": cluster.drain_timeout_ms,
            "on_timeout": "rollback",
            "old_writer_to": "reader",
        },
    )
    page = operator_client.get(Operation.objects.get().get_absolute_url()).content.decode()
    assert "Confirm and run" not in page and "data-hard-failed" in page
    assert "Pinned for a reason the drain cannot undo: proxysql-1 session " in page and "user_variable" in page


def test_a_planned_operation_can_be_discarded_and_steps_never_run_say_so(operator_client, adopted_lab, operator_user):
    """Issue 23: a planned operation kept a live "Confirm" forever with no way to drop it; after a rollback the
    steps that never ran still said "pending"."""
    from apps.audit.models import AuditEvent
    from apps.operations import switchover

    from .conftest import confirmed, finish

    cluster, (first, second) = adopted_lab
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True)
    from apps.operations import services

    op = services.save_plan(plan, actor=Actor.command(operator_user))
    page = operator_client.get(op.get_absolute_url()).content.decode()
    assert "Confirm and run" in page and "Discard this plan" in page
    response = operator_client.post(reverse("operations:discard", args=[op.pk]))
    op.refresh_from_db()
    assert response.status_code == 302 and op.state == "cancelled" and "discarded" in op.error
    assert AuditEvent.objects.filter(action="switchover discarded", outcome="success").count() == 1
    page = operator_client.get(op.get_absolute_url()).content.decode()
    assert "Confirm and run" not in page and "Discard this plan" not in page
    operator_client.post(reverse("operations:discard", args=[op.pk]))  # only a planned one can be
    assert AuditEvent.objects.filter(action="switchover discarded", outcome="refused").count() == 1

    # A rolled-back switchover: the steps after the failed one say "not run".
    admin_sql(second, """LAB FAIL_STATEMENTS {"text": "SET status='OFFLINE_SOFT'", "message": "refused"}""")
    done = finish(
        confirmed(switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True), operator_user)
    )
    assert done.state == "rolled_back", done.error
    page = operator_client.get(done.get_absolute_url()).content.decode()
    assert "not run" in page and "<td>pending</td>" not in page


def test_a_reader_drain_is_worded_for_a_reader_and_the_plan_names_backends_by_address(
    operator_client, adopted_lab, operator_user
):
    """Issue 23: a reader's drain said "Sessions holding the old writer" with empty reasons "()", and the
    switchover's promote step named "server #2" where host:port is meant."""
    from apps.operations import drain, services, switchover

    cluster, doubles = adopted_lab
    for double in doubles:  # extended processlist off: ProxySQL gives no reason
        double.traffic.set_sessions(hostgroup=101, count=2, kind="read", pinned_reason="user_variable")
    reader = Server.objects.get(port=3313)
    op = services.save_plan(drain.plan_drain(reader, drain_timeout_ms=2000), actor=Actor.command(operator_user))
    services.confirm(
        op, actor=Actor.command(operator_user), enqueue=False
    )  # pending: the live part reads the sessions now
    progress = operator_client.get(
        reverse("operations:progress", args=[op.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "old writer" not in progress and "()" not in progress
    assert "Sessions holding 127.0.0.1:3313 now" in progress

    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True)
    page = operator_client.get(
        services.save_plan(plan, actor=Actor.command(operator_user)).get_absolute_url()
    ).content.decode()
    assert "read_only = OFF on 127.0.0.1:3312" in page and "server #" not in page


def test_a_planned_operation_nobody_confirmed_in_time_expires_and_offers_only_discard(
    operator_client, adopted_lab, operator_user, settings
):
    """Issue 22: planned operations never expired; a plan of yesterday could still be confirmed from its page."""
    from datetime import timedelta

    from django.utils import timezone

    from apps.audit.models import AuditEvent
    from apps.operations import services, switchover
    from apps.operations.models import ClusterLock

    cluster, _ = adopted_lab
    settings.OPERATIONS_PLAN_CONFIRM_S = 600

    def planned(minutes_ago):
        op = services.save_plan(
            switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True),
            actor=Actor.command(operator_user),
        )
        Operation.objects.filter(pk=op.pk).update(created_at=timezone.now() - timedelta(minutes=minutes_ago))
        return Operation.objects.get(pk=op.pk)

    late, fresh = planned(11), planned(1)
    page = operator_client.get(late.get_absolute_url()).content.decode()
    assert "data-plan-expired" in page and "planned 11 min ago and not confirmed within 10 min" in page
    assert "Confirm and run" not in page and "Discard this plan" in page
    assert "Confirm and run" in operator_client.get(fresh.get_absolute_url()).content.decode()
    response = operator_client.post(reverse("operations:confirm", args=[late.pk]))  # a form left open
    late.refresh_from_db()
    assert response.status_code == 302 and late.state == "expired" and "not confirmed within 10 min" in late.error
    assert not late.steps.exists() and not ClusterLock.objects.exists()
    event = AuditEvent.objects.get(action="switchover expired")
    assert event.actor == operator_user.get_username() and event.details["operation"] == late.pk
    page = operator_client.get(late.get_absolute_url()).content.decode()
    assert "Confirm and run" not in page and "Discard this plan" not in page

    # The reaper's beat marks the ones nobody opens; a plan within its window stays.
    old = planned(30)
    assert services.expire_plans() == [old.pk]
    assert Operation.objects.get(pk=old.pk).state == "expired" and Operation.objects.get(pk=fresh.pk).state == "planned"
    assert AuditEvent.objects.get(action="switchover expired", actor="plan expiry").details["operation"] == old.pk


def test_the_new_writer_list_shows_each_candidates_last_polled_state(operator_client, adopted_lab, live_redis):
    """The operator picks the new writer with each candidate's state in view (the plan still checks it)."""
    from apps.monitoring import live, pollers

    cluster, _ = adopted_lab
    url = reverse("operations:switchover", args=[cluster.pk])
    before = operator_client.get(url).content.decode()
    assert "127.0.0.1:3312 · no recent poll" in before and "127.0.0.1:3311" not in before.split("new_writer")[1]
    backends = list(Server.objects.select_related("cluster").filter(cluster=cluster))
    for _ in range(5):  # a handshake past the backend client's 0.5 s on a loaded machine: that poll failed, poll again
        pollers.backend_round(backends)
        docs = [live.read_one(live.BACKEND, s.pk) for s in backends]
        if all(doc and doc["ok"] for doc in docs):
            break
    assert all(doc and doc["ok"] for doc in docs), docs
    page = operator_client.get(url).content.decode()
    options = re.findall(r"<option value=\"\d+\"[^>]*>([^<]*)</option>", page)
    assert "127.0.0.1:3312 · Synced · recv queue 0" in options and "127.0.0.1:3313 · Synced · recv queue 0" in options


def test_the_switchover_and_drain_forms_say_which_proxysql_node_does_not_answer(
    operator_client, adopted_lab, live_redis
):
    """Found in the walk-through: with a ProxySQL paused, the forms said nothing; only the plan page told the
    operator it would be refused. The forms name the node and since when, from its last poll (one MGET)."""
    from apps.monitoring import pollers

    cluster, (first, second) = adopted_lab
    nodes = list(ProxySQLNode.objects.select_related("cluster").filter(cluster=cluster))
    pollers.proxysql_round(nodes)
    switchover_url = reverse("operations:switchover", args=[cluster.pk])
    drain_url = reverse("operations:drain", args=[Server.objects.get(cluster=cluster, port=3313).pk])
    assert "data-silent-nodes" not in operator_client.get(switchover_url).content.decode()
    second.set_mode("hang")
    try:
        pollers.proxysql_round(nodes)
    finally:
        second.set_mode("normal")
    silent = ProxySQLNode.objects.get(admin_port=second.port)
    for url, what in ((switchover_url, "A switchover"), (drain_url, "A drain")):
        page = operator_client.get(url).content.decode()
        assert "data-silent-nodes" in page, url
        warning = page.split("data-silent-nodes>")[1].split("</p>")[0]
        assert f"{silent.name} (127.0.0.1:{second.port}) has not answered since" in warning, warning
        assert (
            f"{what} changes every ProxySQL node of the cluster, so its plan will be refused until it answers"
            in " ".join(warning.split())
        )
