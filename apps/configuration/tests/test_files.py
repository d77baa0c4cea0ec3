"""Configuration as code: export a version as YAML, edit it, `manage.py config plan` and `apply` it to the lab
pair through the same change set, checks and versioning as the pages; stale and broken files are refused."""

import io
import json

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse

from apps.configuration import files, services
from apps.configuration.models import ChangeSet, ConfigVersion
from apps.operations.models import Operation
from lab import demo

pytestmark = pytest.mark.django_db(transaction=True)


def command(*args):
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("config", *args, stdout=out, stderr=err)
    return exit_.value.code, out.getvalue() + err.getvalue()


def runtime(double, sql):
    return demo.admin_sql(double.port, sql, user=double.user, password=double.password)


def edited(text, fn):
    doc = yaml.safe_load(text)
    fn(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def test_export_is_stable_secret_free_and_reads_back(adopted_lab):
    cluster, _ = adopted_lab
    version = services.latest(cluster)
    text = files.export(version)
    assert text == files.export(ConfigVersion.objects.get(pk=version.pk))
    variables = yaml.safe_load(text)["global_variables"]
    assert variables["mysql-monitor_username"] == "monitor"
    assert set(variables["mysql-monitor_password"]) == {"secret"}  # the password itself is not in the file
    assert "mysql-monitor_password: monitor" not in text
    based_on, content = files.read(text, cluster)
    assert based_on == version.number
    assert files.target_from_file(version.content, content) == version.content


def test_plan_and_apply_a_file_then_refuse_the_stale_one(adopted_lab, operator_user, tmp_path):
    cluster, doubles = adopted_lab
    original = files.export(services.latest(cluster))

    def change(doc):
        for row in doc["mysql_servers"]:
            if row["hostgroup_id"] == 101 and row["port"] == 3313:
                row["weight"] = 777
        doc["mysql_query_rules"].append({"rule_id": 7, "active": 1, "match_digest": "^INSERT", "mirror_hostgroup": 102})
        doc["global_variables"]["mysql-mirror_max_concurrency"] = 64

    path = tmp_path / "cluster.yaml"
    path.write_text(edited(original, change))
    code, out = command("plan", cluster.name, str(path), "--user", operator_user.username)
    assert code == 0, out
    assert out.count("REPLACE INTO mysql_query_rules") == 2 and "weight 10000 -> 777" in out
    assert services.latest(cluster).number == 1  # a plan changes nothing

    code, out = command("apply", cluster.name, str(path), "--user", operator_user.username, "--yes", "--reason", "ci")
    assert code == 0, out
    assert "done" in out and "version 2" in out
    for d in doubles:
        assert runtime(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == (
            ("777",),
        )
        assert runtime(
            d, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-mirror_max_concurrency'"
        ) == (("64",),)

    # A file exported before version 2 is desired state; with --expect-version it keeps the optimistic lock.
    stale = tmp_path / "stale.yaml"
    stale.write_text(edited(original, lambda doc: doc["global_variables"].update({"mysql-max_connections": 100})))
    code, out = command("plan", cluster.name, str(stale), "--user", operator_user.username, "--expect-version", "1")
    assert code == 2 and "expected version 1" in out and "version 2 was recorded since" in out


def test_blocking_finding_exits_2_and_broken_files_are_refused(adopted_lab, operator_user, tmp_path):
    cluster, _ = adopted_lab
    original = files.export(services.latest(cluster))
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        edited(
            original,
            lambda doc: doc["mysql_query_rules"].append(
                {"rule_id": 9, "active": 1, "match_pattern": "^SELECT (", "destination_hostgroup": 101}
            ),
        )
    )
    code, out = command("plan", cluster.name, str(bad), "--user", operator_user.username)
    assert code == 2 and "[BLOCKS]" in out and "does not compile" in out

    for breaking, expected in (
        (lambda doc: doc.pop("scheduler"), "scheduler is missing"),
        (lambda doc: doc["mysql_servers"][0].update(weight=-1), "weight must be at least 0"),
        (lambda doc: doc["mysql_servers"][0].update(nonsense=1), "unknown column(s) nonsense"),
        (lambda doc: doc.update(cluster="other"), "for cluster 'other'"),
    ):
        path = tmp_path / "broken.yaml"
        path.write_text(edited(original, breaking))
        code, out = command("plan", cluster.name, str(path), "--user", operator_user.username)
        assert code == 2 and expected in out, out
    path.write_text("{not yaml: [")
    assert command("plan", cluster.name, str(path), "--user", operator_user.username)[0] == 2


def test_every_table_through_a_file(adopted_lab, admin_user_role, tmp_path):
    # by an admin: scheduler rows run commands on the ProxySQL host (issue 22; an operator's: test_host_level.py)
    cluster, doubles = adopted_lab
    original = files.export(services.latest(cluster))

    def change(doc):
        doc["roles"]["offline"] = 9102
        doc["mysql_users"].append({"username": "reporting", "default_hostgroup": 101, "transaction_persistent": 0})
        doc["mysql_galera_hostgroups"].append(
            {
                "writer_hostgroup": 300,
                "backup_writer_hostgroup": 302,
                "reader_hostgroup": 301,
                "offline_hostgroup": 309,
                "active": 0,
            }
        )
        doc["mysql_replication_hostgroups"].append({"writer_hostgroup": 400, "reader_hostgroup": 401})
        doc["scheduler"].append({"id": 3, "active": 0, "interval_ms": 60000, "filename": "/usr/bin/true", "arg1": "x"})
        doc["global_variables"]["mysql-shun_recovery_time_sec"] = 5

    path = tmp_path / "all.yaml"
    path.write_text(edited(original, change))
    code, out = command("apply", cluster.name, str(path), "--user", admin_user_role.username, "--yes")
    assert code == 0, out
    for d in doubles:
        assert runtime(
            d,
            "SELECT default_hostgroup, transaction_persistent FROM runtime_mysql_users "
            "WHERE username='reporting' AND frontend=1",
        ) == (("101", "0"),)
        assert runtime(d, "SELECT reader_hostgroup FROM runtime_mysql_galera_hostgroups") == (("301",),)
        assert runtime(d, "SELECT reader_hostgroup FROM runtime_mysql_replication_hostgroups") == (("401",),)
        assert runtime(d, "SELECT arg1 FROM runtime_scheduler WHERE id=3") == (("x",),)
        assert runtime(
            d, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-shun_recovery_time_sec'"
        ) == (("5",),)
    cluster.refresh_from_db()
    assert cluster.offline_hostgroup == 9102
    # And back, by exporting the new version, removing it all again and applying that file.
    back = tmp_path / "back.yaml"
    back.write_text(
        edited(
            files.export(services.latest(cluster)),
            lambda doc: [
                doc.update(mysql_galera_hostgroups=[], mysql_replication_hostgroups=[], scheduler=[]),
                doc["mysql_users"].clear(),
            ],
        )
    )
    code, out = command("apply", cluster.name, str(back), "--user", admin_user_role.username, "--yes", "--json")
    assert code == 0 and '"outcome": "done"' in out, out
    for d in doubles:
        for table in ("runtime_mysql_users", "runtime_mysql_galera_hostgroups", "runtime_scheduler"):
            assert runtime(d, f"SELECT COUNT(*) FROM {table}") == (("0",),)


def rows_behind():
    return ChangeSet.objects.count(), Operation.objects.count()


def weight(doc, hostgroup, port, value):
    for row in doc["mysql_servers"]:
        if row["hostgroup_id"] == hostgroup and row["port"] == port:
            row["weight"] = value


def test_apply_is_idempotent_and_diff_exits_0_or_2(adopted_lab, operator_user, tmp_path):
    cluster, doubles = adopted_lab
    path = tmp_path / "galera-lab.yaml"
    call_command("config", "export", cluster.name, str(path), stderr=io.StringIO())
    path.write_text(edited(path.read_text(), lambda doc: weight(doc, 101, 3313, 555)))
    user = ("--user", operator_user.username)
    code, out = command("apply", str(path), *user, "--yes")  # the cluster from the file's `cluster:`
    assert code == 0 and "done" in out and "version 2" in out, out

    before = rows_behind()
    code, out = command("apply", str(path), *user, "--yes")
    assert (code, out.strip()) == (0, "nothing to do: the cluster already runs this file (version 2)")
    code, out = command("apply", cluster.name, str(path), *user, "--yes")  # today's form too
    assert (code, out.strip()) == (0, "nothing to do: the cluster already runs this file (version 2)")
    code, out = command("plan", str(path), *user)
    assert (code, out.strip()) == (0, "nothing to do: the cluster already runs this file (version 2)")
    code, out = command("diff", str(path))
    assert (code, out.strip()) == (0, "nothing to do: the cluster already runs this file (version 2)")
    assert rows_behind() == before and services.latest(cluster).number == 2

    path.write_text(edited(path.read_text(), lambda doc: weight(doc, 101, 3313, 444)))
    code, out = command("diff", str(path))
    assert code == 2 and "mysql_servers [101, '127.0.0.1', 3313] changed: weight 555 -> 444" in out, out
    assert "monitor" not in out.replace("mysql-monitor", "")  # never a password
    code, out = command("diff", str(path), "--json")
    assert code == 2 and json.loads(out)["changes"][0]["fields"] == [{"name": "weight", "before": 555, "after": 444}]
    # plan (no --user needed: it saves nothing) shows it all and leaves nothing behind: no draft, no operation
    code, out = command("plan", str(path))
    assert code == 0 and "weight 555 -> 444" in out and out.count("REPLACE INTO mysql_servers") == 2, out
    assert rows_behind() == before and services.latest(cluster).number == 2
    for d in doubles:
        assert runtime(d, "SELECT weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port=3313") == (
            ("555",),
        )


def test_a_file_from_before_another_change_is_desired_state(adopted_lab, operator_user, tmp_path):
    """The file wins for every row it lists: a change recorded since (another change set, or an operation that
    records a version) is undone by a file exported before it, and diff and plan show that."""
    cluster, doubles = adopted_lab
    user = ("--user", operator_user.username)
    old = tmp_path / "old.yaml"
    old.write_text(edited(files.export(services.latest(cluster)), lambda doc: weight(doc, 101, 3313, 333)))
    other = tmp_path / "other.yaml"
    other.write_text(edited(files.export(services.latest(cluster)), lambda doc: weight(doc, 101, 3312, 777)))
    assert command("apply", str(other), *user, "--yes")[0] == 0
    assert services.latest(cluster).number == 2

    code, out = command("diff", str(old))
    assert code == 2, out
    assert "mysql_servers [101, '127.0.0.1', 3313] changed: weight 10000 -> 333" in out
    assert "mysql_servers [101, '127.0.0.1', 3312] changed: weight 777 -> 10000" in out  # version 2's change undone
    code, out = command("apply", str(old), *user, "--yes", "--expect-version", "1")
    assert code == 2 and "expected version 1" in out and "version 2 was recorded since" in out, out
    assert "mysql_servers [101, '127.0.0.1', 3312] changed" in out
    code, out = command("apply", str(old), *user, "--yes", "--expect-version", "7")
    assert code == 2 and "expected version 7, but galera-lab is at version 2" in out, out
    assert services.latest(cluster).number == 2

    code, out = command("apply", str(old), *user, "--yes", "--json")
    assert code == 0 and json.loads(out.splitlines()[-1])["version"] == 3, out
    for d in doubles:
        assert runtime(
            d,
            "SELECT port, weight FROM runtime_mysql_servers WHERE hostgroup_id=101 AND port IN "
            "(3312, 3313) ORDER BY port",
        ) == (("3312", "10000"), ("3313", "333"))
    code, out = command("apply", str(old), *user, "--yes", "--expect-version", "3")
    assert (code, out.strip()) == (0, "nothing to do: the cluster already runs this file (version 3)")


def test_diff_exits_1_on_any_error_and_writes_nothing(adopted_lab, tmp_path):
    cluster, _ = adopted_lab
    original = files.export(services.latest(cluster))
    path = tmp_path / "f.yaml"
    cases = [
        (edited(original, lambda doc: doc.update(cluster="nowhere")), "no cluster named 'nowhere'"),
        (edited(original, lambda doc: doc.pop("cluster")), "names no cluster"),
        ("{not yaml: [", "not valid YAML"),
        (edited(original, lambda doc: doc.pop("scheduler")), "scheduler is missing"),
        (
            edited(original, lambda doc: doc["global_variables"].update({"mysql-monitor_password": {"secret": "x/y"}})),
            "secret(s) the console does not hold: x/y",
        ),
    ]
    before = rows_behind()
    for text, expected in cases:
        path.write_text(text)
        code, out = command("diff", str(path))
        assert code == 1 and expected in out, (expected, out)
    assert command("diff", str(tmp_path / "missing.yaml"))[0] == 1
    path.write_text(original)
    code, out = command("diff", "nowhere", str(path))
    assert code == 1 and "no cluster named 'nowhere'" in out
    code, out = command("diff", str(path), "--expect-version", "5")
    assert code == 1 and "expected version 5" in out
    assert rows_behind() == before


def test_the_upload_page_says_nothing_to_do_and_keeps_the_optional_lock(adopted_lab, operator_client):
    cluster, _ = adopted_lab
    text = files.export(services.latest(cluster))
    url = reverse("configuration:upload", args=[cluster.pk])

    def upload(text, **fields):
        return operator_client.post(
            url, {"file": SimpleUploadedFile("galera-lab.yaml", text.encode()), "reason": "r", **fields}, follow=True
        )

    before = rows_behind()
    response = upload(text)
    assert response.redirect_chain[-1][0] == reverse("configuration:cluster", args=[cluster.pk])
    assert "Nothing to do: galera-lab already runs this file (version 1)." in response.content.decode()
    changed = edited(text, lambda doc: weight(doc, 101, 3313, 222))
    response = upload(changed, expect_version=5)
    assert "expected version 5, but galera-lab is at version 1." in response.content.decode()
    assert rows_behind() == before
    response = upload(changed, expect_version=1)
    op = Operation.objects.get()
    assert response.redirect_chain[-1][0] == op.get_absolute_url() and op.state == "planned"
    assert ChangeSet.objects.get().edits[0]["row"]["weight"] == 222
