"""The DR channels' doors for scripts on the DR lab: the API reads them (latest state, history, moves) and plans
a planned move that is confirmed and followed through the operation endpoints; `manage.py channel_move` plans,
prints, confirms and runs one, with the runbook exit codes. Each moved channel replicates identically."""

import io
import json
import sys
import time

import pytest
from django.core.management import CommandError, call_command

from apps.api.tests.conftest import token_client
from apps.audit.models import AuditEvent
from apps.dr import polling
from apps.dr.models import ReplicationChannel
from apps.operations import executor
from apps.operations.models import Operation
from lab.dr import WriteLoad, compare


def _poll(channel):
    polling.poll(
        [
            ReplicationChannel.objects.select_related(
                "source_server__cluster", "replica_server__cluster", "replica_cluster"
            ).get(pk=channel.pk)
        ]
    )


def command(*args, stdin=""):
    out, err = io.StringIO(), io.StringIO()
    old_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        with pytest.raises(SystemExit) as exit_:
            call_command("channel_move", *args, stdout=out, stderr=err)
    finally:
        sys.stdin = old_stdin
    return exit_.value.code, out.getvalue()


def test_the_api_reads_channels_and_moves_the_replica_through_the_operation_endpoints(
    dr_inventory, dr_healthy, live_redis, operator_user, viewer_user
):
    channel, dc1, dc2 = dr_inventory
    _poll(channel)
    viewer = token_client(viewer_user)
    page = viewer.get("/api/v1/channels/", {"cluster": channel.source_cluster_id}).json()
    assert page["count"] == 1
    [row] = page["results"]
    assert row["name"] == "dc1_to_dc2" and row["latest"]["state"] == "running" and row["latest"]["stale"] is False
    assert row["latest"]["io_running"] == "Yes" and row["latest"]["lag_seconds"] is not None
    assert {(c["side"], c["server"]) for c in row["candidates"]} >= {("source", dc1[0].pk), ("replica", dc2[0].pk)}
    assert "replication_password" not in row
    new_replica = next(s for s in dc2 if s.pk != channel.replica_server_id)
    # A viewer reads, never plans; a server of the wrong cluster is a 400 naming the field.
    assert viewer.post(f"/api/v1/channels/{channel.pk}/move/", {"new_replica": new_replica.pk}).status_code == 403
    operator = token_client(operator_user)
    wrong = operator.post(f"/api/v1/channels/{channel.pk}/move/", {"new_replica": dc1[1].pk})
    assert wrong.status_code == 400 and "new_replica" in wrong.json()["error"]["fields"], wrong.content
    assert operator.post(f"/api/v1/channels/{channel.pk}/move/", {}).status_code == 400
    assert not Operation.objects.exists()

    planned = operator.post(f"/api/v1/channels/{channel.pk}/move/", {"new_replica": new_replica.pk})
    assert planned.status_code == 201, planned.content
    op = planned.json()
    assert op["kind"] == "channel_move" and op["state"] == "planned"
    assert any(
        "MASTER_USE_GTID=slave_pos" in sql for step in op["plan"]["steps"] for sql in step["params"].get("sql", [])
    )
    assert viewer.post(f"/api/v1/operations/{op['id']}/confirm/", {}).status_code == 403
    with WriteLoad(dr_healthy) as load:
        time.sleep(0.3)
        confirmed = operator.post(f"/api/v1/operations/{op['id']}/confirm/", {})
        assert confirmed.status_code == 200, confirmed.content
        executor.run(op["id"])  # what the worker it was handed to does
        time.sleep(0.3)
    assert load.committed > 10
    followed = viewer.get(f"/api/v1/operations/{op['id']}/").json()
    assert followed["state"] == "done", followed["error"]
    assert ReplicationChannel.objects.get(pk=channel.pk).replica_server == new_replica
    result = compare(dr_healthy)
    assert result.identical, result.line()
    _poll(channel)
    detail = viewer.get(f"/api/v1/channels/{channel.pk}/").json()
    assert detail["replica_server"] == new_replica.pk and detail["latest"]["state"] == "running"
    assert [m["id"] for m in detail["moves"]] == [op["id"]] and detail["moves"][0]["state"] == "done"
    assert len(detail["history"]) == 2 and detail["history"][0]["replica_server"] == new_replica.pk


@pytest.mark.django_db(transaction=True)  # the command runs the operation on a thread of its own
def test_the_channel_move_command_moves_the_source_and_exits_0(dr_inventory, dr_healthy, live_redis, operator_user):
    channel, dc1, _ = dr_inventory
    new_source = next(s for s in dc1 if s.pk != channel.source_server_id)
    code, out = command(
        "dc1_to_dc2", "--source", f"127.0.0.1:{new_source.port}", "--user", operator_user.username, stdin="no\n"
    )
    assert code == 2 and "not confirmed" in out  # asked, refused: nothing ran
    assert "CHANGE MASTER TO MASTER_HOST='127.0.0.1'" in out and f"MASTER_PORT={new_source.port}" in out
    assert ReplicationChannel.objects.get(pk=channel.pk).source_server_id == channel.source_server_id

    with WriteLoad(dr_healthy) as load:
        time.sleep(0.3)
        code, out = command(
            "dc1_to_dc2",
            "--source",
            f"127.0.0.1:{new_source.port}",
            "--user",
            operator_user.username,
            "--yes",
            "--json",
        )
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0, lines[-1]
    assert lines[0]["event"] == "plan" and lines[0]["kind"] == "channel_move"
    assert lines[-1] == {**lines[-1], "event": "outcome", "state": "done", "exit_code": 0}
    assert ReplicationChannel.objects.get(pk=channel.pk).source_server == new_source
    assert dr_healthy.channel().source_port == new_source.port and load.committed > 10
    result = compare(dr_healthy)
    assert result.identical, result.line()
    assert AuditEvent.objects.filter(action="channel_move done").exists()


def test_the_channel_move_command_refuses_bad_input_and_a_failed_guard(
    dr_inventory, dr_healthy, live_redis, operator_user, viewer_user
):
    channel, dc1, dc2 = dr_inventory
    with pytest.raises(CommandError, match="no DR channel named 'nope'"):
        call_command("channel_move", "nope", "--source", "127.0.0.1:1", "--user", operator_user.username)
    with pytest.raises(CommandError, match="--source HOST:PORT, --replica HOST:PORT"):
        call_command("channel_move", "dc1_to_dc2", "--user", operator_user.username)
    with pytest.raises(CommandError, match="no backend 127.0.0.1:%d in cluster dc1" % dc2[1].port):
        call_command(
            "channel_move", "dc1_to_dc2", "--source", f"127.0.0.1:{dc2[1].port}", "--user", operator_user.username
        )
    with pytest.raises(CommandError, match="operator role"):
        call_command(
            "channel_move", "dc1_to_dc2", "--source", f"127.0.0.1:{dc1[1].port}", "--user", viewer_user.username
        )
    # A node that is no source candidate: the guard fails; an operator cannot override it: exit 2, nothing changes.
    from apps.dr.models import ChannelCandidate

    outsider = next(s for s in dc1 if s.pk != channel.source_server_id)
    ChannelCandidate.objects.filter(channel=channel, server=outsider).delete()
    code, out = command(
        "dc1_to_dc2", "--source", f"127.0.0.1:{outsider.port}", "--user", operator_user.username, "--yes"
    )
    assert code == 2 and "is a source candidate of the channel: no" in out and "refused" in out, out
    assert ReplicationChannel.objects.get(pk=channel.pk).source_server_id == channel.source_server_id
    assert dr_healthy.channel().source_port == channel.source_server.port
