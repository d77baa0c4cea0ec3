"""A real Prometheus Alertmanager (Debian's prometheus-alertmanager, started by the test on a free port):
the console posts its alerts to the v2 API, reads them back from that API, and resolves them there."""

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from apps.alerts import notify
from apps.alerts.models import Channel, Notification

from .conftest import firing, open_alerts, set_rule, tick, until

pytestmark = pytest.mark.django_db

CONFIG = """route:
  receiver: nobody
  group_by: [cluster]
receivers:
  - name: nobody
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def alertmanager(tmp_path):
    binary = shutil.which("prometheus-alertmanager")
    if binary is None:
        pytest.fail("prometheus-alertmanager is not installed: run bin/setup")
    (tmp_path / "alertmanager.yml").write_text(CONFIG)
    port = free_port()
    log = open(tmp_path / "alertmanager.log", "w+")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(f"{url}/-/ready", timeout=1).read()
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                log.seek(0)
                proc.kill()
                pytest.fail(f"Alertmanager did not start:\n{log.read()[-2000:]}")
            time.sleep(0.2)
    yield url
    proc.terminate()
    proc.wait(timeout=10)


def am_alerts(url, active=True):
    query = "" if active else "?active=false&silenced=false&inhibited=false&unprocessed=false"
    return json.loads(urllib.request.urlopen(f"{url}/api/v2/alerts{query}", timeout=5).read())


def send_due():
    before = set(Notification.objects.values_list("pk", flat=True))
    notify.flush_due(time.time() + 2)
    for n in Notification.objects.exclude(pk__in=before):
        delivered, _ = notify.attempt(n.pk)
        assert delivered, Notification.objects.get(pk=n.pk).last_error


def test_alerts_posted_to_a_real_alertmanager_and_read_back_from_its_api(adopted_lab, live_redis, alertmanager):
    cluster, (first, second) = adopted_lab
    Channel.objects.create(name="team alertmanager", kind="alertmanager", url=alertmanager, min_severity="info")
    set_rule("proxysql_unreachable", for_s=0)
    tick(["proxysql"])
    first.set_mode("hang")
    try:
        assert until(lambda: firing("proxysql_unreachable"), 10, kinds=["proxysql"])
        send_due()
        [got] = am_alerts(alertmanager)
        [alert] = firing("proxysql_unreachable")
        assert got["labels"] == {
            "alertname": "proxysql_unreachable",
            "severity": "critical",
            "cluster": "galera-lab",
            "subject": alert.subject_label,
            "family": "proxysql",
            "source": "proxysql-fleet",
        }
        assert got["status"]["state"] == "active" and "does not answer" in got["annotations"]["summary"]
        assert got["generatorURL"].endswith(f"/alerts/{alert.pk}/")
        assert got["endsAt"] > got["startsAt"]  # ahead: re-posted while it fires
    finally:
        first.set_mode("normal")
    assert until(lambda: not open_alerts("proxysql_unreachable"), 10, kinds=["proxysql"])
    send_due()
    assert am_alerts(alertmanager) == []  # resolved there: endsAt is when it resolved here
