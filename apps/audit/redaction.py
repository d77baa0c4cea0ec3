"""Alert channel URLs are secrets (a Slack-style URL is the credential). Since alerts 0003 the audit keeps a channel's
URL as scheme and host with a fingerprint, but events written before hold the full URL (in a channel's before/after,
and in a failed delivery's error text, which quoted the path), and the hash chain keeps every event as written. So
these events are shown, exported and searched through shown_details(): a URL keeps its scheme and host, its user
info, path and query become "…", and a quoted `url: /path` becomes `url: …`. The stored evidence is unchanged."""

import re
from typing import Any

URL_ACTIONS = frozenset(
    {"add alert channel", "change alert channel", "delete alert channel", "alert notification not delivered"}
)
_URL = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^\s\"'/?#\\@]*@)?([^\s\"'/?#\\@]*)([^\s\"']*)")
_QUOTED_PATH = re.compile(r"(?i)(\burl: )[/\\]\S*")


def _text(value: str) -> str:
    value = _URL.sub(lambda m: m[1] + ("…@" if m[2] else "") + m[3] + ("/…" if m[4] else ""), value)
    return _QUOTED_PATH.sub(r"\1…", value)


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def shown_details(action: str, details: Any) -> Any:
    """An event's details as anyone may read them (page, API, exports, search)."""
    return _redacted(details) if action in URL_ACTIONS else details
