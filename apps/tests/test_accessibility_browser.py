"""axe-core (axe-playwright-python's bundled axe.min.js, no network) over the console's pages in a real browser, as
an operator on the polled lab: no serious or critical violation, and every visible control (link, button, summary)
readable at WCAG's 4.5:1 against what it is drawn on."""
import pytest
from django.urls import reverse

from apps.audit.actor import Actor
from apps.configuration import services as config
from apps.fleet.models import ProxySQLNode, Server
from apps.monitoring.tests.test_pages_browser import poll
from lab.browser_checks import low_contrast_controls, serious_violations

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def console_pages(cluster, operator):
    node, server = ProxySQLNode.objects.filter(cluster=cluster).first(), Server.objects.filter(cluster=cluster).first()
    draft = config.start_change_set(cluster, actor=Actor.command(operator), reason="accessibility walk")
    config.add_edit(draft, {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"},
                    actor=Actor.command(operator))
    from apps.rollouts import services as rollouts

    rollout = rollouts.plan({"edits": [{"op": "set", "table": "global_variables", "name": "mysql-max_connections",
                                        "value": "4096"}]}, {"names": [cluster.name]}, "1",
                            actor=Actor.command(operator), reason="accessibility walk")
    return {
        "fleet": reverse("fleet:overview"),
        "cluster": cluster.get_absolute_url(),
        "node": node.get_absolute_url(),
        "server": server.get_absolute_url(),
        "configuration": reverse("configuration:cluster", args=[cluster.pk]),
        "change set": draft.get_absolute_url(),
        "discard a change set": reverse("configuration:discard", args=[draft.pk]),
        "drain": reverse("operations:drain", args=[server.pk]),
        "digests": reverse("digests:list"),
        "operations": reverse("operations:list"),
        "rollouts": reverse("rollouts:list"),
        "rollout": reverse("rollouts:detail", args=[rollout.pk]),
        "alerts": reverse("alerts:list"),
        "alert rules": reverse("alerts:rules"),
        "cluster alert rules": reverse("alerts:cluster_rules", args=[cluster.pk]),
        "silences": reverse("alerts:silences"),
        "alert channels": reverse("alerts:channels"),
        "audit": reverse("audit:list"),
        "reports": reverse("reports:list"),
        "search": reverse("search") + "?q=3312",
    }


def test_no_serious_accessibility_violation_and_readable_controls(page, live_server, browser_login, operator_user,
                                                                  adopted_lab, live_redis):
    cluster, doubles = adopted_lab
    poll(rounds=2)
    browser_login(operator_user)
    violations, unreadable = {}, {}
    for name, url in console_pages(cluster, operator_user).items():
        page.goto(f"{live_server.url}{url}")
        page.wait_for_load_state("networkidle")
        found = serious_violations(page)
        if found:
            violations[name] = found
        low = low_contrast_controls(page)
        if low:
            unreadable[name] = low
    assert not violations, violations
    assert not unreadable, unreadable
