"""The double held to the real ProxySQL (issue 33): the same statement scripts replayed on a double and on a real node
of the same version, every answer compared -- column names, rows (NULL against '' too), affected rows, error texts.

A script is the reference's transcripts (../shared/proxysql-reference/transcripts/*.jsonl: their `sql`, in order) or
one of lab/reference/conformance/*.sql (one statement a line, `--` comments). Every step of a script is compared,
whatever the transcript's own `compare` rule says; a difference is allowed only when lab/reference/conformance/
differences.json lists it, with its reason (what a double cannot be: timing, scale, a process's own figures).
"""

import json
from dataclasses import dataclass
from pathlib import Path

import MySQLdb

REPO = Path(__file__).resolve().parent.parent
REFERENCE = REPO.parent / "shared" / "proxysql-reference"
SCRIPTS_DIR = REPO / "lab" / "reference" / "conformance"
DIFFERENCES = SCRIPTS_DIR / "differences.json"
# the double's version profile for each real binary
DOUBLE_VERSION = {"2.7.1": "2.7", "2.5.5": "2.5"}


@dataclass(frozen=True)
class Answer:
    columns: tuple  # column names
    rows: tuple  # each a tuple of str / None
    rowcount: int | None  # for a statement without a result set
    error: str | None  # the error's text (its code is 1045 for every admin error: not told apart)

    def shown(self):
        if self.error:
            return f"error {self.error!r}"
        if not self.columns:
            return f"ok, {self.rowcount} rows affected"
        return f"columns {list(self.columns)} rows {json.dumps([list(r) for r in self.rows])[:400]}"


def scripts():
    """{name: [statements]}: both reference transcripts and every lab/reference/conformance/*.sql."""
    out = {}
    for path in sorted((REFERENCE / "transcripts").glob("*.jsonl")):
        out[path.name] = [json.loads(line)["sql"] for line in path.read_text().splitlines() if line.strip()]
    for path in sorted(SCRIPTS_DIR.glob("*.sql")):
        out[path.name] = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("--")]
    return out


def replay(port, statements, user="admin", password="admin"):
    """Each statement in order on one admin session: [Answer]."""
    conn = MySQLdb.connect(host="127.0.0.1", port=port, user=user, passwd=password, connect_timeout=5, read_timeout=30)
    out = []
    try:
        for sql in statements:
            cur = conn.cursor()
            try:
                cur.execute(sql)
            except MySQLdb.MySQLError as exc:
                out.append(Answer((), (), None, str(exc.args[1]) if len(exc.args) > 1 else str(exc)))
                continue
            finally:
                pass
            if cur.description:
                rows = tuple(
                    tuple(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in r)
                    for r in cur.fetchall()
                )
                out.append(Answer(tuple(d[0] for d in cur.description), rows, None, None))
            else:
                out.append(Answer((), (), cur.rowcount, None))
            cur.close()
    finally:
        conn.close()
    return out


def differences(script, statements, double_answers, real_answers):
    """[(step number from 1, sql, double's answer, real's answer)] where they differ."""
    return [(n, sql, d, r) for n, (sql, d, r) in enumerate(zip(statements, double_answers, real_answers), 1) if d != r]


def allowed():
    """{(script, step): {"versions": [...], "what": ..., "reason": ...}} from differences.json."""
    entries = json.loads(DIFFERENCES.read_text())["differences"]
    return {(e["script"], e["step"]): e for e in entries}


def unexplained(version, script, found):
    """The differences of one script on one version that differences.json does not list for that version, and the
    ones it lists that did not occur (the double answers as the real one there now: the entry must go)."""
    listed = allowed()
    out = [
        f"{script} step {n} ({version}): {sql[:100]}\n    double: {d.shown()}\n    real:   {r.shown()}"
        for n, sql, d, r in found
        if version not in listed.get((script, n), {}).get("versions", ())
    ]
    seen = {n for n, *_ in found}
    out += [
        f"{script} step {n} ({version}) is listed in differences.json but did not differ: remove it"
        for (name, n), entry in sorted(listed.items())
        if name == script and version in entry["versions"] and n not in seen
    ]
    return out
