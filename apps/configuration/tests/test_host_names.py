"""Issue 34: a change set's mysql_servers row names where the pollers log in with the cluster's monitor credentials;
a host name with a line break, a space or an invisible character is refused with the reason (it was accepted)."""

import pytest
from hypothesis import given, settings, strategies as st

from apps.audit.actor import Actor
from apps.configuration import content as C
from apps.configuration import services
from apps.configuration.content import EditError, apply_edits
from apps.configuration.tests.test_findings import BASE
from apps.digests.tests.factories import fleet


def server_edit(hostname):
    return {"op": "upsert", "table": "mysql_servers", "row": {"hostgroup_id": 100, "hostname": hostname, "port": 3306}}


@pytest.mark.parametrize(
    "hostname, said",
    [
        ("db1.example.com\r\nevil.example.com", "contains a control character (U+000D)"),
        ("db1 ", "contains SPACE (U+0020)"),
        ("db1\u200b.example.com", "contains ZERO WIDTH SPACE (U+200B)"),
        ("db1\u2028", "contains LINE SEPARATOR (U+2028)"),
        ("  ", "is empty"),
    ],
)
def test_a_host_name_with_hidden_characters_is_refused(hostname, said):
    with pytest.raises(EditError) as refused:
        apply_edits(BASE, [server_edit(hostname)])
    assert f"hostname {said}" in str(refused.value)
    assert len(apply_edits(BASE, [server_edit("db-2.example.com")])["mysql_servers"]) == len(BASE["mysql_servers"]) + 1


HIDDEN = st.characters(categories=["Cc", "Cf", "Zl", "Zp", "Zs"])


@settings(max_examples=60, deadline=None)
@given(
    before=st.from_regex(r"[a-z0-9.-]{1,20}", fullmatch=True),
    hidden=HIDDEN,
    after=st.from_regex(r"[a-z0-9.-]{0,20}", fullmatch=True),
)
def test_fuzz_hidden_characters_anywhere_in_a_host_name_are_refused(before, hidden, after):
    with pytest.raises(EditError, match="hostname contains (a NUL character|.*a host name has no spaces)"):
        apply_edits(BASE, [server_edit(before + hidden + after)])


@pytest.mark.django_db
def test_a_draft_refuses_the_row_and_keeps_what_it_had(operator_user):
    cluster, _ = fleet(2, "shop")
    cluster.credential_hosts = "*.example.com"  # the hosts this draft may add (credential_hosts.py)
    cluster.save()
    content = C.empty()
    content["roles"] = {"writer": 100, "reader": 101}
    services.record_version(cluster, content, actor=Actor.system(), reason="start", source="change")
    cs = services.start_change_set(cluster, actor=Actor.command(operator_user), reason="a new backend")
    services.add_edit(cs, server_edit("db1.example.com"), actor=Actor.command(operator_user))
    with pytest.raises(services.Refused, match="hostname contains a control character"):
        services.add_edit(cs, server_edit("db2.example.com\nevil"), actor=Actor.command(operator_user))
    cs.refresh_from_db()
    assert [e["row"]["hostname"] for e in cs.edits] == ["db1.example.com"]
