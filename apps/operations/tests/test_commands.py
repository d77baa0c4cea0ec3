"""The operation commands on the lab (Galera lab, two ProxySQL doubles): `manage.py switchover | drain | restore |
failover | repair`, their plan output, --json, and the exit codes a runbook branches on (0 done, 2 refused,
3 rolled back, 4 failed or rollback/finish pending)."""

import io
import json
import os
import subprocess
import sys
import textwrap

import pytest
from django.core.management import CommandError, call_command
from django.conf import settings

from apps.audit.models import AuditEvent
from apps.fleet.models import HostgroupMembership, Server
from apps.operations.models import Operation
from conftest import database_url_for_subprocesses

from .conftest import extended_processlist, runtime, variable

pytestmark = pytest.mark.django_db(transaction=True)

RUNBOOK = textwrap.dedent("""\
    #!/bin/sh
    # Switch the lab's writer; branch on the exit code.
    "$PYTHON" manage.py switchover galera-lab --to "$1" --user otto-operator --yes $EXTRA
    case $? in
      0) echo "RUNBOOK: switched to $1" ;;
      2) echo "RUNBOOK: refused, nothing changed" ;;
      3) echo "RUNBOOK: rolled back, the old writer stays" ;;
      *) echo "RUNBOOK: failed, page the on-call" ;;
    esac
""")


def command(name, *args, stdin=""):
    """(exit code, stdout) of a command run here; stdin answers its question."""
    out, err = io.StringIO(), io.StringIO()
    old_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        with pytest.raises(SystemExit) as exit_:
            call_command(name, *args, stdout=out, stderr=err)
    finally:
        sys.stdin = old_stdin
    return exit_.value.code, out.getvalue()


def writer_port():
    return HostgroupMembership.objects.get(hostgroup_id=100).server.port


def test_a_runbook_switches_the_lab_writer_with_one_command_and_branches_on_its_exit_code(
    adopted_lab, operator_user, tmp_path
):
    cluster, (first, second) = adopted_lab
    script = tmp_path / "switch-writer.sh"
    script.write_text(RUNBOOK)
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "DATABASE_URL": database_url_for_subprocesses(),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
    }

    def runbook(to, extra=""):
        done = subprocess.run(
            ["sh", str(script), to],
            cwd=settings.BASE_DIR,
            env={**env, "EXTRA": extra},
            capture_output=True,
            text=True,
            timeout=120,
        )
        return done.stdout

    # The lab's writer sessions are pinned by auto-increment tokens: with a short drain and no way through (the
    # operator refused the auto-increment way, now the default), the drain times out and everything is rolled
    # back, nothing cut.
    out = runbook("127.0.0.1:3312", "--no-lower-autoinc --drain-timeout-ms 300")
    assert "RUNBOOK: rolled back, the old writer stays" in out, out
    assert writer_port() == 3311 and runtime(first, 100) == [("127.0.0.1", 3311, "ONLINE")]

    out = runbook("127.0.0.1:3312", "--lower-autoinc --drain-timeout-ms 2000")
    assert "RUNBOOK: switched to 127.0.0.1:3312" in out, out
    # The plan was printed first: its guards with their values and the SQL per ProxySQL node.
    assert "[pass] Every ProxySQL node of the cluster answers: 2 of 2" in out
    assert (
        "UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=100 AND hostname='127.0.0.1' AND port=3311;"
        in out
    )
    assert "on proxysql-1:" in out and "on proxysql-2:" in out
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    assert writer_port() == 3312

    out = runbook("127.0.0.1:3312")  # it is the writer now: a hard guard refuses, nothing is sent
    assert "RUNBOOK: refused, nothing changed" in out, out
    assert "[FAIL] The new writer is another backend of this cluster" in out
    done = Operation.objects.filter(state="done").get()
    assert done.actor == "otto-operator" and done.confirmer == "otto-operator"
    assert AuditEvent.objects.filter(action="switchover done", actor="otto-operator").exists()


def test_json_lines_give_the_plan_each_step_and_the_outcome(adopted_lab, operator_user):
    cluster, (first, second) = adopted_lab
    code, out = command(
        "drain",
        "galera-lab",
        "--server",
        "127.0.0.1:3313",
        "--user",
        operator_user.username,
        "--yes",
        "--json",
        "--note",
        "disk swap",
    )
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0, lines[-1]
    plan, steps, outcome = lines[0], lines[1:-1], lines[-1]
    assert plan["event"] == "plan" and plan["kind"] == "drain" and all(g["passed"] for g in plan["guards"])
    drain_sql = {spec["name"]: spec["sql"] for spec in plan["steps"][0]["nodes"].values()}
    assert (
        "UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=101 AND hostname='127.0.0.1' AND port=3313"
        in drain_sql["proxysql-1"]
    )
    assert [s["key"] for s in steps] == [s["key"] for s in plan["steps"]] and {s["state"] for s in steps} == {"done"}
    assert outcome == {**outcome, "event": "outcome", "state": "done", "exit_code": 0}
    assert Server.objects.get(port=3313).maintenance

    code, out = command(
        "restore", "galera-lab", "--server", "127.0.0.1:3313", "--user", operator_user.username, "--yes"
    )
    assert code == 0, out
    assert "Restore 127.0.0.1:3313 from maintenance" in out and "done" in out.splitlines()[-1].lower()
    assert not Server.objects.get(port=3313).maintenance
    assert ("127.0.0.1", 3313, "ONLINE") in runtime(first, 101)


def test_a_finish_pending_exits_4_and_says_finish(adopted_lab, operator_user):
    """Past the point of no return the second node stops answering: the switchover is done on the other node and
    in the inventory, not on proxysql-2 yet. Not done: exit 4, and the outcome says finish pending, not rollback."""
    from lab import demo

    cluster, (first, second) = adopted_lab
    demo.admin_sql(
        second.port,
        'LAB FAIL_STATEMENTS {"text": "SET variable_value=\'5\'", "pause": true}',
        user=second.user,
        password=second.password,
    )
    code, out = command(
        "switchover",
        "galera-lab",
        "--to",
        "127.0.0.1:3312",
        "--user",
        operator_user.username,
        "--yes",
        "--lower-autoinc",
        "--json",
    )
    second.set_mode("normal")
    outcome = json.loads(out.splitlines()[-1])
    assert code == 4 and outcome["state"] == "finish_pending" and outcome["exit_code"] == 4, outcome
    assert "FINISH PENDING on proxysql-2" in outcome["error"] and "rollback" not in outcome["error"].lower()
    assert writer_port() == 3312

    code, out = command(
        "switchover", "galera-lab", "--to", "127.0.0.1:3311", "--user", operator_user.username, "--yes"
    )  # refused while the finish is pending, and says which
    assert code == 2 and "No finish is pending on this cluster" in out, out


def test_plan_only_and_an_unanswered_prompt_change_nothing(adopted_lab, operator_user):
    code, out = command(
        "switchover", "galera-lab", "--to", "127.0.0.1:3312", "--user", operator_user.username, "--plan-only"
    )
    assert code == 0 and "-- drain:" in out and "planned only" in out
    assert not Operation.objects.exists()  # a plan only is a read: no operation is left behind
    code, out = command(
        "switchover", "galera-lab", "--to", "127.0.0.1:3312", "--user", operator_user.username, "--plan-only", "--json"
    )
    assert code == 0 and json.loads(out.splitlines()[0])["operation"] is None and not Operation.objects.exists()
    code, out = command(
        "switchover", "galera-lab", "--to", "127.0.0.1:3312", "--user", operator_user.username, stdin="no\n"
    )
    assert code == 2 and "not confirmed" in out
    assert writer_port() == 3311
    assert set(Operation.objects.values_list("state", flat=True)) == {"cancelled"}
    assert not Operation.objects.exclude(steps=None).exists()  # nothing was confirmed, no step ever ran
    # Discarded through the service, as the page's discard: audited with who and why (the command set it bare).
    event = AuditEvent.objects.get(action="switchover discarded")
    assert event.actor == operator_user.username and event.details["reason"] == "not confirmed at the command's prompt"
    assert "not confirmed at the command's prompt" in Operation.objects.get().error


def test_the_operation_commands_skip_djangos_system_checks_when_run_from_the_command_line(adopted_lab, operator_user):
    """The checks load every URLconf (the reports' matplotlib and numpy): about a second of CPU before the plan,
    taken from the clients when the command runs on a host it shares with ProxySQL or the databases
    (docs/benchmarks.md, "Against a real ProxySQL 2.7.1 pair"). A failing check shows whether they ran."""
    import importlib

    from django.core import checks

    def failing(app_configs, **kwargs):
        return [checks.Error("a check that always fails", id="tests.E001")]

    checks.register(failing)
    try:
        for name, args in (("switchover", ["--to", "127.0.0.1:3312"]), ("drain", ["--server", "127.0.0.1:3313"])):
            out, err = io.StringIO(), io.StringIO()
            cmd = importlib.import_module(f"apps.operations.management.commands.{name}").Command(stdout=out, stderr=err)
            with pytest.raises(SystemExit) as exit_:
                cmd.run_from_argv(
                    ["manage.py", name, "galera-lab", *args, "--user", operator_user.username, "--plan-only"]
                )
            assert exit_.value.code == 0, err.getvalue()
            assert "planned only" in out.getvalue() and "tests.E001" not in err.getvalue()
    finally:
        checks.registry.registry.registered_checks.discard(failing)
    assert writer_port() == 3311


def test_failover_on_an_operators_word_refuses_a_live_writer_unless_an_admin_overrides(
    adopted_lab, operator_user, admin_user_role
):
    cluster, (first, second) = adopted_lab
    code, out = command("failover", "galera-lab", "--to", "127.0.0.1:3312", "--user", operator_user.username, "--yes")
    assert code == 2, out
    assert "[FAIL, an admin may override] The current writer 127.0.0.1:3311 does not answer" in out
    assert "Only an admin can override them" in out and writer_port() == 3311
    code, out = command(
        "failover",
        "galera-lab",
        "--to",
        "127.0.0.1:3312",
        "--user",
        admin_user_role.username,
        "--yes",
        "--override-reason",
        "drill: the writer's host is being retired",
    )
    assert code == 0, out
    for double in (first, second):
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
    op = Operation.objects.get(state="done")
    assert op.kind == "failover" and op.plan["options"]["manual"] and op.override_reason.startswith("drill")


def test_repair_one_node_and_the_usage_errors(adopted_lab, operator_user, viewer_user):
    cluster, (first, second) = adopted_lab
    code, out = command("repair", "galera-lab", "--node", "proxysql-2", "--user", operator_user.username, "--yes")
    assert code == 0 and "Repair proxysql-2 of galera-lab" in out, out
    for args, message in [
        (("repair", "nope", "--user", operator_user.username), "no cluster named 'nope'"),
        (("repair", "galera-lab", "--node", "x", "--user", operator_user.username), "no ProxySQL node 'x'"),
        (("repair", "galera-lab", "--user", viewer_user.username), "is not a user with the operator role"),
        (
            ("switchover", "galera-lab", "--to", "127.0.0.1:9", "--user", operator_user.username),
            "no backend 127.0.0.1:9 in cluster galera-lab",
        ),
        (("switchover", "galera-lab", "--to", "3312", "--user", operator_user.username), "is not HOST:PORT"),
    ]:
        with pytest.raises(CommandError, match=message):
            call_command(*args, stdout=io.StringIO())


# -- issue 23: the default switchover under pinned sessions -----------------------------------------------------
def test_the_default_switchover_takes_the_autoinc_way_through_pinned_sessions_and_prints_why(
    adopted_lab, operator_user
):
    """The writer's sessions insert (pinned by auto_increment_delay_multiplex=5, ProxySQL 2.7's default): with no
    flag the command lowers it for the drain, prints why, and ends done, nothing cut."""
    cluster, doubles = adopted_lab
    extended_processlist(doubles)
    code, out = command("switchover", "galera-lab", "--to", "127.0.0.1:3312", "--user", operator_user.username, "--yes")
    assert code == 0, out
    assert (
        "INFO: The auto-increment way: 8 session(s) pinned by mysql-auto_increment_delay_multiplex: lowering it "
        "to 0 for the drain, restored after."
    ) in out
    assert "-- autoinc_off: Lower mysql-auto_increment_delay_multiplex to 0" in out and "-- autoinc_restore:" in out
    op = Operation.objects.get()
    assert op.state == "done" and op.plan["options"]["lower_autoinc"] is True
    assert writer_port() == 3312
    for double in doubles:
        assert runtime(double, 100) == [("127.0.0.1", 3312, "ONLINE")]
        assert variable(double, "mysql-auto_increment_delay_multiplex") == "5"
        counters = double.traffic.status()["counters"]
        assert counters["sessions_cut"] == counters["client_errors"] == 0, counters  # no client saw an error


def test_a_user_variable_pin_refuses_the_default_switchover_and_says_which_sessions(adopted_lab, operator_user):
    cluster, doubles = adopted_lab
    extended_processlist(doubles)
    for double in doubles:
        double.traffic.set_sessions(hostgroup=100, count=4, kind="write", pinned_reason="user_variable")
    code, out = command("switchover", "galera-lab", "--to", "127.0.0.1:3312", "--user", operator_user.username, "--yes")
    assert code == 2, out
    assert "[FAIL] No session holds the old writer for a reason the drain cannot undo" in out
    assert "proxysql-1 session " in out and ": user_variable" in out and "this drain will not finish" in out
    assert "ERROR: Pinned for a reason the drain cannot undo: proxysql-1 session " in out
    assert writer_port() == 3311 and not Operation.objects.exclude(steps=None).exists()
    for double in doubles:
        assert runtime(double, 100) == [("127.0.0.1", 3311, "ONLINE")]

    code, out = command(
        "switchover",
        "galera-lab",
        "--to",
        "127.0.0.1:3312",
        "--user",
        operator_user.username,
        "--on-timeout",
        "offline_hard",
        "--plan-only",
    )  # a way chosen: it may run, and says what
    assert code == 0, out
    assert (
        "ERROR: If the drain times out, OFFLINE_HARD will cut the sessions still on the old writer 127.0.0.1:3311: "
        "8 now."
    ) in out


def test_the_command_prints_every_note_the_plan_page_shows(adopted_lab, operator_user, operator_client):
    """One list of notes for both doors: what the plan page shows besides guards and steps, the command prints."""
    import html
    import re

    from django.urls import reverse

    cluster, doubles = adopted_lab  # the extended processlist is off: the cause is inferred
    for form_choice, flags in (("off", ["--no-lower-autoinc"]), ("auto", []), ("on", ["--on-timeout", "offline_hard"])):
        operator_client.post(
            reverse("operations:switchover", args=[cluster.pk]),
            {
                "new_writer": Server.objects.get(port=3312).pk,
                "drain_timeout_ms": cluster.drain_timeout_ms,
                "on_timeout": "offline_hard" if "offline_hard" in flags else "rollback",
                "lower_autoinc": form_choice,
                "old_writer_to": "reader",
            },
        )
        op = Operation.objects.latest("pk")
        page = operator_client.get(op.get_absolute_url()).content.decode()
        notes = [(level, html.unescape(text)) for level, text in re.findall(r'data-note="(\w+)">(.*?)</p>', page, re.S)]
        assert len(notes) >= 2, page
        code, out = command(
            "switchover",
            "galera-lab",
            "--to",
            "127.0.0.1:3312",
            "--user",
            operator_user.username,
            "--plan-only",
            *(["--lower-autoinc"] if form_choice == "on" else []),
            *flags,
        )
        assert code == 0, out
        for level, text in notes:
            assert f"{level.upper()}: {text}" in out, (text, out)
    assert (
        "this drain may not finish" in Operation.objects.order_by("pk").first().plan["facts"]["autoinc_way"]["reason"]
    )


def test_the_drain_command_prints_its_notes_too(adopted_lab, operator_user):
    cluster, doubles = adopted_lab
    for double in doubles:  # readers holding their connection: user variables pin regardless
        double.traffic.set_sessions(hostgroup=101, count=6, kind="read", pinned_reason="user_variable")
    code, out = command(
        "drain",
        "galera-lab",
        "--server",
        "127.0.0.1:3312",
        "--user",
        operator_user.username,
        "--on-timeout",
        "offline_hard",
        "--plan-only",
    )
    assert code == 0, out
    [held] = [line for line in out.splitlines() if line.startswith("  INFO: ") and " connection(s) in use on " in line]
    pinned = int(held.split()[1])
    assert pinned > 0 and held.startswith(f"  INFO: {pinned} connection(s) in use on 127.0.0.1:3312 when planned (")
    # A reader's drain names the reader, not a switchover's "old writer" (issue 36 item 12).
    assert (
        f"  ERROR: If the drain times out, OFFLINE_HARD will cut the sessions still on 127.0.0.1:3312: {pinned} now."
        in out
    ) and "old writer" not in out
    assert not Operation.objects.exists()
