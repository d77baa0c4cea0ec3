"""axe-core (axe-playwright-python's bundled axe.min.js, no network) over every page of the console in a real browser,
at 1366 and 1920 px, as an operator and as a viewer (who meets the refusal page where an operator acts), on the polled
lab: no serious or critical violation, every visible control (link, button, summary) readable at WCAG's 4.5:1 against
what it is drawn on, and no page answering a server error. A page added to the URL conf joins PAGE_URLS below (a test
holds the list to the URL conf)."""

import time
from datetime import timedelta

import pytest
from django.urls import get_resolver, reverse
from playwright.sync_api import Error as PlaywrightError
from django.utils import timezone

from apps.audit.actor import Actor
from apps.configuration import services as config
from apps.fleet.models import Cluster, ProxySQLNode, Server
from apps.monitoring.tests.test_pages_browser import poll
from lab.browser_checks import low_contrast_controls, serious_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VIEWPORTS = ((1366, 900), (1920, 1080))

# URL names that are no page of their own: POST-only actions, JSON, CSV/YAML/PDF/PNG downloads, htmx fragments that
# a page refreshes (the drift fragments, which a person may open from a link, render in the layout and are walked).
NOT_PAGES = {
    "accounts:logout",
    "accounts:token_revoke",
    "metrics",
    "pool_metrics",
    "metrics_targets",
    "monitoring:overview_live",
    "monitoring:cluster_live",
    "monitoring:cluster_sparklines",
    "monitoring:proxysql_pool",
    "monitoring:proxysql_mirror",
    "monitoring:proxysql_chart",
    "monitoring:cluster_query_stats",
    "monitoring:proxysql_query_stats",
    "monitoring:proxysql_sessions",
    "monitoring:server_live",
    "monitoring:server_chart",
    "pages:proxysql_node_runtime",
    "pages:server_state",
    "pages:cluster_tags",
    "pages:cluster_connections",
    "audit:export_csv",
    "audit:export_json",
    "digests:rule",
    "digests:explain",
    "digests:chart",
    "operations:progress",
    "operations:pending_rollbacks",
    "operations:confirm",
    "operations:cancel",
    "operations:discard",
    "operations:rollback_now",
    "operations:repair",
    "operations:restore",
    "operations:cluster_rules_save",
    "configuration:change_set_new",
    "configuration:write_back",
    "configuration:export",
    "configuration:revert",
    "configuration:take_runtime",
    "configuration:delete_row",
    "configuration:set_variable",
    "configuration:set_roles",
    "configuration:remove_edit",
    "configuration:plan",
    "reports:build",
    "reports:pdf",
    "reports:send",
    "reports:chart",
    "reports:schedule_delete",
    "reports:schedule_run",
    "alerts:list_live",
    "alerts:cluster_alerts",
    "alerts:channel_log",
    "alerts:state",
    "alerts:acknowledge",
    "alerts:silence_end",
    "alerts:channel_delete",
    "alerts:channel_test",
    "alerts:silence_create",
    "alerts:rule_edit",
    "alerts:cluster_rule_edit",
    "alerts:channel_create",
    "alerts:channel_edit",
    "dr:channel_live",
    "dr:channel_chart",
    "rollouts:live",
    "rollouts:action",
}


def url_names():
    """Every named URL of the console (not the API's nor Django admin's), as 'namespace:name'."""
    names = set()

    def walk(resolver, namespace):
        for entry in resolver.url_patterns:
            if hasattr(entry, "url_patterns"):
                if entry.namespace not in ("api", "admin"):
                    walk(entry, entry.namespace or namespace)
            elif entry.name:
                names.add(f"{namespace}:{entry.name}" if namespace else entry.name)

    walk(get_resolver(), None)
    return names


LOGGED_OUT = {"accounts:login": ("login", "/accounts/login/")}


def console_pages(cluster, operator):
    """{URL name: (what it shows, its URL)} of every page, with the objects its URL names made on the lab."""
    from apps.accounts import tokens
    from apps.alerts.models import Alert, Channel, Silence
    from apps.audit.models import AuditEvent
    from apps.configuration.models import ConfigVersion
    from apps.digests import services as digests
    from apps.digests.models import Digest
    from apps.dr.models import ReplicationChannel
    from apps.operations import drain, services as operations
    from apps.reports import periods, services as reports
    from apps.reports.models import ReportSchedule
    from apps.rollouts import services as rollouts

    actor = Actor.command(operator)
    nodes = list(ProxySQLNode.objects.filter(cluster=cluster).order_by("pk"))
    server = Server.objects.filter(cluster=cluster).order_by("pk").first()
    digests.poll_round(nodes, now=time.time() - 10)  # a baseline, then the deltas of the lab's traffic since
    time.sleep(1.0)
    digests.poll_round(nodes, now=time.time() - 2)
    digest = Digest.objects.order_by("pk").first()
    assert digest is not None, "the digest polls stored no digest of the lab's traffic"
    draft = config.start_change_set(cluster, actor=actor, reason="accessibility walk")
    config.add_edit(
        draft, {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"}, actor=actor
    )
    rollout = rollouts.plan(
        {"edits": [{"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"}]},
        {"names": [cluster.name]},
        "1",
        actor=actor,
        reason="accessibility walk",
    )
    operation = operations.save_plan(drain.plan_drain(server), actor=actor)
    now = timezone.now()
    alert = Alert.objects.create(
        rule="writer_none",
        cluster=cluster,
        severity="critical",
        target="walk",
        subject="walk",
        subject_label="proxysql-1 · hostgroup 100",
        state="firing",
        summary="no usable ONLINE writer on proxysql-1",
        since=now - timedelta(minutes=5),
        fires_at=now - timedelta(minutes=4),
        fired_at=now,
        last_seen_at=now,
        active_key="walk",
    )
    Silence.objects.create(
        cluster=cluster,
        reason="accessibility walk",
        starts_at=now,
        ends_at=now + timedelta(hours=1),
        created_by=operator.username,
    )
    channel = Channel.objects.create(name="dba mail", kind="email", recipients="dba@example.com")
    report = reports.build_report(cluster, "daily", periods.ending_on("daily", now.date()), actor=actor)
    schedule = ReportSchedule.objects.create(cluster=cluster, recipients="dba@example.com")
    tokens.create(operator, "walk", actor=actor)
    far = Cluster.objects.create(name="galera-far", writer_hostgroup=100, reader_hostgroup=101)
    far_server = Server.objects.create(cluster=far, hostname="127.0.0.1", port=3399)
    dr_channel = ReplicationChannel.objects.create(
        name="to far",
        source_cluster=cluster,
        replica_cluster=far,
        source_server=server,
        replica_server=far_server,
        replication_user="repl",
    )
    version = ConfigVersion.objects.filter(cluster=cluster).order_by("-number").first()
    event = AuditEvent.objects.order_by("-pk").first()
    c, n = cluster.pk, nodes[0].pk
    return {
        "pages:overview": ("fleet", reverse("pages:overview")),
        "pages:cluster": ("cluster", cluster.get_absolute_url()),
        "pages:cluster_drift": ("cluster drift opened", reverse("pages:cluster_drift", args=[c])),
        "pages:proxysql_node": ("node", nodes[0].get_absolute_url()),
        "pages:server": ("server", server.get_absolute_url()),
        "fleet:adopt": ("adopt", reverse("fleet:adopt")),
        "monitoring:proxysql_kill_session": (
            "kill a session",
            reverse("monitoring:proxysql_kill_session", args=[n, 1]),
        ),
        "search": ("search by port", reverse("search") + "?q=3312"),
        "accounts:tokens": ("API tokens", reverse("accounts:tokens")),
        "audit:list": ("audit", reverse("audit:list")),
        "audit:detail": ("audit event", reverse("audit:detail", args=[event.pk])),
        "pages:incident": ("incident", reverse("pages:incident")),
        "audit:verify": ("audit chain", reverse("audit:verify")),
        "digests:list": ("digests", reverse("digests:list")),
        "digests:detail": ("digest", reverse("digests:detail", args=[digest.pk])),
        "digests:rules": ("rule tester", reverse("digests:rules")),
        "operations:list": (
            "operations filtered",
            reverse("operations:list") + f"?cluster={c}&kind=drain&state=planned",
        ),
        "operations:detail": ("operation", reverse("operations:detail", args=[operation.pk])),
        "operations:record_nodes": ("record nodes", reverse("operations:record_nodes", args=[c])),
        "operations:switchover": ("switchover", reverse("operations:switchover", args=[c])),
        "operations:cluster_rules": ("read-pool rules", reverse("operations:cluster_rules", args=[c])),
        "operations:drain": ("drain", reverse("operations:drain", args=[server.pk])),
        "configuration:cluster": ("configuration", reverse("configuration:cluster", args=[c])),
        "configuration:drift": ("configuration drift opened", reverse("configuration:drift", args=[c])),
        "configuration:diff": ("versions diff", reverse("configuration:diff", args=[c])),
        "configuration:upload": ("upload a file", reverse("configuration:upload", args=[c])),
        "configuration:version": ("version", reverse("configuration:version", args=[version.pk])),
        "configuration:change_set": ("change set", draft.get_absolute_url()),
        "configuration:row_form": (
            "rule form",
            reverse("configuration:row_form", args=[draft.pk, "mysql_query_rules"]),
        ),
        "configuration:discard": ("discard a change set", reverse("configuration:discard", args=[draft.pk])),
        "reports:list": ("reports", reverse("reports:list")),
        "reports:detail": ("report", reverse("reports:detail", args=[report.pk])),
        "reports:schedules": ("report schedules", reverse("reports:schedules")),
        "reports:schedule_new": ("new schedule", reverse("reports:schedule_new")),
        "reports:schedule_edit": ("schedule", reverse("reports:schedule_edit", args=[schedule.pk])),
        "alerts:list": ("alerts", reverse("alerts:list")),
        "alerts:detail": ("alert", reverse("alerts:detail", args=[alert.pk])),
        "alerts:silences": ("silences and a new one", reverse("alerts:silences") + f"?cluster={c}"),
        "alerts:rules": ("alert rules", reverse("alerts:rules")),
        "alerts:cluster_rules": ("cluster alert rules", reverse("alerts:cluster_rules", args=[c])),
        "alerts:channels": ("alert channels", reverse("alerts:channels")),
        "alerts:channel": ("channel", reverse("alerts:channel", args=[channel.pk])),
        "dr:channel": ("DR channel", reverse("dr:channel", args=[dr_channel.pk])),
        "dr:channel_move": ("DR channel move", reverse("dr:channel_move", args=[dr_channel.pk])),
        "rollouts:list": ("rollouts", reverse("rollouts:list")),
        "rollouts:detail": ("rollout", reverse("rollouts:detail", args=[rollout.pk])),
    }


def test_the_walk_names_every_page_of_the_url_conf():
    """A page added to the URL conf is walked (or named as no page of its own in NOT_PAGES)."""
    import inspect

    source = inspect.getsource(console_pages)
    missing = sorted(name for name in url_names() - NOT_PAGES - set(LOGGED_OUT) if f'"{name}":' not in source)
    assert not missing, f"pages the accessibility walk does not visit: {missing}"


def test_no_serious_accessibility_violation_and_readable_controls(
    browser, live_server, operator_user, viewer_user, adopted_lab, live_redis
):
    cluster, doubles = adopted_lab
    poll(rounds=2)
    pages = console_pages(cluster, operator_user)
    errors, violations, unreadable, sideways = {}, {}, {}, {}

    def check(page, where):
        found = serious_violations(page)
        if found:
            violations[where] = found
        low = low_contrast_controls(page)
        if low:
            unreadable[where] = low
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        if width[0] > width[1]:  # the page itself scrolls sideways (a wide table scrolls in its own box)
            sideways[where] = width

    for user in (operator_user, viewer_user):
        for width, height in VIEWPORTS:
            context = browser.new_context(viewport={"width": width, "height": height})
            page = context.new_page()
            page.set_default_timeout(10_000)
            page.goto(f"{live_server.url}/accounts/login/")
            check(page, (user.username, width, "login"))
            page.fill("input[name=username]", user.username)
            page.fill("input[name=password]", "pw-" + user.username)
            page.click("button[type=submit]")
            page.wait_for_url(f"{live_server.url}/")
            for name, (what, url) in pages.items():
                where = (user.username, width, what)
                try:
                    response = page.goto(f"{live_server.url}{url}")
                except PlaywrightError as exc:  # an answer without a body (405)
                    errors[where] = str(exc).splitlines()[0]
                    continue
                page.wait_for_load_state("networkidle")
                if response.status >= 500 or response.status in (404, 405):
                    errors[where] = response.status
                check(page, where)
            context.close()
    said = "\n".join
    assert not errors, said(f"{where}: {status}" for where, status in errors.items())
    assert not violations, said(f"{where}: {found}" for where, found in violations.items())
    assert not unreadable, said(f"{where}: {low}" for where, low in unreadable.items())
    assert not sideways, said(f"{where}: page {wide} px wide" for where, wide in sideways.items())
