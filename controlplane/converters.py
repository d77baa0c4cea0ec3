"""Object ids in URLs and query strings: ASCII digits that fit the database's 64-bit key, nothing else.

Django's `<int:...>` takes any run of digits, so a 20-digit id reached the database and SQLite raised
OverflowError (a 500); `str.isdigit()` takes "²" and "٣", which int() then refuses (another 500). A value
outside this shape is simply not an id: the URL does not match (404), the parameter is ignored."""
import re

ID = re.compile(r"[0-9]{1,18}")  # 18 digits always fit a signed 64-bit integer


class IdConverter:
    regex = ID.pattern

    def to_python(self, value):
        return int(value)

    def to_url(self, value):
        return str(value)


def parse_id(raw):
    """The id in a query-string or form value, or None when it is not one."""
    raw = (raw or "").strip()
    return int(raw) if ID.fullmatch(raw) else None
