"""Every URL pattern, every role. A view must declare its role (require_role) or be one of the few
public/any-user views listed here; a new view without a check fails this test.

For each URL the no-role user, viewer, operator and admin each GET (and, for views that change
things, POST) it: below the required role the answer is 403, at or above it anything but 403 and 500.
"""

from datetime import timedelta

import pytest
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from apps.accounts.roles import ADMIN, OPERATOR, VIEWER, _RANK
from apps.audit.services import record
from apps.fleet.models import Cluster, HostgroupMembership, ProxySQLNode, Server
from apps.operations.models import Operation
from apps.plans.vocabulary import Plan
from controlplane.converters import IdConverter

NOT_ROLE_CHECKED = {"accounts:login", "accounts:logout"}  # the login page itself, and leaving
# Outside the roles on purpose, each with a check of its own (the view's access_check says which): a scraper has
# no session. Every role is refused there from outside, below; the app's own tests hold the rest.
OWN_ACCESS_CHECK = {
    "metrics",
    "pool_metrics",
    "metrics_targets",
}  # Prometheus: METRICS_TOKEN or METRICS_ALLOWED_ADDRESSES (apps/monitoring/tests/test_metrics.py)


def url_patterns(patterns=None, namespace=None):
    for p in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(p, URLResolver):
            if p.namespace == "admin":
                continue  # Django's admin has its own staff/permission checks, tested below
            if p.namespace == "api":
                continue  # the JSON API declares a role per method: apps/api/tests/test_permissions.py
            yield from url_patterns(p.url_patterns, p.namespace or namespace)
        elif isinstance(p, URLPattern):
            yield f"{namespace}:{p.name}" if namespace else p.name, p


@pytest.fixture
def objects(db):
    cluster = Cluster.objects.create(name="perm", writer_hostgroup=100, reader_hostgroup=101)
    node = ProxySQLNode.objects.create(cluster=cluster, name="p", admin_host="127.0.0.1", admin_port=1, admin_user="a")
    server = Server.objects.create(cluster=cluster, hostname="127.0.0.1", port=2)
    HostgroupMembership.objects.create(server=server, hostgroup_id=101)
    op = Operation.objects.create(
        cluster=cluster,
        kind="switchover",
        title="t",
        actor="x",
        plan=Plan("switchover", cluster.pk, "t", [], []).to_json(),
    )
    event = record("permission test")
    out = {"cluster": cluster.pk, "node": node.pk, "server": server.pk, "operation": op.pk, "event": event.pk}
    from django.utils import timezone

    from apps.digests.models import Digest
    from apps.reports.models import ReportSchedule

    out["digest"] = Digest.objects.create(digest="0x1", digest_text="SELECT ?").pk
    out["schedule"] = ReportSchedule.objects.create(cluster=cluster).pk
    from apps.reports import periods, services as reports

    out["report"] = reports.build_report(cluster, "daily", periods.last_complete("daily", timezone.now())).pk
    from apps.configuration import content
    from apps.configuration.models import ChangeSet, ConfigVersion

    version = ConfigVersion.objects.create(
        cluster=cluster, number=1, author="x", reason="r", source="adopt", content=content.empty()
    )
    out["version"] = version.pk
    out["change_set"] = ChangeSet.objects.create(cluster=cluster, base=version, author_name="x").pk
    from apps.alerts.models import Alert, Channel, Silence

    now = timezone.now()
    out["alert"] = Alert.objects.create(
        rule="writer_none",
        cluster=cluster,
        target=f"c{cluster.pk}",
        subject=f"n{node.pk}:hg100",
        subject_label="writer hostgroup 100 on p",
        node=node,
        severity="critical",
        state="firing",
        summary="no usable writer",
        since=now,
        fires_at=now,
        fired_at=now,
        last_seen_at=now,
        active_key=f"writer_none|n{node.pk}:hg100",
    ).pk
    out["silence"] = Silence.objects.create(
        cluster=cluster, reason="r", starts_at=now, ends_at=now + timedelta(hours=1), created_by="x"
    ).pk
    out["channel"] = Channel.objects.create(name="c", kind="webhook", url="http://127.0.0.1:9/hook").pk
    from apps.rollouts.models import Rollout

    out["rollout"] = Rollout.objects.create(reason="r", change={"edits": []}, waves_text="1", planner="x").pk
    from django.contrib.auth import get_user_model

    from apps.accounts import tokens

    owner = get_user_model().objects.create_user(username="token-owner", password="x")
    out["token"] = tokens.create(owner, "permission test")[0].pk
    from apps.dr.models import ReplicationChannel

    # Within one cluster (the form would refuse it): other tests compare the lists of these objects.
    out["dr_channel"] = ReplicationChannel.objects.create(
        name="perm",
        source_cluster=cluster,
        replica_cluster=cluster,
        source_server=server,
        replica_server=server,
        replication_user="r",
    ).pk
    return out


def kwargs_for(name, pattern, objects):
    """URL arguments from the objects above, by URL name; a URL not covered here fails loudly."""
    converters = pattern.pattern.converters
    if not converters:
        return {}
    owner = {
        "pages:cluster": "cluster",
        "pages:cluster_drift": "cluster",
        "pages:cluster_tags": "cluster",
        "monitoring:cluster_live": "cluster",
        "pages:cluster_connections": "cluster",
        "monitoring:cluster_sparklines": "cluster",
        "operations:switchover": "cluster",
        "operations:repair": "cluster",
        "operations:cluster_rules": "cluster",
        "operations:cluster_rules_save": "cluster",
        "pages:proxysql_node": "node",
        "pages:proxysql_node_runtime": "node",
        "monitoring:proxysql_pool": "node",
        "monitoring:proxysql_mirror": "node",
        "monitoring:proxysql_chart": "node",
        "monitoring:cluster_query_stats": "cluster",
        "monitoring:proxysql_query_stats": "node",
        "monitoring:proxysql_sessions": "node",
        "monitoring:proxysql_kill_session": "node",
        "pages:server": "server",
        "pages:server_state": "server",
        "monitoring:server_live": "server",
        "monitoring:server_chart": "server",
        "operations:drain": "server",
        "operations:restore": "server",
        "audit:detail": "event",
        "digests:detail": "digest",
        "digests:chart": "digest",
        "digests:rule": "digest",
        "digests:explain": "digest",
        "reports:detail": "report",
        "reports:pdf": "report",
        "reports:send": "report",
        "reports:chart": "report",
        "reports:schedule_edit": "schedule",
        "reports:schedule_delete": "schedule",
        "reports:schedule_run": "schedule",
        "configuration:version": "version",
        "configuration:export": "version",
        "configuration:revert": "version",
        "configuration:take_runtime": "node",
        "alerts:detail": "alert",
        "alerts:state": "alert",
        "alerts:acknowledge": "alert",
        "alerts:silence_end": "silence",
        "alerts:cluster_rules": "cluster",
        "alerts:cluster_rule_edit": "cluster",
        "alerts:cluster_alerts": "cluster",
        "alerts:channel": "channel",
        "alerts:channel_edit": "channel",
        "alerts:channel_delete": "channel",
        "alerts:channel_test": "channel",
        "alerts:channel_log": "channel",
        "accounts:token_revoke": "token",
        "dr:channel": "dr_channel",
        "dr:channel_live": "dr_channel",
        "dr:channel_move": "dr_channel",
        "dr:channel_chart": "dr_channel",
    }
    prefix = name.split(":")[0]
    key = owner.get(name) or {"operations": "operation", "configuration": "change_set", "rollouts": "rollout"}.get(
        prefix
    )
    if prefix == "configuration" and "cluster_pk" in converters:
        key = "cluster"
    if name == "alerts:rule_edit":
        return {"rule": "writer_none"}
    if key is None or key not in objects:
        pytest.fail(f"{name} ({pattern.pattern}) takes arguments: teach kwargs_for() which object it shows")
    out = {}
    for arg, converter in converters.items():
        numeric = converter.regex in ("[0-9]+", IdConverter.regex)
        out[arg] = (
            (0 if arg == "index" else objects[key])
            if numeric
            else ("mysql_servers" if arg == "table_name" else "writer_none" if arg == "rule" else "conn_used")
        )
    return out


def test_every_view_declares_its_role():
    undeclared = [
        name
        for name, p in url_patterns()
        if name not in NOT_ROLE_CHECKED
        and getattr(p.callback, "required_role", None) not in (VIEWER, OPERATOR, ADMIN)
        and not (name in OWN_ACCESS_CHECK and getattr(p.callback, "access_check", None))
    ]
    assert not undeclared, f"views without a role check (use apps.accounts.roles.require_role): {undeclared}"


@pytest.mark.parametrize("role", [None, VIEWER, OPERATOR, ADMIN])
def test_a_session_of_any_role_does_not_pass_an_own_access_check(client, django_user_model, settings, role):
    from django.contrib.auth.models import Group

    settings.METRICS_TOKEN = ""
    user = django_user_model.objects.create_user(username=f"u-{role}", password="x")
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    client.force_login(user)
    checked = [(name, p) for name, p in url_patterns() if name in OWN_ACCESS_CHECK]
    assert {name for name, _ in checked} == OWN_ACCESS_CHECK
    for name, pattern in checked:
        assert pattern.callback.access_check
        url = reverse(name, kwargs=kwargs_for(name, pattern, {}))
        assert client.get(url, REMOTE_ADDR="192.0.2.7").status_code in (401, 403), f"{url} as {role}"


@pytest.mark.parametrize("role", [None, VIEWER, OPERATOR, ADMIN])
def test_each_role_gets_what_its_rank_allows(client, django_user_model, objects, role):
    from django.contrib.auth.models import Group

    from apps.configuration.models import ChangeSet

    user = django_user_model.objects.create_user(username=f"u-{role}", password="x")
    if role:
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    # The draft is this user's: someone else's draft is refused by authorship, not by role (test_draft_authorship.py).
    ChangeSet.objects.filter(pk=objects["change_set"]).update(author=user)
    client.force_login(user)
    wrong = []
    for name, pattern in url_patterns():
        if name in NOT_ROLE_CHECKED or name in OWN_ACCESS_CHECK:
            continue
        url = reverse(name, kwargs=kwargs_for(name, pattern, objects))
        needed = pattern.callback.required_role
        methods = ["get", "post"] if _RANK[needed] > _RANK[VIEWER] else ["get"]
        for method in methods:
            status = getattr(client, method)(url).status_code
            allowed = _RANK[role] >= _RANK[needed]
            if (status == 403) == allowed or status >= 500:
                wrong.append(f"{method.upper()} {url} ({name}, needs {needed}) as {role or 'no role'}: {status}")
    assert not wrong, "\n".join(wrong)


def test_django_admin_is_for_admins_only(client, viewer_user, operator_user, admin_user_role):
    for user, expected in ((viewer_user, 302), (operator_user, 302), (admin_user_role, 200)):
        client.force_login(user)
        assert client.get("/admin/fleet/cluster/").status_code == expected, user
