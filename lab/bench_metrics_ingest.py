"""bin/bench-metrics --prometheus SECONDS: a real Prometheus (Debian's package) scrapes the benchmark's /metrics.

What the exposition's size costs the one that reads it: the fleet's /metrics is served over HTTP by Django's own
WSGI application (a wsgiref server on 127.0.0.1, one request at a time, as behind production's TLS proxy), the
latest-state documents re-dated every 2 s so that none is stale, and a Prometheus server scrapes it every 10 s
(timeout 5 s, gzip as it always asks) for SECONDS from its first scrape, with its extra scrape metrics on (the body's size as it
parsed it). Then its own figures are read back through its query API: up, scrape duration, samples and body
size per scrape, head series, and the peak RSS of its process. (The benchmark's mirror-rule windows were measured
when it built the fleet: once older than the exporter's staleness limit they leave the exposition, 2 series per
rule, so a long run's last scrapes hold fewer samples than its first.)
"""
import json
import shutil
import threading
import time
import urllib.parse
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

from lab.bench_monitoring import free_port

SCRAPE_INTERVAL_S = 10


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def _serve_django():
    from django.core.wsgi import get_wsgi_application

    app = get_wsgi_application()

    def behind_tls(environ, start_response):  # SECURE_SSL_REDIRECT: production runs behind a TLS proxy
        environ["wsgi.url_scheme"] = "https"
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, behind_tls, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _query(url, expr):
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10) as r:
        result = json.load(r)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _peak_rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return None


def scrape(lab, seconds, refresh):
    """Runs the scrape for `seconds` (refresh(): re-date the documents) and returns Prometheus's figures."""
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("--prometheus needs the prometheus server (Debian package prometheus; bin/setup installs it)")
    server = _serve_django()
    stop = threading.Event()

    def redate():
        while not stop.wait(2):
            refresh()

    threading.Thread(target=redate, daemon=True).start()
    port = free_port()
    target = f"127.0.0.1:{server.server_port}"
    config = lab.workdir / "prometheus.yml"
    config.write_text(json.dumps({  # YAML is a superset of JSON
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "scrape_timeout": "5s"},
        "scrape_configs": [{"job_name": "proxysql-fleet", "static_configs": [{"targets": [target]}]},
                           {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}]}))
    proc = lab.spawn("prometheus", [binary, f"--config.file={config}", f"--storage.tsdb.path={lab.workdir / 'tsdb'}",
                                    f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
                                    "--enable-feature=extra-scrape-metrics"])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=1):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"prometheus did not start: see {lab.logs['prometheus']}")
                time.sleep(0.2)
        ready, job = time.monotonic(), '{job="proxysql-fleet"}'
        deadline = time.monotonic() + 30  # the first scrapes: after target discovery, at an offset in the interval
        while _query(url, "count(up)") != 2:  # /metrics and its own, each scraped once
            if time.monotonic() > deadline:
                raise SystemExit(f"prometheus did not scrape /metrics within 30 s: see {lab.logs['prometheus']}")
            time.sleep(0.5)
        time.sleep(seconds)
        window = f"[{int(time.monotonic() - ready) + 2}s]"  # every scrape since it started
        return {
            "seconds": seconds, "interval_s": SCRAPE_INTERVAL_S,
            "scrapes": _query(url, f"count_over_time(up{job}{window})"),
            "up_min": _query(url, f"min_over_time(up{job}{window})"),
            "duration_avg_s": _query(url, f"avg_over_time(scrape_duration_seconds{job}{window})"),
            "duration_max_s": _query(url, f"max_over_time(scrape_duration_seconds{job}{window})"),
            "samples_min": _query(url, f"min_over_time(scrape_samples_scraped{job}{window})"),
            "samples_max": _query(url, f"max_over_time(scrape_samples_scraped{job}{window})"),
            "samples_last": _query(url, f"scrape_samples_scraped{job}"),
            "body_bytes": _query(url, f"max_over_time(scrape_body_size_bytes{job}{window})"),
            "fleet_series": _query(url, 'count({__name__=~"proxysql_fleet_.+"})'),
            "head_series": _query(url, "prometheus_tsdb_head_series"),
            "peak_rss_mib": _peak_rss_mib(proc.pid),
        }
    finally:
        stop.set()
        lab.stop("prometheus")
        server.shutdown()
        server.server_close()


def report_lines(p):
    return [
        f"| a real Prometheus scraping it every {p['interval_s']} s for {p['seconds']} s (gzip; timeout 5 s) | | "
        f"{p['scrapes']:.0f} scrapes, up {p['up_min']:.0f} in each; scrape duration avg {p['duration_avg_s'] * 1000:.0f} ms, "
        f"max {p['duration_max_s'] * 1000:.0f} ms; {p['samples_min']:,.0f} to {p['samples_max']:,.0f} samples a scrape "
        f"({p['samples_last']:,.0f} in the last), body as parsed up to {p['body_bytes'] / 1e6:.2f} MB; "
        f"{p['fleet_series']:,.0f} fleet series in its head ({p['head_series']:,.0f} in all); its peak RSS "
        f"{p['peak_rss_mib']:.0f} MiB |"]
