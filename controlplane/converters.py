"""Object ids in URLs and query strings: ASCII digits that fit the database's 64-bit key, nothing else.

Django's `<int:...>` takes any run of digits, so a 20-digit id reached the database and SQLite raised
OverflowError (a 500); `str.isdigit()` takes "²" and "٣", which int() then refuses (another 500). A value
outside this shape is simply not an id: the URL does not match (404), the parameter is ignored."""

import re
from typing import Any

from django import forms

ID = re.compile(r"[0-9]{1,18}")  # 18 digits always fit a signed 64-bit integer


class IdConverter:
    regex = ID.pattern

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


class IdsField(forms.ModelMultipleChoiceField):
    """A ModelMultipleChoiceField whose values must be ids before they reach the database (a 20-digit one was an
    OverflowError on SQLite, a 500)."""

    def _check_values(self, value: Any) -> Any:
        for pk in value if isinstance(value, (list, tuple)) else [value]:
            if parse_id(str(pk)) is None:
                raise forms.ValidationError(
                    self.error_messages["invalid_pk_value"], code="invalid_pk_value", params={"pk": str(pk)[:20]}
                )
        return super()._check_values(value)  # type: ignore[misc]  # Django's own method, missing from django-stubs


def parse_id(raw: str | None) -> int | None:
    """The id in a query-string or form value, or None when it is not one."""
    raw = (raw or "").strip()
    return int(raw) if ID.fullmatch(raw) else None
