"""The adopt form reads whatever admin port it is given with the credentials it is given (issue 22): every
attempt is audited, and a user gets at most ADOPT_ATTEMPTS_PER_MINUTE previews a minute, so the form is no port
scanner or password oracle."""

import pytest
from django.urls import reverse

from apps.audit.models import AuditEvent

from .test_adopt import form_data

pytestmark = pytest.mark.django_db


def test_every_attempt_is_audited_and_the_rate_is_bounded(operator_client, lab_pair, settings):
    settings.ADOPT_ATTEMPTS_PER_MINUTE = 3
    first, _ = lab_pair
    assert operator_client.post(reverse("fleet:adopt"), form_data(first)).status_code == 200  # a preview read
    for port in (1, 2):  # closed ports: the node cannot be read
        assert operator_client.post(reverse("fleet:adopt"), form_data(first, admin_port=port)).status_code == 400
    before = len(first.statements())
    refused = operator_client.post(reverse("fleet:adopt"), form_data(first))
    assert refused.status_code == 429 and "Too many adoption attempts" in refused.content.decode()
    assert len(first.statements()) == before  # refused before any connection to the node
    events = list(
        AuditEvent.objects.filter(action="adopt proxysql node").order_by("id").values_list("outcome", "target")
    )
    assert events == [
        ("dry_run", f"127.0.0.1:{first.port}"),
        ("failure", "127.0.0.1:1"),
        ("failure", "127.0.0.1:2"),
        ("refused", f"127.0.0.1:{first.port}"),
    ]
    assert "pw" not in str(AuditEvent.objects.filter(action="adopt proxysql node").values_list("details", flat=True))
