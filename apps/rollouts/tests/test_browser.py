"""The rollout pages in a real browser (Playwright, Debian's chromium): an operator reads a rollout halted at its
canary (the gate, its figures, the halt reason, each cluster's state), aborts it (refused until the confirmation is
ticked), and pauses, resumes and halts another one; a real Celery worker runs what the buttons queue, and the page's
live part (htmx) follows it."""

import time

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.rollouts import services
from apps.rollouts.models import Rollout, RolloutState

from .test_rollouts import LAYERS, RULE, Poller, build_fleet, once_baking, rule_ids

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def act(page, action, reason=None, tick=True):
    form = page.locator(f'form[data-action="{action}"]')
    if reason is not None:
        form.locator("input[name=reason]").fill(reason)
    if tick:
        form.locator("input[name=confirm]").check()
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()


def state_of(rollout):
    return Rollout.objects.get(pk=rollout.pk).state


def test_the_operator_reads_a_halted_canary_aborts_it_and_pauses_resumes_halts_another(
    page,
    live_server,
    browser_login,
    people,
    proxysql_double_factory,
    live_redis,
    celery_broker,
    celery_factory,
    redis_server,
):
    planner, starter = people
    clusters, doubles = build_fleet(proxysql_double_factory, 2, first_port=51000)
    halted = services.plan(
        {"edits": [RULE]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="a rule that hurts",
        bake_canary_s=8,
        bake_s=0.5,
    )
    with Poller(interval=0.3):
        hurting = once_baking(halted, 0, lambda: doubles[0].traffic.set_global("Client_Connections_aborted", 100000))
        services.start(halted, actor=Actor.command(starter), enqueue=False)
        assert services.run(halted.pk) == RolloutState.HALTED
        hurting.join(5)
    halt_reason = Rollout.objects.get(pk=halted.pk).halt_reason
    celery_factory("worker", redis_server, concurrency=1, name="w1@rollout-pages")

    browser_login(planner)
    page.goto(f"{live_server.url}/rollouts/")
    row = page.locator(f'tr[data-rollout="{halted.pk}"]')
    assert row.locator("[data-state]").get_attribute("data-state") == "halted"
    assert "wave 0 failed its health gate" in row.inner_text()
    row.locator("a").first.click()
    page.wait_for_url(f"{live_server.url}/rollouts/{halted.pk}/")

    # the halt reason names the gate with its figures; the canary's wave, its node and its figures
    assert page.locator("[data-halt-reason]").inner_text() == halt_reason
    assert "the errors gate on fleet-0-proxysql-1" in halt_reason and "errors/s since the change" in halt_reason
    canary = page.locator('tr[data-wave="0"]')
    assert canary.get_attribute("data-state") == "rolled_back"
    assert "(canary: node fleet-0-proxysql-1 only)" in canary.inner_text()
    assert canary.locator('[data-cluster="fleet-0"]').get_attribute("data-cluster-state") == "rolled_back"
    assert canary.locator("[data-gate]").get_attribute("data-gate") == "failed"
    since = canary.locator('[data-gate-node="fleet-0-proxysql-1"] td').nth(2).inner_text()
    assert float(since) > 1.0, since
    assert page.locator('tr[data-wave="1"]').get_attribute("data-state") == "pending"
    assert "(the rest of the canary's cluster)" in page.locator('tr[data-wave="1"]').inner_text()
    assert page.locator('form[data-action="pause"]').count() == 0  # a halted rollout is only aborted

    act(page, "abort", tick=False)  # not confirmed: nothing is done
    assert "Tick the confirmation to abort" in page.locator(".flash").first.inner_text()
    assert state_of(halted) == RolloutState.HALTED
    act(page, "abort")
    assert "Abort requested" in page.locator(".flash").first.inner_text()
    page.wait_for_selector('#live [data-state="rolled_back"]', timeout=60_000)  # the worker ran it; htmx showed it
    assert AuditEvent.objects.filter(
        action="rollout abort requested", target=str(halted), actor__startswith=planner.username
    ).exists()

    # another rollout, running (its worker not yet queued): pause, resume (the worker runs it), halt during the bake
    second = services.plan(
        {"edits": [{**RULE, "row": {**RULE["row"], "rule_id": 78}}]},
        {"tags": [["env", "prod"]]},
        "1,100%",
        actor=Actor.command(planner),
        reason="paused, resumed, halted",
        bake_canary_s=60,
        bake_s=0.5,
    )
    services.start(second, actor=Actor.command(starter), enqueue=False)
    page.goto(f"{live_server.url}/rollouts/{second.pk}/")
    act(page, "pause")
    assert "Paused" in page.locator(".flash").first.inner_text() and state_of(second) == RolloutState.PAUSED
    act(page, "resume")
    assert "Resumed" in page.locator(".flash").first.inner_text()
    page.wait_for_selector('#live tr[data-wave="0"][data-state="baking"]', timeout=60_000)
    assert rule_ids(doubles[0])["runtime"] == [78] and rule_ids(doubles[1])["runtime"] == []  # the canary only
    act(page, "halt", reason="the canary's latency looks wrong")
    page.wait_for_selector('#live [data-state="halted"]', timeout=60_000)
    said = page.locator("[data-halt-reason]").inner_text()
    assert said == f"wave 0: halted by {planner.username}: the canary's latency looks wrong", said
    deadline = time.monotonic() + 10
    while rule_ids(doubles[0])["runtime"] and time.monotonic() < deadline:
        time.sleep(0.2)
    for double in doubles:  # both rolled back: nothing of 77 (halted at its canary) nor 78 (halted by the operator)
        assert rule_ids(double) == {layer: [] for layer in LAYERS}
