"""docs/benchmarks.md marks a figure older than the code it measures (lab/figures_age.py, issue 40 §4)."""

from lab import figures_age


def test_the_benchmark_figures_say_whether_the_polling_path_changed_after_them():
    text = figures_age.DOCS.read_text()
    assert figures_age.MARK.search(text), "the generated block of bin/bench-monitoring carries its commit"
    assert figures_age.marked(text) == text, (
        "a figure of docs/benchmarks.md is older than the polling path's code and not marked so (or marked and no "
        "longer so): run .venv/bin/python -m lab.figures_age --mark, or bin/bench-monitoring --update-docs"
    )


def test_a_commit_on_the_polling_path_after_the_figures_makes_them_older_than_the_code():
    head = figures_age.git("rev-parse", "HEAD").strip()
    assert figures_age.age_line(head) == ""  # figures measured at HEAD: nothing newer
    # The run of 2026-11-21 (faedfe7): pollers.py, live.py and the alert rules changed many times since.
    line = figures_age.age_line("faedfe789953e3d3a24463c8a86995a36a701ff9")
    assert line.startswith("> **Older than the code**") and "faedfe7899" in line
    assert "apps/monitoring/pollers.py" in figures_age.POLLING_PATH
