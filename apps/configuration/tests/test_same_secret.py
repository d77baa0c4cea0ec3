"""One "same secret" check (content.same_secret / secrets_match), in constant time, used by the drift, a change
set's plan and its verify step (issue 35: it was written three times, each comparing passwords with ==)."""

import ast
from pathlib import Path

from apps.configuration import content as C

ROOT = Path(__file__).resolve().parents[3]


def test_a_password_and_its_hash_are_the_same_secret_and_nothing_matches_only_nothing():
    hashed = C.mysql_native_hash("s3cret")
    assert C.secrets_match("s3cret", "s3cret") and C.secrets_match("s3cret", hashed)
    assert C.secrets_match(hashed.lower(), "s3cret")  # a hash read back in another case
    assert not C.secrets_match("s3cret", "s3cre") and not C.secrets_match("s3cret", C.mysql_native_hash("other"))
    assert C.secrets_match(None, None) and C.secrets_match("", "")
    assert not C.secrets_match("s3cret", None) and not C.secrets_match("", None) and not C.secrets_match(None, "s3cret")


def test_references_are_resolved_before_they_are_compared():
    same = C.same_secret({"r1": "s3cret", "r2": C.mysql_native_hash("s3cret")}.get)
    assert same({"secret": "r1"}, "s3cret") and same({"secret": "r1"}, {"secret": "r2"})
    assert same("s3cret", {"secret": "r2"}) and not same({"secret": "r1"}, "other")
    assert not same({"secret": "unknown"}, "s3cret")  # an unknown reference holds no password


def test_the_check_is_written_once_and_compares_in_constant_time():
    """No other module of the app defines a secret comparison, and the check compares the passwords with
    hmac.compare_digest only: `==` stops at the first differing character, which times how much matched."""
    defined = {
        str(p.relative_to(ROOT)): node.name
        for p in sorted((ROOT / "apps").rglob("*.py"))
        if "tests" not in p.parts
        for node in ast.walk(ast.parse(p.read_text()))
        if isinstance(node, ast.FunctionDef) and "same_secret" in node.name
    }
    assert defined == {"apps/configuration/content.py": "same_secret"}
    tree = ast.parse(Path(C.__file__).read_text())
    match = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "secrets_match")
    calls = {n.func.id for n in ast.walk(match) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert "_constant_time_equal" in calls
    compares = [ast.unparse(n) for n in ast.walk(match) if isinstance(n, ast.Compare)]
    assert compares == ["a == b"]  # only where one side holds no password (the `not a or not b` branch)
    helper = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "_constant_time_equal")
    assert "hmac.compare_digest" in ast.unparse(helper)
