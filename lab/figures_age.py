"""Figures that stay true (issue 40 §4): a figure of docs/benchmarks.md older than the code it measures is marked.

A generated block carries the commit its figures were measured at (`<!-- figures-commit: SHA -->`, written by
bin/bench-monitoring --update-docs). When a later commit touched the polling path (POLLING_PATH), the line after it
says so, with those commits; `--mark` rewrites that line from git, `--check` (and lab/tests/test_figures_age.py)
fails when the document does not say what git says.

    .venv/bin/python -m lab.figures_age [--check | --mark]
"""

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs" / "benchmarks.md"
# What a ProxySQL poll runs (the worker task's whole path): a commit touching one of these may move the figures.
POLLING_PATH = (
    "apps/monitoring/pollers.py",
    "apps/monitoring/rounds.py",
    "apps/monitoring/live.py",
    "apps/monitoring/live_doc.py",
    "apps/monitoring/leases.py",
    "apps/monitoring/query_stats.py",
    "apps/monitoring/pool.py",
    "apps/monitoring/proxysql_cluster.py",
    "apps/clients/wire.py",
    "apps/clients/proxysql.py",
    "apps/clients/backend.py",
    "apps/fleet/node_versions.py",
    "apps/alerts/evaluate.py",
    "apps/alerts/conditions.py",
    "apps/alerts/context.py",
    "apps/configuration/drift.py",
    "workers/monitoring.py",
    "workers/alerts.py",
)
MARK = re.compile(r"<!-- figures-commit: (?P<sha>[0-9a-f]{7,40}) -->\n(?P<age>> \*\*Older than the code\*\*[^\n]*\n)?")


def git(*args):
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout


def newer_commits(sha):
    """The commits after `sha` (on this branch) that touch the polling path, oldest first: ["abc1234 subject"]."""
    return [
        line[:80]
        for line in git("log", "--reverse", "--format=%h %s", f"{sha}..HEAD", "--", *POLLING_PATH).splitlines()
    ]


def age_line(sha):
    """What the document says under a mark: nothing while no later commit touched the polling path, else the first
    that did (the line stays the same as more follow: it changes only when a figure becomes stale)."""
    commits = newer_commits(sha)
    if not commits:
        return ""
    return (
        f"> **Older than the code**: the polling path changed after these figures' commit {sha[:10]}, first in "
        f"{commits[0].rstrip(',.;: ')}. Run `bin/bench-monitoring --update-docs` again.\n"
    )


def marked(text):
    """The document with every figures-commit mark followed by what git says of its age."""
    return MARK.sub(lambda m: f"<!-- figures-commit: {m['sha']} -->\n{age_line(m['sha'])}", text)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    text = DOCS.read_text()
    if not MARK.search(text):
        print(f"{DOCS.relative_to(REPO)} has no figures-commit mark", file=sys.stderr)
        return 1
    want = marked(text)
    if "--mark" in argv:
        DOCS.write_text(want)
        print("marked")
        return 0
    for m in MARK.finditer(text):
        print(f"figures of {m['sha'][:10]}: {len(newer_commits(m['sha']))} newer commit(s) on the polling path")
    if want != text:
        print(
            "docs/benchmarks.md does not say which figures are older than the code: run "
            ".venv/bin/python -m lab.figures_age --mark",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
