"""conftest.missing(): a test that lacks a tool or the reference folder skips on a developer's machine and FAILS
under CI (CI=true), where everything it needs is installed: a check that silently never ran passed CI before."""

import pytest

from conftest import missing


def test_a_missing_tool_skips_on_a_developer_machine_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="promtool is not installed"):
        missing("promtool is not installed")
    for value in ("true", "1", "TRUE"):
        monkeypatch.setenv("CI", value)
        with pytest.raises(pytest.fail.Exception, match="reference folder not found; CI must have it"):
            missing("reference folder not found")
