"""Issue 39: "Record what the nodes run as the next version" through the JSON API, as the page does it: admin only, a
reason, the difference read first and returned, the version seen checked, audited; nothing written to the nodes."""

import pytest

from apps.audit.models import AuditEvent
from apps.configuration import content as C
from apps.configuration import services as configuration
from apps.operations import switchover
from apps.operations.tests.test_repair_moves_no_writer import move_writer_by_hand

from .conftest import error_of, token_client

pytestmark = pytest.mark.django_db


def test_an_admin_records_what_the_nodes_run_through_the_api(adopted_lab, operator_user, admin_user_role, live_redis):
    cluster, doubles = adopted_lab
    for double in doubles:  # every node writes to 3312 (a worker died before recording it, or someone by hand)
        move_writer_by_hand(double)
    url = f"/api/v1/clusters/{cluster.pk}/record-nodes/"
    latest = configuration.latest(cluster)

    operator = token_client(operator_user)
    # Reading the difference is a read like every API GET (a viewer reads it too: test_writes); recording is an admin's.
    read_by_operator = operator.get(url)
    assert read_by_operator.status_code == 200 and read_by_operator.json()["refusal"] == "", read_by_operator.content
    error_of(operator.post(url, {"reason": "x", "version": latest.number}), 403)

    admin = token_client(admin_user_role)
    reading = admin.get(url)
    assert reading.status_code == 200, reading.content
    reading = reading.json()
    assert reading["version"] == latest.number and reading["refusal"] == ""
    assert {tuple(line["key"]) for line in reading["lines"]} >= {(100, "127.0.0.1", 3311), (100, "127.0.0.1", 3312)}

    fields = error_of(admin.post(url, {"version": latest.number}), 400)["fields"]
    assert "reason" in fields
    assert "reason" in error_of(admin.post(url, {"reason": "   ", "version": latest.number}), 400)["fields"]
    stale = error_of(admin.post(url, {"reason": "x", "version": latest.number + 5}), 409)["message"]
    assert f"The latest version is now {latest.number}" in stale
    assert configuration.latest(cluster).number == latest.number  # nothing recorded by a refusal

    response = admin.post(url, {"reason": "the switchover's worker died", "version": latest.number})
    assert response.status_code == 201, response.content
    answer = response.json()
    version = configuration.latest(cluster)
    assert answer["version"]["number"] == version.number == latest.number + 1
    assert answer["version"]["source"] == "nodes" and answer["version"]["reason"] == "the switchover's worker died"
    assert answer["lines"] == reading["lines"]
    assert C.writers(version.content) == [("127.0.0.1", 3312)]
    assert switchover.current_writer(cluster).server.port == 3312
    event = AuditEvent.objects.get(action="nodes recorded as intent", outcome="success")
    assert event.details["reason"] == "the switchover's worker died" and event.details["changes"]
    assert event.actor_kind == "api"

    # Recorded once: the same request again is refused (the version moved, and nothing is left to record).
    error_of(admin.post(url, {"reason": "again", "version": latest.number}), 409)
    assert "nothing to record" in admin.get(url).json()["refusal"]
