"""Scheduler rows run any executable on the ProxySQL host, and admin-* variables open or change its admin
interface (issue 22: an operator had `/bin/sh -c ...` loaded and saved, and could turn on the REST API). Only an
admin adds or changes them, at every door: the page, the API, a YAML file (upload and `config apply`); the
form says so, and the effect check names them."""

import html

import pytest
import yaml
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from apps.api.tests.conftest import token_client
from apps.audit.actor import Actor
from apps.configuration import files, services
from apps.configuration.models import ChangeSet
from apps.configuration.change_set import plan_change_set
from apps.configuration.tests.test_change_sets import run, sql, versioned_lab  # noqa: F401 (a fixture)
from apps.configuration.tests.test_files import command
from apps.configuration.tests.test_secret_places import form_data

pytestmark = pytest.mark.django_db(transaction=True)

SHELL = {
    "id": 1,
    "active": 1,
    "interval_ms": 10000,
    "filename": "/bin/sh",
    "arg1": "-c",
    "arg2": "id > /tmp/x",
    "arg3": None,
    "arg4": None,
    "arg5": None,
    "comment": "runs a shell",
}
REFUSAL = "Only an admin may change scheduler rows and admin-* variables"


def logged_in(user):
    client = Client()
    client.force_login(user)
    return client


def page_edits(client, cs):
    """A scheduler row through the row form and admin-restapi_enabled through the variable form."""
    row = client.post(
        reverse("configuration:row_form", args=[cs.pk, "scheduler"]), {"save": "1", **form_data("row-scheduler", SHELL)}
    )
    variable = client.post(
        reverse("configuration:set_variable", args=[cs.pk]), {"name": "admin-restapi_enabled", "value": "true"}
    )
    return row, variable


def test_the_page_refuses_an_operator_and_lets_an_admin_with_the_effect_check_naming_them(
    versioned_lab, operator_user, admin_user_role
):
    cluster, doubles, v1 = versioned_lab
    operator = logged_in(operator_user)
    mine = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="a job")
    form = operator.get(reverse("configuration:row_form", args=[mine.pk, "scheduler"])).content.decode()
    assert "only an admin may add or change scheduler rows" in form
    assert "only an admin may change them" in operator.get(mine.get_absolute_url()).content.decode()
    for response in page_edits(operator, mine):
        assert response.status_code == 403 and REFUSAL in html.unescape(response.content.decode())
    assert ChangeSet.objects.get(pk=mine.pk).edits == []

    cs = services.start_change_set(cluster, actor=Actor.command(admin_user_role), reason="a job and the REST API")
    for response in page_edits(logged_in(admin_user_role), cs):
        assert response.status_code == 302, response.content[:300]
    cs.refresh_from_db()
    plan, _ = plan_change_set(cs)
    flagged = {w["key"]: w for w in plan.facts["warnings"]}
    assert flagged["scheduler_runs_commands"]["label"] == "Scheduler row 1 added: ProxySQL runs it on its host"
    assert flagged["scheduler_runs_commands"]["value"] == "/bin/sh -c id > /tmp/x every 10000 ms"
    assert "admin-restapi_enabled = true" in flagged["admin_variables"]["value"]
    op, _ = run(cs, admin_user_role)
    assert op.state == "done", op.error
    for d in doubles:
        assert sql(d, "SELECT filename, arg1 FROM runtime_scheduler WHERE id=1") == (("/bin/sh", "-c"),)


def test_the_api_and_files_refuse_an_operator_and_let_an_admin(versioned_lab, operator_user, admin_user_role, tmp_path):
    cluster, doubles, v1 = versioned_lab
    edits = [{"op": "upsert", "table": "scheduler", "row": SHELL}]
    url = f"/api/v1/clusters/{cluster.pk}/config/change-sets/"
    operator_api, admin_api = token_client(operator_user), token_client(admin_user_role)
    for body in (
        {"reason": "a job", "edits": edits},
        {"reason": "REST", "edits": [{"op": "set", "name": "admin-restapi_enabled", "value": "true"}]},
    ):
        refused = operator_api.post(url, body)
        assert refused.status_code == 403 and REFUSAL in refused.json()["error"]["message"], refused.content[:300]
    doc = yaml.safe_load(files.export(services.latest(cluster)))
    doc["scheduler"] = [SHELL]
    text = yaml.safe_dump(doc)
    refused = operator_api.post(url, {"reason": "a job", "file": text})
    assert refused.status_code == 403 and REFUSAL in refused.json()["error"]["message"]
    upload = logged_in(operator_user).post(
        reverse("configuration:upload", args=[cluster.pk]),
        {"reason": "a job", "file": SimpleUploadedFile("lab.yaml", text.encode())},
    )
    assert upload.status_code == 403 and REFUSAL in html.unescape(upload.content.decode())
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    code, said = command("apply", str(path), "--user", operator_user.username, "--reason", "a job", "--yes")
    assert code == 2 and REFUSAL in said, said
    assert not ChangeSet.objects.exists()

    allowed = admin_api.post(url, {"reason": "a job", "edits": edits})
    assert allowed.status_code == 201, allowed.content[:300]
    code, said = command("apply", str(path), "--user", admin_user_role.username, "--reason", "a job", "--yes")
    assert code == 0 and "Scheduler row 1 added: ProxySQL runs it on its host" in said, said
    for d in doubles:
        assert sql(d, "SELECT arg2 FROM runtime_scheduler WHERE id=1") == (("id > /tmp/x",),)
