"""A change set from a file has one service behind its three doors (the page's upload, the API, `manage.py config
apply`): each door's change set is audited as "change set created", and each door refuses one without a reason
with the service's one message, creating nothing."""

import io

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse

from apps.accounts import tokens
from apps.api.tests.conftest import ApiClient
from apps.audit.models import AuditEvent
from apps.configuration import files, services
from apps.configuration.models import ChangeSet

pytestmark = pytest.mark.django_db(transaction=True)


def a_file(cluster, weight):
    doc = yaml.safe_load(files.export(services.latest(cluster)))
    for row in doc["mysql_servers"]:
        if row["hostgroup_id"] == 101 and row["port"] == 3313:
            row["weight"] = weight
    return yaml.safe_dump(doc, sort_keys=False)


def command(*args):
    out = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        call_command("config", *args, stdout=out, stderr=out)
    return exit_.value.code, out.getvalue()


def created(cluster):
    return list(
        AuditEvent.objects.filter(action="change set created", cluster_id=cluster.pk).values_list(
            "details__change_set", "actor_kind"
        )
    )


def test_each_door_audits_the_change_set_it_creates(adopted_lab, operator_user, client, tmp_path):
    cluster, _ = adopted_lab
    client.force_login(operator_user)
    response = client.post(
        reverse("configuration:upload", args=[cluster.pk]),
        {"file": SimpleUploadedFile("c.yaml", a_file(cluster, 701).encode()), "reason": "page"},
    )
    assert response.status_code == 302, response.content[:400]
    page = ChangeSet.objects.get(cluster=cluster, reason="page")
    assert page.operation is not None and response.url == page.operation.get_absolute_url()

    api = ApiClient(tokens.create(operator_user, "doors")[1])
    response = api.post(
        f"/api/v1/clusters/{cluster.pk}/config/change-sets/", {"reason": "api", "file": a_file(cluster, 702)}
    )
    assert response.status_code == 201, response.content[:400]
    from_api = ChangeSet.objects.get(cluster=cluster, reason="api")

    path = tmp_path / "c.yaml"
    path.write_text(a_file(cluster, 703))
    code, out = command(
        "apply", cluster.name, str(path), "--user", operator_user.username, "--yes", "--reason", "command"
    )
    assert code == 0, out
    from_command = ChangeSet.objects.get(cluster=cluster, reason="command")
    assert from_command.state == ChangeSet.State.APPLIED

    assert sorted(created(cluster)) == sorted([(page.pk, "user"), (from_api.pk, "api"), (from_command.pk, "command")])


@pytest.mark.parametrize("reason", ["", "   "])
def test_each_door_refuses_a_change_set_without_a_reason_with_one_message(
    adopted_lab, operator_user, client, tmp_path, reason
):
    cluster, _ = adopted_lab
    text = a_file(cluster, 704)
    client.force_login(operator_user)
    response = client.post(
        reverse("configuration:upload", args=[cluster.pk]),
        {"file": SimpleUploadedFile("c.yaml", text.encode()), "reason": reason},
    )
    assert response.status_code == 400 and services.NEEDS_REASON in response.content.decode()

    api = ApiClient(tokens.create(operator_user, "doors")[1])
    response = api.post(f"/api/v1/clusters/{cluster.pk}/config/change-sets/", {"reason": reason, "file": text})
    assert response.status_code == 400 and response.json()["error"]["fields"] == {"reason": [services.NEEDS_REASON]}

    path = tmp_path / "c.yaml"
    path.write_text(text)
    code, out = command("apply", cluster.name, str(path), "--user", operator_user.username, "--yes", "--reason", reason)
    assert code == 2 and f"refused: {services.NEEDS_REASON}" in out
    code, out = command("plan", cluster.name, str(path), "--reason", reason)  # the preview says the same
    assert code == 2 and f"refused: {services.NEEDS_REASON}" in out

    assert not ChangeSet.objects.filter(cluster=cluster).exists() and created(cluster) == []


def test_planning_a_draft_asks_for_its_reason_with_the_same_message(adopted_lab, operator_user, client):
    cluster, _ = adopted_lab
    from apps.audit.actor import Actor

    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="")
    client.force_login(operator_user)
    response = client.post(reverse("configuration:plan", args=[cs.pk]), {"reason": ""}, follow=True)
    assert services.NEEDS_REASON in response.content.decode()
    api = ApiClient(tokens.create(operator_user, "doors")[1])
    response = api.post(f"/api/v1/config/change-sets/{cs.pk}/plan/", {"reason": ""})
    assert response.status_code == 400 and response.json()["error"]["fields"] == {"reason": [services.NEEDS_REASON]}
    cs.refresh_from_db()
    assert cs.state == ChangeSet.State.DRAFT and cs.operation is None


def test_a_file_validated_only_leaves_nothing_behind(adopted_lab, operator_user):
    cluster, _ = adopted_lab
    from apps.audit.actor import Actor

    text = a_file(cluster, 705)
    cs = services.validate_file(cluster, text, reason="check", actor=Actor.command(operator_user))
    assert cs.pk is None and cs.source == "file" and len(cs.edits) == 1
    with pytest.raises(services.NoReason, match=services.NEEDS_REASON):
        services.validate_file(cluster, text, reason=" ")
    assert not ChangeSet.objects.filter(cluster=cluster).exists() and created(cluster) == []
