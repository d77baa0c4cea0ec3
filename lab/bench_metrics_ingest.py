"""bin/bench-metrics --prometheus SECONDS: a real Prometheus (Debian's package) scrapes the benchmark's fleet.

What the expositions cost the one that reads them: Django's own WSGI application serves them over HTTP (a wsgiref
server on 127.0.0.1, a thread per request, as behind production's TLS proxy), the latest-state documents re-dated
every 2 s so that none is stale, and a Prometheus server configured as README "Prometheus" says (one job, its
targets from /metrics/targets by HTTP service discovery: /metrics and one /metrics/pool per cluster) scrapes them
every 10 s (timeout 5 s, gzip as it always asks, `body_size_limit: 10MB`: a body over it fails its scrape) for
SECONDS from the first scrape of every target, with its extra scrape metrics on (each body's size as it parsed it).
Then its own figures are read back through its query API: up, scrape duration, samples and body size per scrape,
for /metrics and for the pool targets, head series, and the peak RSS of its process. (The benchmark's mirror-rule
windows were measured when it built the fleet: once older than the exporter's staleness limit they leave the
exposition, 2 series per rule, so a long run's last scrapes hold fewer samples than its first.)
"""

import json
import shutil
import threading
import time
import urllib.parse
import urllib.request
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from lab.bench_monitoring import free_port

SCRAPE_INTERVAL_S = 10
BODY_SIZE_LIMIT = "10MB"


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def _serve_django():
    from django.core.wsgi import get_wsgi_application

    app = get_wsgi_application()

    def behind_tls(environ, start_response):  # SECURE_SSL_REDIRECT: production runs behind a TLS proxy
        environ["wsgi.url_scheme"] = "https"
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, behind_tls, server_class=_ThreadingServer, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _query(url, expr):
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10) as r:
        result = json.load(r)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def _own_figure(url, name):
    """A figure of Prometheus's own /metrics, read now (its self-scrape may not have run in a short window)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise SystemExit(f"prometheus does not export {name}")


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
    from django.conf import settings

    settings.METRICS_TARGET_URL = f"http://{target}"  # the TLS proxy of behind_tls() is pretended: scrape plain HTTP
    config = lab.workdir / "prometheus.yml"
    config.write_text(
        json.dumps(
            {  # YAML is a superset of JSON
                "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "scrape_timeout": "5s"},
                "scrape_configs": [
                    {
                        "job_name": "proxysql-fleet",
                        "body_size_limit": BODY_SIZE_LIMIT,
                        "http_sd_configs": [{"url": f"http://{target}/metrics/targets"}],
                    },
                    {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
                ],
            }
        )
    )
    proc = lab.spawn(
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={lab.workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
            "--enable-feature=extra-scrape-metrics",
        ],
    )
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
        with urllib.request.urlopen(f"http://{target}/metrics/targets", timeout=10) as r:
            expected_targets = len(json.load(r))
        ready = time.monotonic()
        fleet, pools = f'{{job="proxysql-fleet",instance="{target}"}}', f'{{job="proxysql-fleet",instance!="{target}"}}'
        deadline = time.monotonic() + 60  # the first scrapes: after target discovery, at an offset in the interval
        while _query(url, 'count(up{job="proxysql-fleet"})') != expected_targets:  # every target scraped once
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"prometheus did not scrape the {expected_targets} targets within 60 s: see "
                    f"{lab.logs['prometheus']}"
                )
            time.sleep(0.5)
        time.sleep(seconds)
        window = f"[{int(time.monotonic() - ready) + 2}s]"  # every scrape since it started
        return {
            "seconds": seconds,
            "interval_s": SCRAPE_INTERVAL_S,
            "limit": BODY_SIZE_LIMIT,
            "targets": expected_targets,
            "scrapes": _query(url, f"count_over_time(up{fleet}{window})"),
            "up_min": _query(url, f"min_over_time(up{fleet}{window})"),
            "duration_avg_s": _query(url, f"avg_over_time(scrape_duration_seconds{fleet}{window})"),
            "duration_max_s": _query(url, f"max_over_time(scrape_duration_seconds{fleet}{window})"),
            "samples_min": _query(url, f"min_over_time(scrape_samples_scraped{fleet}{window})"),
            "samples_max": _query(url, f"max_over_time(scrape_samples_scraped{fleet}{window})"),
            "samples_last": _query(url, f"scrape_samples_scraped{fleet}"),
            "body_bytes": _query(url, f"max_over_time(scrape_body_size_bytes{fleet}{window})"),
            "pool_targets": _query(url, f"count(up{pools})"),
            "pool_scrapes": _query(url, f"sum(count_over_time(up{pools}{window}))"),
            "pool_up_min": _query(url, f"min(min_over_time(up{pools}{window}))"),
            "pool_duration_avg_s": _query(url, f"avg(avg_over_time(scrape_duration_seconds{pools}{window}))"),
            "pool_duration_max_s": _query(url, f"max(max_over_time(scrape_duration_seconds{pools}{window}))"),
            "pool_body_bytes": _query(url, f"max(max_over_time(scrape_body_size_bytes{pools}{window}))"),
            "pool_samples_last": _query(url, f"sum(scrape_samples_scraped{pools})"),
            "over_limit": _own_figure(url, "prometheus_target_scrapes_exceeded_body_size_limit_total"),
            "fleet_series": _query(url, 'count({__name__=~"proxysql_fleet_.+"})'),
            "head_series": _own_figure(url, "prometheus_tsdb_head_series"),
            "peak_rss_mib": _peak_rss_mib(proc.pid),
        }
    finally:
        stop.set()
        lab.stop("prometheus")
        server.shutdown()
        server.server_close()


def report_lines(p):
    return [
        f"| a real Prometheus: one job, its {p['targets']:,} targets discovered from /metrics/targets, scraped every "
        f"{p['interval_s']} s for {p['seconds']} s (gzip; timeout 5 s; body_size_limit {p['limit']}): /metrics | | "
        f"{p['scrapes']:.0f} scrapes, up {p['up_min']:.0f} in each; scrape duration avg {p['duration_avg_s'] * 1000:.0f} ms, "
        f"max {p['duration_max_s'] * 1000:.0f} ms; {p['samples_min']:,.0f} to {p['samples_max']:,.0f} samples a scrape "
        f"({p['samples_last']:,.0f} in the last), body as parsed up to {p['body_bytes'] / 1e6:.2f} MB |",
        f"| the same Prometheus: the pool targets | | {p['pool_targets']:,.0f} targets, {p['pool_scrapes']:,.0f} scrapes, "
        f"up {p['pool_up_min']:.0f} in each; scrape duration avg {p['pool_duration_avg_s'] * 1000:.0f} ms, max "
        f"{p['pool_duration_max_s'] * 1000:.0f} ms; {p['pool_samples_last']:,.0f} samples in their last scrapes, body "
        f"as parsed up to {p['pool_body_bytes'] / 1e3:.1f} kB |",
        f"| the same Prometheus: in all | | scrapes over the body size limit {p['over_limit']:,.0f}; "
        f"{p['fleet_series']:,.0f} fleet series in its head ({p['head_series']:,.0f} in all); its peak RSS "
        f"{p['peak_rss_mib']:.0f} MiB |",
    ]
