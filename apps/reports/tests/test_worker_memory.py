"""Every worker process imports the task modules, so whatever they import at the top is resident in each of them
(a monitoring worker with four processes: five copies). Matplotlib and numpy (~56 MiB a process, measured with
/proc/self/status) are loaded by the one process that builds a report, when it builds it (issue 40: worker memory)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

LOAD_AS_A_WORKER = """
import json, sys
import django
django.setup()
from controlplane.celery import app
app.loader.import_default_modules()  # workers/, as a worker loads them (app.conf.imports)
from apps.reports import services
print(json.dumps({"tasks": len(app.tasks), "heavy": sorted(m for m in ("matplotlib", "numpy", "PIL") if m in sys.modules),
                  "has_builder": callable(services.build_report)}))
"""


def test_the_worker_task_modules_leave_matplotlib_to_the_report_that_draws():
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "controlplane.settings_tests", "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", LOAD_AS_A_WORKER], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["tasks"] > 20 and seen["has_builder"]  # the task modules really were loaded
    assert seen["heavy"] == [], seen
