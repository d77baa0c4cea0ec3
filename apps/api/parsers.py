"""The API's JSON bodies, read strictly: hostile input costs a 400, never a 500 or a row nobody can show.

Python's json raises RecursionError on a body nested some thousand levels deep (a 500), and decodes "\\ud800"
to a lone surrogate that a database stores and no page can render afterwards (a 500 on every page of that
change set). Neither is JSON an operator sends: both are a ParseError here, as is nesting past MAX_DEPTH."""

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

MAX_DEPTH = 32


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested more than {MAX_DEPTH} levels deep") from None
        check(data)
        return data


def check(data):
    """Depth and text of a parsed body, walked without recursion."""
    todo = [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if depth > MAX_DEPTH:
            raise ParseError(f"JSON parse error - nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, str):
            _text(value)
        elif isinstance(value, dict):
            for k, v in value.items():
                _text(k)
                todo.append((v, depth + 1))
        elif isinstance(value, list):
            todo.extend((v, depth + 1) for v in value)


def _text(value):
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ParseError("JSON parse error - a string holds a lone surrogate (\\ud800-\\udfff): not text") from None
