"""Issue 34: tag values, API token names and change-set host names refuse line breaks and invisible characters
(zero-width spaces, direction overrides, BOM, line separators): a value must not read as something it is not."""

import pytest

from apps.accounts import tokens
from apps.configuration import tables
from apps.fleet import tags

DEFAULTS = {c.name: c.default for c in tables.MYSQL_SERVERS.columns}
SHAPES = [
    "a\rb",
    "a\nb",
    "a\u0085b",
    "a\u200bb",
    "a\u202eb",
    "\ufeffab",
    "a\u2028b",
    "a\u2029b",
    "a\u2060b",
    "a\u00adb",
]


@pytest.mark.parametrize("value", SHAPES)
def test_a_tag_value_with_an_invisible_character_is_refused(value):
    with pytest.raises(tags.BadTag, match="invisible"):
        tags.check("env", f"prod{value}")
    assert tags.check("env", "prod-eu") == ("env", "prod-eu")


@pytest.mark.parametrize("value", SHAPES)
def test_a_change_set_host_name_with_an_invisible_character_is_refused(value):
    row = tables.typed_row(
        tables.MYSQL_SERVERS, {**DEFAULTS, "hostgroup_id": 10, "hostname": f"db1{value}.example.net", "port": 3306}
    )
    with pytest.raises(tables.RowError, match="invisible"):
        tables.check_row(tables.MYSQL_SERVERS, row)
    good = tables.typed_row(
        tables.MYSQL_SERVERS, {**DEFAULTS, "hostgroup_id": 10, "hostname": "db1.example.net", "port": 3306}
    )
    assert tables.check_row(tables.MYSQL_SERVERS, good)["hostname"] == "db1.example.net"


@pytest.mark.django_db
@pytest.mark.parametrize("value", SHAPES)
def test_a_token_name_with_an_invisible_character_is_refused(viewer_user, value):
    with pytest.raises(tokens.Refused, match="invisible"):
        tokens.create(viewer_user, f"ci{value}deploy")
    token, _ = tokens.create(viewer_user, "ci deploy")
    assert token.name == "ci deploy"
