"""apply_edits() says EditError for an edit it cannot apply, also a malformed one (its except clause takes the
KeyError / TypeError of a bad shape): describing such an edit for the message must not raise in its turn (a table
given as a list or a dict raised TypeError from describe(), found by mypy)."""

import pytest

from apps.configuration.content import EditError, apply_edits, describe, empty


@pytest.mark.parametrize("table", [["mysql_servers"], {"name": "mysql_servers"}])
def test_an_edit_whose_table_is_not_a_name_is_refused_with_edit_error(table):
    edit = {"op": "delete", "table": table, "key": [100, "db1", 3306]}
    with pytest.raises(EditError, match="edit 1"):
        apply_edits(empty(), [edit])
    assert describe(edit).startswith("delete ")
