"""A hostile probe of a running console over HTTP (issue 34's "done when"): as an operator, a viewer and an anonymous
caller it GETs every page and API read with hostile query strings (huge page numbers and sizes, control and
invisible characters, bad ids, dates past the calendar) and POSTs hostile bodies (oversized, unicode, line breaks, URL
shapes with userinfo and backslashes, hosts outside the credential hosts). It collects what breaks the rules:

- any answer 500 or more;
- a secret (a channel URL's path, a channel's secret, a stored password, an API token) in anything a viewer or an
  anonymous caller can read;
- (the caller's own listeners say whether credentials or posts reached a host nobody allowed).

Used by lab/tests/test_probe_hostile.py against a live test server; `Probe(base_url, secrets).run(...)` can be
pointed at any console (sessions by user name and password, API tokens by value).
"""

import re
import time
from dataclasses import dataclass, field

import requests

# Text a hostile user types into every field: control characters, line breaks, invisible and direction-changing
# characters, markup, template syntax, SQL, numbers past 64 bits, and long text.
HOSTILE_TEXT = [
    "\x00",
    "a\r\nb",
    "\u200b\u202e\ufeff",
    "<script>alert(1)</script>",
    "{{ 7*7 }}",
    "' OR '1'='1",
    "é中😀",
    "9" * 40,
    "-1",
    "\\",
    "%00",
    "x" * 20_000,
]
# Query strings every GET is also tried with.
HOSTILE_QUERIES = [
    {"page": "9" * 30, "page_size": "9" * 12, "per_page": "1000000000"},
    {"page": "-1", "sort": "\x00'\"", "order": "-" * 200, "q": "\u202eSELECT\r\n%00" + "é" * 500},
    {
        "cluster": "99999999999999999999",
        "from": "9999-12-31T23:59:59",
        "to": "0001-01-01",
        "window": "1e309",
        "node": "abc",
        "digest": "0x" + "F" * 40,
        "before": "9" * 30,
        "after": "-9",
    },
]
BAD_IDS = ["0", "9" * 18]


@dataclass
class Caller:
    """One caller of the probe: a browser session (cookies) and, when it has one, an API token."""

    name: str
    session: requests.Session
    token: str = ""
    viewer_readable: bool = True  # what this caller reads must hold no secret

    def api_headers(self):
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}


@dataclass
class Probe:
    base: str
    secrets: list
    timeout_s: float = 60.0
    requests_made: int = 0
    failures: list = field(default_factory=list)  # "500 GET /x as viewer", "secret ... in GET /y as viewer"
    slowest: tuple = (0.0, "")
    statuses: dict = field(default_factory=dict)  # (caller, status) -> how many answers

    def login(self, name, username=None, password=None, token="", viewer_readable=True):
        """A Caller: logged in through the login form when a user name is given, anonymous otherwise."""
        session = requests.Session()
        if username:
            page = session.get(f"{self.base}/accounts/login/", timeout=self.timeout_s)
            csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
            answer = session.post(
                f"{self.base}/accounts/login/",
                data={"username": username, "password": password, "csrfmiddlewaretoken": csrf},
                headers={"Referer": f"{self.base}/accounts/login/"},
                timeout=self.timeout_s,
                allow_redirects=False,
            )
            assert answer.status_code == 302, f"login of {username}: {answer.status_code}"
        return Caller(name, session, token, viewer_readable)

    def _csrf(self, caller):
        return caller.session.cookies.get("csrftoken", "")

    def _record(self, caller, method, path, answer, took):
        self.requests_made += 1
        self.statuses[caller.name, answer.status_code] = self.statuses.get((caller.name, answer.status_code), 0) + 1
        where = f"{method} {path[:160]!r} as {caller.name}"
        if took > self.slowest[0]:
            self.slowest = (took, where)
        if answer.status_code >= 500:
            self.failures.append(f"{answer.status_code} {where}")
        if caller.viewer_readable:
            body = answer.content.decode("utf-8", "replace")
            for secret in self.secrets:
                if secret and secret in body:
                    self.failures.append(f"secret {secret[:6]}... in {where}")

    def get(self, caller, path, params=None, api=False):
        started = time.monotonic()
        answer = caller.session.get(
            self.base + path,
            params=params,
            timeout=self.timeout_s,
            allow_redirects=False,
            headers=caller.api_headers() if api else {},
        )
        self._record(caller, "GET", path + (f"?{params}" if params else ""), answer, time.monotonic() - started)
        return answer

    def post(self, caller, path, data=None, json=None, api=False, raw=None, content_type=None):
        headers = caller.api_headers() if api else {"X-CSRFToken": self._csrf(caller), "Referer": self.base + path}
        if content_type:
            headers["Content-Type"] = content_type
        started = time.monotonic()
        answer = caller.session.post(
            self.base + path,
            data=raw if raw is not None else data,
            json=json,
            headers=headers,
            timeout=self.timeout_s,
            allow_redirects=False,
        )
        self._record(caller, "POST", path, answer, time.monotonic() - started)
        return answer

    def read_everything(self, callers, pages, api_reads):
        """Every page and API read, plain and with each hostile query string, by each caller; each path with an id
        also with bad ids."""
        for caller in callers:
            for path in pages:
                for params in [None] + HOSTILE_QUERIES:
                    self.get(caller, path, params)
                for bad in _with_bad_ids(path):
                    self.get(caller, bad)
            for path in api_reads:
                for params in [None] + HOSTILE_QUERIES:
                    self.get(caller, path, params, api=True)
                for bad in _with_bad_ids(path):
                    self.get(caller, bad, api=True)

    def post_hostile_forms(self, caller, forms):
        """Each (path, fields) form posted once per hostile text put in every field, and once oversized."""
        for path, fields in forms:
            for text in HOSTILE_TEXT:
                self.post(caller, path, data={k: (text if v is None else v) for k, v in fields.items()})
            self.post(caller, path, data={k: "x" * 3_000_000 if v is None else v for k, v in fields.items()})

    def post_hostile_api(self, caller, writes):
        """Each (path, body) API write with hostile text in its None fields, a 7 MB body, a body nested 10,000
        deep and a body that is not JSON."""
        for path, body in writes:
            for text in HOSTILE_TEXT:
                self.post(caller, path, json=_filled(body, text), api=True)
            self.post(
                caller, path, raw=b'{"reason": "' + b"x" * 7_000_000 + b'"}', api=True, content_type="application/json"
            )
            self.post(caller, path, raw=b"[" * 10_000 + b"]" * 10_000, api=True, content_type="application/json")
            self.post(caller, path, raw=b"\xff\xfe not json", api=True, content_type="application/json")


def _filled(body, text):
    if isinstance(body, dict):
        return {k: _filled(v, text) for k, v in body.items()}
    if isinstance(body, list):
        return [_filled(v, text) for v in body]
    return text if body is None else body


def _with_bad_ids(path):
    """The path with its last number replaced by each bad id (none when it has no number)."""
    match = list(re.finditer(r"/(\d+)/", path))
    if not match:
        return []
    last = match[-1]
    return [path[: last.start(1)] + bad + path[last.end(1) :] for bad in BAD_IDS]
