"""validate_change_set: the checks create_change_set runs on a change set's edits, writing no row (a rollout
validates its change on every selected cluster before it plans; it must not write and roll back change sets)."""

import pytest

from apps.audit.actor import Actor
from apps.audit.models import AuditEvent
from apps.configuration import services
from apps.configuration.models import ChangeSet, ConfigSecret

pytestmark = pytest.mark.django_db(transaction=True)

RULE = {
    "op": "upsert",
    "table": "mysql_query_rules",
    "row": {"rule_id": 77, "active": 1, "match_digest": "^SELECT probe", "destination_hostgroup": 101, "apply": 1},
}
USER = {
    "op": "upsert",
    "table": "mysql_users",
    "row": {"username": "probe", "password": "probe-secret", "default_hostgroup": 100},
}
SCHEDULER = {
    "op": "upsert",
    "table": "scheduler",
    "row": {
        "id": 1,
        "active": 1,
        "interval_ms": 10000,
        "filename": "/bin/true",
        "arg1": None,
        "arg2": None,
        "arg3": None,
        "arg4": None,
        "arg5": None,
        "comment": "",
    },
}


def counts():
    return ChangeSet.objects.count(), ConfigSecret.objects.count(), AuditEvent.objects.count()


def test_it_checks_as_create_change_set_does_and_writes_nothing(adopted_lab, operator_user, admin_user_role):
    cluster, _ = adopted_lab
    operator, admin = Actor.command(operator_user), Actor.command(admin_user_role)
    before = counts()
    cs = services.validate_change_set(cluster, actor=operator, reason="check", edits=[RULE, USER])
    assert counts() == before and cs.pk is None
    assert cs.base == services.latest(cluster) and cs.author == operator_user
    assert cs.edits[0] == RULE
    password = cs.edits[1]["row"]["password"]
    assert set(password) == {"secret"} and "probe-secret" not in str(cs.edits)  # never the clear password

    # the same refusals, word for word, as creating it
    bad = {"op": "delete", "table": "mysql_query_rules", "key": [999]}
    for actor, edits in ((operator, [bad]), (operator, [SCHEDULER])):
        with pytest.raises(services.Refused) as validated:
            services.validate_change_set(cluster, actor=actor, reason="check", edits=edits)
        with pytest.raises(services.Refused) as created:
            services.create_change_set(cluster, actor=actor, reason="check", edits=edits)
        assert str(validated.value) == str(created.value)
    assert ChangeSet.objects.count() == before[0]
    assert services.validate_change_set(cluster, actor=admin, reason="check", edits=[SCHEDULER]).edits == [SCHEDULER]

    made = services.create_change_set(cluster, actor=operator, reason="made", edits=[RULE, USER])
    assert made.edits[0] == cs.edits[0] and set(made.edits[1]["row"]["password"]) == {"secret"}
