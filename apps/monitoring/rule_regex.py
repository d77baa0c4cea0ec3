"""The one place a pattern that comes from a user or a node (query rules' match_digest and match_pattern, mirror
rules) is compiled and run: in ProxySQL's engine (mysql-query_processor_regex: 1 PCRE, the default, or 2 RE2),
CASELESS as re_modifiers says, and every evaluation bounded.

PCRE backtracks: a pattern such as `^(\\w+\\s?)*;$` can take exponential time on an ordinary digest text. Each
pattern is compiled with PCRE2's own start-of-pattern limits, (*LIMIT_MATCH=...)(*LIMIT_DEPTH=...), put after any
the pattern sets itself (the last one given wins, so a pattern cannot raise them). The pcre2 binding exposes no
match context to set them on. A search that reaches them raises MatchLimit, which callers turn into a finding
("this pattern reaches the match limit on ..."): never a 500, never a stalled worker. RE2 runs in linear time and
needs no limit. ProxySQL's own PCRE limit is higher (10,000,000, PCRE's default): a pattern that reaches ours
costs ProxySQL at least this much on every query it is tried on, which is worth telling either way.
"""

import re
from typing import Protocol

import pcre2
import re2

PCRE, RE2 = 1, 2
# About 4 ms a search with PCRE2's JIT (25 ms without) on this machine: a poll's few hundred digest texts stay
# well under a second even if every one reaches it. Ordinary rules need a few hundred steps on a digest text.
MATCH_LIMIT = 1_000_000
DEPTH_LIMIT = 10_000
_LIMITS = f"(*LIMIT_MATCH={MATCH_LIMIT})(*LIMIT_DEPTH={DEPTH_LIMIT})"
# PCRE2's start-of-pattern items: (*UTF), (*LIMIT_MATCH=5), (*CRLF)... only read at the very start.
_LEADING_VERBS = re.compile(r"(?:\(\*[A-Z_]+(?:=\d+)?\))*")


class _Compiled(Protocol):
    """What Pattern uses of a compiled pcre2 or re2 pattern (neither library ships types)."""

    def search(self, subject: str) -> object: ...
    def sub(self, replacement: str, subject: str, count: int = ...) -> str: ...


class MatchLimit(Exception):
    """A search reached the match (or depth, or heap) limit: it ended without an answer."""

    def __init__(self, pattern: str, subject: str) -> None:
        shown = subject if len(subject) <= 120 else subject[:117] + "..."
        super().__init__(f"this pattern reaches the match limit on {shown!r}")
        self.pattern, self.subject = pattern, subject


class Pattern:
    """A compiled rule pattern: search() and sub() as the engine runs them, bounded."""

    def __init__(self, pattern: str, compiled: _Compiled) -> None:
        self.pattern, self._compiled = pattern, compiled

    def search(self, subject: str) -> bool:
        """True when the pattern matches somewhere in `subject`; raises MatchLimit when it cannot tell."""
        try:
            return self._compiled.search(subject) is not None
        except pcre2.LibraryError as exc:
            raise MatchLimit(self.pattern, subject) from exc

    def sub(self, replacement: str, subject: str, count: int = 0) -> str:
        try:
            return self._compiled.sub(replacement, subject, count=count)
        except pcre2.LibraryError as exc:
            raise MatchLimit(self.pattern, subject) from exc


def compile(pattern: str, caseless: bool = False, engine: int = PCRE) -> Pattern:  # noqa: A001 (the name every regex library uses)
    """The pattern compiled as ProxySQL's engine would, bounded; raises the library's error when it does not
    compile (each library has its own error class)."""
    if engine == RE2:
        options = re2.Options()
        options.case_sensitive = not caseless
        options.log_errors = False
        return Pattern(pattern, re2.compile(pattern, options))
    flags = pcre2.I if caseless else 0
    pcre2.compile(pattern, flags, jit=False)  # its error, with positions in the pattern as written
    verbs = _LEADING_VERBS.match(pattern)  # never None: a starred group matches the empty string
    leading = verbs.end() if verbs else 0
    return Pattern(pattern, pcre2.compile(pattern[:leading] + _LIMITS + pattern[leading:], flags))
