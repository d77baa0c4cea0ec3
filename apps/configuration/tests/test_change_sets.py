"""Change sets on the lab pair: version 1 from what the nodes run, a change planned (effect check, SQL per
node) and applied to both doubles as one unit, verified, recorded; reverted; refused when stale."""

import pytest
from django.urls import reverse

from apps.audit.actor import Actor
from apps.configuration import services
from apps.configuration.forms import RowForm
from apps.configuration.models import ChangeSet, ConfigSecret, ConfigVersion
from apps.configuration.change_set import plan_change_set
from apps.configuration.tables import MYSQL_QUERY_RULES
from apps.configuration import change_set
from apps.operations import executor
from apps.operations import services as operations
from apps.operations.models import Operation
from lab import demo

pytestmark = pytest.mark.django_db(transaction=True)


def sql(double, statement):
    return demo.admin_sql(double.port, statement, user=double.user, password=double.password)


@pytest.fixture
def versioned_lab(adopted_lab):
    """The adopted lab pair with an application user and read/write split rules, and version 1 recorded."""
    cluster, doubles = adopted_lab
    for d in doubles:
        sql(d, "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('app','app-secret',100)")
        sql(
            d,
            "INSERT INTO mysql_query_rules (rule_id,active,match_digest,destination_hostgroup,apply) "
            "VALUES (10,1,'^SELECT.*FOR UPDATE',100,1),(20,1,'^SELECT',101,1)",
        )
        for module in ("MYSQL USERS", "MYSQL QUERY RULES"):
            sql(d, f"LOAD {module} TO RUNTIME")
    # Adoption recorded version 1 before the user and rules existed: record it again from what the node runs now.
    ConfigVersion.objects.filter(cluster=cluster).delete()
    version = services.record_adopted(cluster, cluster.proxysql_nodes.order_by("pk").first())
    assert version.number == 1
    return cluster, doubles, version


def run(cs, user, override=""):
    plan, collector = plan_change_set(cs)
    collector.save()
    op = operations.save_plan(plan, actor=Actor.command(user))
    ChangeSet.objects.filter(pk=cs.pk).update(state=ChangeSet.State.PLANNED, operation=op)
    operations.confirm(op, actor=Actor.command(user), override_reason=override, enqueue=False)
    executor.run(op.pk)
    return Operation.objects.get(pk=op.pk), plan


def test_version_one_holds_what_the_node_runs_without_its_passwords(versioned_lab):
    cluster, doubles, version = versioned_lab
    content = version.content
    assert {(r["hostgroup_id"], r["port"]) for r in content["mysql_servers"]} == {
        (100, 3311),
        (101, 3311),
        (101, 3312),
        (101, 3313),
        (102, 3312),
        (102, 3313),
    }
    user = content["mysql_users"][0]
    assert user["username"] == "app" and set(user["password"]) == {"secret"}
    assert "app-secret" not in str(content)
    stored = ConfigSecret.objects.get(cluster=cluster, ref=user["password"]["secret"])
    assert (
        stored.value
        == "*" + __import__("hashlib").sha1(__import__("hashlib").sha1(b"app-secret").digest()).hexdigest().upper()
    )
    assert content["global_variables"]["mysql-monitor_password"] == {
        "secret": content["global_variables"]["mysql-monitor_password"]["secret"]
    }
    assert [r["rule_id"] for r in content["mysql_query_rules"]] == [10, 20]


def test_change_applied_to_both_nodes_verified_and_recorded_then_reverted(versioned_lab, operator_user):
    cluster, doubles, v1 = versioned_lab
    cs = services.start_change_set(
        cluster, actor=Actor.command(operator_user), reason="more weight, a mirror, a new backend"
    )
    row = next(r for r in v1.content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3312)
    services.add_edit(
        cs,
        {"op": "upsert", "table": "mysql_servers", "key": [101, "127.0.0.1", 3312], "row": {**row, "weight": 20000}},
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_servers",
            "row": {"hostgroup_id": 200, "hostname": "127.0.0.1", "port": 3313, "comment": "mirror target"},
        },
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 5, "active": 1, "match_digest": "^INSERT", "mirror_hostgroup": 200, "apply": 0},
        },
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        cs,
        {"op": "set", "table": "global_variables", "name": "mysql-mirror_max_concurrency", "value": "100"},
        actor=Actor.command(operator_user),
    )
    op, plan = run(cs, operator_user)
    assert op.state == "done", op.error
    for d in doubles:
        assert sql(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3312") == (("20000",),)
        assert sql(d, "SELECT hostgroup_id FROM runtime_mysql_servers WHERE port=3313 AND hostgroup_id=200") == (
            ("200",),
        )
        assert sql(d, "SELECT mirror_hostgroup FROM runtime_mysql_query_rules WHERE rule_id=5") == (("200",),)
        assert sql(
            d, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-mirror_max_concurrency'"
        ) == (("100",),)
        assert sql(d, "SELECT weight FROM disk.mysql_servers WHERE hostgroup_id=101 AND port=3312") == (("20000",),)
    v2 = services.latest(cluster)
    assert (v2.number, v2.reason, v2.operation_id) == (2, "more weight, a mirror, a new backend", op.pk)
    assert cluster.servers.get(port=3312).memberships.get(hostgroup_id=101).weight == 20000  # the inventory follows
    statements = plan.steps[0].nodes
    assert len(statements) == 2 and all("LOAD MYSQL QUERY RULES TO RUNTIME" in n["sql"] for n in statements.values())

    revert = services.revert_to(cluster, v1, actor=Actor.command(operator_user), reason="back")
    op, _ = run(revert, operator_user)
    assert op.state == "done", op.error
    for d in doubles:
        assert sql(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3312") == (("10000",),)
        assert sql(d, "SELECT COUNT(*) FROM runtime_mysql_query_rules WHERE rule_id=5") == (("0",),)
        assert sql(d, "SELECT COUNT(*) FROM runtime_mysql_servers WHERE hostgroup_id=200") == (("0",),)
        assert sql(
            d, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-mirror_max_concurrency'"
        ) == (("16",),)
    assert services.latest(cluster).number == 3


def test_a_stale_change_set_is_refused_with_what_changed_since(versioned_lab, operator_user):
    cluster, doubles, v1 = versioned_lab
    first = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="one")
    second = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="two")
    services.add_edit(
        first,
        {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"},
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        second,
        {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "2048"},
        actor=Actor.command(operator_user),
    )
    op, _ = run(first, operator_user)
    assert op.state == "done", op.error
    with pytest.raises(services.Refused) as refused:
        services.check_base(second)
    assert "version 2 was recorded since" in str(refused.value) and "mysql-max_connections" in str(refused.value)


def test_a_node_refusing_a_statement_mid_apply_leaves_both_as_before(versioned_lab, operator_user):
    cluster, (first, second), v1 = versioned_lab
    # The second node refuses the new rule, as a ProxySQL of another version would refuse a column it lacks.
    sql(
        second,
        'LAB FAIL_STATEMENTS {"text": "REPLACE INTO mysql_query_rules", '
        '"message": "table mysql_query_rules has no column named gtid_from_hostgroup"}',
    )
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="weight and a rule")
    row = next(r for r in v1.content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3313)
    services.add_edit(
        cs,
        {"op": "upsert", "table": "mysql_servers", "key": [101, "127.0.0.1", 3313], "row": {**row, "weight": 5}},
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 30, "active": 1, "match_digest": "^DELETE", "destination_hostgroup": 100, "apply": 1},
        },
        actor=Actor.command(operator_user),
    )
    tables = ("runtime_mysql_servers", "mysql_servers", "runtime_mysql_query_rules", "mysql_query_rules")
    before = {d.port: [sql(d, f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables] for d in (first, second)}
    op, _ = run(cs, operator_user)
    assert op.state == "rolled_back", op.error
    assert "no column named gtid_from_hostgroup" in op.error
    for d in (first, second):
        assert [sql(d, f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables] == before[d.port]
    assert services.latest(cluster).number == 1


def test_a_node_paused_mid_apply_is_put_back_when_it_answers(versioned_lab, operator_user, live_redis):
    """The second node stops answering after taking the first statement of the change (the double paused
    mid-change): the first node is put back at once, the second's undo stays pending, visibly, and is taken when
    the node answers again; both end as before and no version is recorded."""
    from django.utils import timezone

    from apps.operations import rollbacks
    from apps.operations.models import PendingRollback

    cluster, (first, second), v1 = versioned_lab
    tables = ("runtime_mysql_servers", "mysql_servers", "runtime_mysql_query_rules", "mysql_query_rules")
    before = {d.port: [sql(d, f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables] for d in (first, second)}
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="weight and a rule")
    row = next(r for r in v1.content["mysql_servers"] if r["hostgroup_id"] == 101 and r["port"] == 3313)
    services.add_edit(
        cs,
        {"op": "upsert", "table": "mysql_servers", "key": [101, "127.0.0.1", 3313], "row": {**row, "weight": 5}},
        actor=Actor.command(operator_user),
    )
    services.add_edit(
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 30, "active": 1, "match_digest": "^DELETE", "destination_hostgroup": 100, "apply": 1},
        },
        actor=Actor.command(operator_user),
    )
    # The second node applies the first statement of the change, then stops answering (a paused ProxySQL).
    sql(second, 'LAB FAIL_STATEMENTS {"text": "REPLACE INTO mysql_servers", "pause": true}')
    op, _ = run(cs, operator_user)
    assert op.state == "rollback_pending", op.error
    assert [sql(first, f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables] == before[first.port]
    pending = PendingRollback.objects.get()
    assert pending.node.name == "proxysql-2" and any(
        "REPLACE INTO mysql_servers" in s["sql"] for s in pending.statements
    )

    second.set_mode("normal")
    PendingRollback.objects.update(next_try_at=timezone.now())
    rollbacks.attempt(PendingRollback.objects.get(), actor=Actor.rule("test"))
    assert Operation.objects.get(pk=op.pk).state == "rolled_back"
    assert [sql(second, f"SELECT * FROM {t} ORDER BY 1, 2") for t in tables] == before[second.port]
    assert services.latest(cluster).number == 1


def test_only_admins_confirm_where_the_cluster_says_so(versioned_lab, operator_user, admin_user_role):
    from apps.fleet.models import Cluster

    cluster, doubles, v1 = versioned_lab
    Cluster.objects.filter(pk=cluster.pk).update(config_confirm_role="admin")
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="connections")
    services.add_edit(
        cs,
        {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"},
        actor=Actor.command(operator_user),
    )
    op = change_set.plan_and_save(cs, actor=Actor.command(operator_user))
    with pytest.raises(operations.NotAllowed, match="only an admin confirms"):
        operations.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    operations.confirm(op, actor=Actor.command(admin_user_role), enqueue=False)
    executor.run(op.pk)
    assert Operation.objects.get(pk=op.pk).state == "done"


def test_a_switchover_ends_in_the_next_version(versioned_lab, operator_user, live_redis):
    """Intent is always the latest version: a switchover's inventory step records version 2 with the new writer."""
    from apps.fleet.models import Server
    from apps.operations import switchover

    cluster, doubles, v1 = versioned_lab
    for d in doubles:
        d.traffic.clear_sessions()
    plan = switchover.plan_switchover(cluster, Server.objects.get(port=3312), lower_autoinc=True)
    op = operations.save_plan(plan, actor=Actor.command(operator_user))
    operations.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    executor.run(op.pk)
    assert Operation.objects.get(pk=op.pk).state == "done"
    v2 = services.latest(cluster)
    assert (v2.number, v2.source, v2.operation_id) == (2, "operation", op.pk)
    writers = [(r["port"], r["status"]) for r in v2.content["mysql_servers"] if r["hostgroup_id"] == 100]
    assert writers == [(3312, "ONLINE")]
    assert v2.content["mysql_query_rules"] == v1.content["mysql_query_rules"]  # the rest of the version is kept


def test_the_row_form_is_a_whole_page_without_htmx(versioned_lab, operator_user, client):
    """A click on "edit" before htmx has loaded (or with JavaScript off) follows the link: it must land on a page
    that works (the layout and its scripts), not on a bare fragment whose inline validation never fires."""
    cluster, doubles, version = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user))
    client.force_login(operator_user)
    url = reverse("configuration:row_form", args=[cs.pk, "mysql_servers"]) + "?key=101&key=127.0.0.1&key=3312"
    page = client.get(url).content.decode()
    assert "<html" in page and "htmx.min.js" in page and 'data-row-form="mysql_servers"' in page
    assert cs.get_absolute_url() in page
    fragment = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in fragment and 'data-row-form="mysql_servers"' in fragment


@pytest.mark.parametrize("engine", ["1", "2"])
def test_the_inline_check_refuses_a_regex_proxysql_cannot_compile(versioned_lab, operator_user, client, engine):
    """Issue 23: the inline check said "Valid" for a match_digest no engine compiles (ProxySQL would load it
    silently and never match). Checked with the cluster's engine: mysql-query_processor_regex 1 PCRE, 2 RE2."""
    cluster, doubles, version = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user))
    services.add_edit(
        cs,
        {"op": "set", "table": "global_variables", "name": "mysql-query_processor_regex", "value": engine},
        actor=Actor.command(operator_user),
    )
    client.force_login(operator_user)
    url = reverse("configuration:row_form", args=[cs.pk, "mysql_query_rules"])

    defaults = {
        name: field.initial
        for name, field in RowForm(table=MYSQL_QUERY_RULES).fields.items()
        if field.initial is not None
    }

    def check(**row):
        fields = {**defaults, "rule_id": "30", "active": "1", "apply": "1", "destination_hostgroup": "101", **row}
        return client.post(
            url, {f"row-mysql_query_rules-{k}": v for k, v in fields.items()}, headers={"HX-Request": "true"}
        ).content.decode()

    assert 'data-check="valid"' in check(match_digest="^SELECT .* FROM t")
    refused = check(match_digest="^SELECT (")
    assert 'data-check="valid"' not in refused and 'data-check="invalid"' in refused
    assert (
        "match_digest" in refused
        and "does not compile in ProxySQL&#x27;s " + ("RE2" if engine == "2" else "PCRE") in refused
    )
    assert 'data-check="invalid"' in check(match_pattern="[a-", match_digest="")
    if engine == "2":  # PCRE's look-behind is not RE2's
        assert 'data-check="invalid"' in check(match_digest="(?<=x)SELECT")


def test_the_start_recheck_reads_through_the_connections_the_steps_use(versioned_lab, operator_user):
    """At start a change set is planned again through the connections its steps then use: one handshake per node. A
    second, fresh one for the re-check's reads was one more 0.5 s connect deadline a starved machine could miss,
    refusing the start (CI, issue 37)."""
    cluster, doubles, v1 = versioned_lab
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="connections")
    services.add_edit(
        cs,
        {"op": "set", "table": "global_variables", "name": "mysql-max_connections", "value": "4096"},
        actor=Actor.command(operator_user),
    )
    op = change_set.plan_and_save(cs, actor=Actor.command(operator_user))
    operations.confirm(op, actor=Actor.command(operator_user), enqueue=False)
    for double in doubles:
        double.clear_statements()
    executor.run(op.pk)
    assert Operation.objects.get(pk=op.pk).state == "done"
    for double in doubles:
        log = list(double.engine.log)
        first_step = next(e for e in log if "4096" in e["sql"])
        rechecked = [e for e in log if e["seq"] < first_step["seq"] and "runtime_" in e["sql"]]
        assert rechecked and {e["conn"] for e in rechecked} == {first_step["conn"]}, log[:12]


def test_the_planner_reads_once_then_judges_and_builds_from_the_read_alone(
    versioned_lab, operator_user, django_assert_num_queries
):
    """Issue 35 item 5: plan_change_set is read (read_change_set: the nodes, their documents, the traffic, the
    database), judge (change_set_guards, the effect check's findings with them) and build (steps, facts, title); the
    judge and the build make no query and open no connection (both nodes refuse connections meanwhile), and the
    parts give the plan plan_change_set gives: guards, steps, facts, title and where the secrets sit."""
    cluster, doubles, v1 = versioned_lab
    actor = Actor.command(operator_user)
    cs = services.start_change_set(cluster, actor=actor, reason="a user, a rule, a backend")
    users = {u["username"]: u for u in v1.content["mysql_users"]}
    services.add_edit(  # the node's password kept: a secret placed in the statements
        cs,
        {"op": "upsert", "table": "mysql_users", "key": ["app"], "row": {**users["app"], "max_connections": 2000}},
        actor=actor,
    )
    services.add_edit(  # a rule the effect check has something to say about (it captures every later SELECT)
        cs,
        {
            "op": "upsert",
            "table": "mysql_query_rules",
            "row": {"rule_id": 1, "active": 1, "match_digest": ".", "apply": 1},
        },
        actor=actor,
    )
    services.add_edit(
        cs,
        {"op": "upsert", "table": "mysql_servers", "row": {"hostgroup_id": 200, "hostname": "127.0.0.1", "port": 3313}},
        actor=actor,
    )
    cs = ChangeSet.objects.select_related("base", "cluster").get(pk=cs.pk)
    read = change_set.read_change_set(cs)
    assert sorted(read.nodes) == sorted(cluster.proxysql_nodes.values_list("pk", flat=True))
    assert all(not nc.error for nc in read.nodes.values())
    assert read.current.pk == v1.pk and read.holder is None and read.pending is not None
    for d in doubles:
        d.set_mode("refuse")
    try:
        with django_assert_num_queries(0):
            guards, findings = change_set.change_set_guards(cs, read)
            steps = change_set.change_set_steps(cs, read)
            facts = change_set.change_set_facts(cs, read, findings)
            title = change_set.change_set_title(cs, read)
    finally:
        for d in doubles:
            d.set_mode("normal")
    assert findings and read.placed
    plan, _ = plan_change_set(cs)
    # the planner's guards begin with the judgement's (annotate adds the shared-node and sync ones after them)
    assert [(g.key, g.passed, g.value) for g in guards] == [
        (g.key, g.passed, g.value) for g in plan.guards[: len(guards)]
    ]
    assert [(s.key, s.nodes, s.params) for s in steps] == [(s.key, s.nodes, s.params) for s in plan.steps]
    assert facts == plan.facts
    assert title == plan.title
    assert read.placed == plan.secrets
