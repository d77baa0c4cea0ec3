"""What each kind of channel receives, and sending it.

One message per group (a channel's view of one cluster): the alerts firing in it and those resolved since
the last message. Payloads, by kind:
  webhook       Prometheus Alertmanager's webhook format (version 4): what every receiver written for
                Alertmanager already reads
  slack         an incoming-webhook message: text and one attachment per alert, coloured by severity
                (Slack, Mattermost, Rocket.Chat and most chat tools accept it)
  pagerduty     one Events API v2 event per alert (trigger / resolve, dedup_key = the alert's
                fingerprint, so a retried or repeated event never opens a second incident)
  alertmanager  Alertmanager's own v2 API (POST /api/v2/alerts): firing alerts with endsAt ahead (re-posted
                while they fire), resolved ones with endsAt = when they resolved; it then routes, groups
                and silences as configured there
  email         Django's mail (EMAIL_* settings), plain text

HTTP goes through `requests` (one session per process, ALERTS_HTTP_TIMEOUT_S per request). An answer 2xx
is delivered; a connection error, a timeout, 408, 429 or 5xx is retried by the delivery task; any other
4xx means the receiver will never take this payload and is not retried.
"""

import hashlib
import time
from datetime import datetime, timedelta, timezone

import requests
import urllib3
from django.conf import settings
from django.core.mail import EmailMessage

from . import destinations
from .catalogue import BY_KEY, FAMILIES, SEVERITY_RANK
from .models import AlertState, ChannelKind

USER_AGENT = "proxysql-fleet-control-plane/alerts"
COLOURS = {"critical": "#b42318", "warning": "#a86a00", "info": "#1f5fbf"}
RETRY_STATUSES = {408, 429}

_session = {"value": None}


def session():
    if _session["value"] is None:
        s = requests.Session()
        s.headers["User-Agent"] = USER_AGENT
        _session["value"] = s
    return _session["value"]


def _iso(dt):
    return dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z") if dt else None


def fingerprint(alert):
    return hashlib.sha1(f"{alert.rule}|{alert.subject}|{alert.pk}".encode()).hexdigest()[:16]


def base_url():
    return settings.ALERTS_BASE_URL.rstrip("/")


def labels(alert):
    return {
        "alertname": alert.rule,
        "severity": alert.severity,
        "cluster": alert.cluster.name,
        "subject": alert.subject_label,
        "family": BY_KEY[alert.rule].family if alert.rule in BY_KEY else "test",
        "source": "proxysql-fleet",
    }


def annotations(alert):
    spec = BY_KEY.get(alert.rule)
    return {
        "summary": alert.summary,
        "title": spec.title if spec else alert.rule,
        "description": spec.why if spec else "",
        "console_url": f"{base_url()}{alert.get_absolute_url()}",
    }


def _status(alert):
    return "resolved" if alert.state == AlertState.RESOLVED else "firing"


def webhook_payload(channel, cluster_name, status, alerts, group_key):
    items = [
        {
            "status": _status(a),
            "labels": labels(a),
            "annotations": annotations(a),
            "startsAt": _iso(a.fired_at or a.since),
            "endsAt": _iso(a.resolved_at) if a.resolved_at else "0001-01-01T00:00:00Z",
            "generatorURL": f"{base_url()}{a.get_absolute_url()}",
            "fingerprint": fingerprint(a),
        }
        for a in alerts
    ]
    common = dict(items[0]["labels"]) if items else {}
    for item in items[1:]:
        common = {k: v for k, v in common.items() if item["labels"].get(k) == v}
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": status,
        "receiver": channel.name,
        "groupLabels": {"cluster": cluster_name},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": base_url(),
        "alerts": items,
    }


def headline(status, cluster_name, alerts):
    firing = [a for a in alerts if a.state != AlertState.RESOLVED]
    worst = max(alerts, key=lambda a: (SEVERITY_RANK.get(a.severity, 0), a.state != AlertState.RESOLVED))
    what = BY_KEY[worst.rule].title if worst.rule in BY_KEY else worst.summary
    if status == "firing":
        return f"[FIRING:{len(firing)}] {cluster_name}: {worst.severity} — {what}"
    return f"[RESOLVED] {cluster_name}: {what}" + (f" and {len(alerts) - 1} more" if len(alerts) > 1 else "")


def slack_text(text):
    """Text as Slack's message format reads it literally: &, < and > escaped, as Slack documents, so that a digest
    text from client SQL cannot mention `<!channel>` or draw a `<http://x|link>`."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_payload(channel, cluster_name, status, alerts):
    attachments = []
    for a in alerts:
        done = a.state == AlertState.RESOLVED
        attachments.append(
            {
                "color": "#1d7f45" if done else COLOURS.get(a.severity, "#5a6475"),
                "title": slack_text(f"{'RESOLVED' if done else a.severity.upper()}: {annotations(a)['title']}"),
                "title_link": f"{base_url()}{a.get_absolute_url()}",
                "text": slack_text(a.summary),
                "fields": [
                    {"title": "Subject", "value": slack_text(a.subject_label), "short": True},
                    {"title": "Since", "value": _iso(a.since), "short": True},
                ],
                "footer": "ProxySQL fleet",
                "ts": int((a.resolved_at or a.fired_at or a.since).timestamp()),
            }
        )
    return {"text": slack_text(headline(status, cluster_name, alerts)), "attachments": attachments}


def pagerduty_payload(channel, cluster_name, alerts):
    events = []
    for a in alerts:
        if a.state == AlertState.RESOLVED:
            events.append({"routing_key": channel.secret, "event_action": "resolve", "dedup_key": fingerprint(a)})
            continue
        spec = BY_KEY.get(a.rule)
        events.append(
            {
                "routing_key": channel.secret,
                "event_action": "trigger",
                "dedup_key": fingerprint(a),
                "payload": {
                    "summary": f"{cluster_name}: {a.summary}"[:1024],
                    "source": a.subject_label,
                    "severity": a.severity,
                    "timestamp": _iso(a.fired_at or a.since),
                    "component": a.rule,
                    "group": cluster_name,
                    "class": FAMILIES.get(spec.family, "") if spec else "test",
                    "custom_details": {
                        "rule": spec.title if spec else a.rule,
                        "why": spec.why if spec else "",
                        "since": _iso(a.since),
                        **{k: v for k, v in (a.details or {}).items() if isinstance(v, (str, int, float))},
                    },
                },
                "links": [{"href": f"{base_url()}{a.get_absolute_url()}", "text": "The alert and its evidence"}],
                "client": "ProxySQL fleet control plane",
                "client_url": base_url(),
            }
        )
    return {"events": events}


def alertmanager_payload(alerts, now):
    ends = datetime.fromtimestamp(now, tz=timezone.utc) + timedelta(seconds=3 * settings.ALERTS_ALERTMANAGER_RESEND_S)
    return {
        "alerts": [
            {
                "labels": labels(a),
                "annotations": annotations(a),
                "startsAt": _iso(a.fired_at or a.since),
                "endsAt": _iso(a.resolved_at if a.state == AlertState.RESOLVED else ends),
                "generatorURL": f"{base_url()}{a.get_absolute_url()}",
            }
            for a in alerts
        ]
    }


def email_payload(channel, cluster_name, status, alerts):
    lines = [headline(status, cluster_name, alerts), ""]
    for a in alerts:
        lines += [
            f"{'RESOLVED' if a.state == AlertState.RESOLVED else a.severity.upper()}: {annotations(a)['title']}",
            f"  {a.summary}",
            f"  subject: {a.subject_label}",
            f"  since: {_iso(a.since)}" + (f", resolved {_iso(a.resolved_at)}" if a.resolved_at else ""),
            f"  {base_url()}{a.get_absolute_url()}",
            "",
        ]
    lines.append(f"Alerts: {base_url()}/alerts/")
    return {
        "subject": f"[ProxySQL fleet] {headline(status, cluster_name, alerts)}"[:250],
        "body": "\n".join(lines),
        "to": recipients(channel),
    }


def recipients(channel):
    return [a.strip() for a in channel.recipients.split(",") if a.strip()]


def build(channel, cluster_name, status, alerts, now, group_key):
    if channel.kind == ChannelKind.WEBHOOK:
        return webhook_payload(channel, cluster_name, status, alerts, group_key)
    if channel.kind == ChannelKind.SLACK:
        return slack_payload(channel, cluster_name, status, alerts)
    if channel.kind == ChannelKind.PAGERDUTY:
        return pagerduty_payload(channel, cluster_name, alerts)
    if channel.kind == ChannelKind.ALERTMANAGER:
        return alertmanager_payload(alerts, now)
    return email_payload(channel, cluster_name, status, alerts)


# -- sending -----------------------------------------------------------------------------------------
class Result:
    def __init__(self, ok, http_status=None, error="", retry=True, ms=0.0):
        self.ok, self.http_status, self.error, self.retry, self.ms = ok, http_status, error, retry, ms


def _post(url, body, channel):
    found = destinations.checked(url)  # the allow-list may have changed since the channel was saved
    if isinstance(found, str):
        return Result(False, None, f"not sent: {found}"[:500], retry=False)
    where = destinations.public_part(url)
    if not found.addresses:
        return Result(False, None, f"not sent: the host of {where} does not resolve")
    headers = {}
    if channel.secret and channel.kind in (ChannelKind.WEBHOOK, ChannelKind.ALERTMANAGER):
        headers["Authorization"] = f"Bearer {channel.secret}"
    # The request goes to the URL the check judged: prepared here, sent as it is.
    prepared = session().prepare_request(requests.Request("POST", found.url, json=body, headers=headers))
    environment = session().merge_environment_settings(prepared.url, {}, None, None, None)
    try:
        if environment.get("proxies") and requests.utils.select_proxy(prepared.url, environment["proxies"]):
            sent = session().send(
                prepared, timeout=settings.ALERTS_HTTP_TIMEOUT_S, allow_redirects=False, **environment
            )  # the proxy resolves the name: ALERT_CHANNEL_DESTINATIONS judged it
        else:
            sent = _send_pinned(prepared, found, environment)
    except requests.RequestException as exc:
        return Result(False, None, f"{type(exc).__name__} posting to {where}: {_reason(exc, url)}"[:500])
    if 200 <= sent.status_code < 300:
        return Result(True, sent.status_code)
    retry = sent.status_code >= 500 or sent.status_code in RETRY_STATUSES
    # What the receiver answered stays out of the log: viewers read it, and an internal URL's answer is no
    # business of theirs. Its status says enough to act.
    return Result(False, sent.status_code, f"HTTP {sent.status_code} from {where}", retry=retry)


class _PinnedAdapter(requests.adapters.HTTPAdapter):
    """Connects to one address while the request names the host: TLS still sends and verifies the host's name."""

    def __init__(self, host):
        self.host = host
        super().__init__(max_retries=0)

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs, server_hostname=self.host, assert_hostname=self.host)


def _send_pinned(prepared, found, environment):
    """Send to an address the destination check resolved (a DNS rebinding's second answer is never read), IPv4
    first, the next one only when connecting failed (as a connection by name does). One session a send: its pool
    belongs to that address and host alone."""
    original = urllib3.util.parse_url(prepared.url)
    named = f"[{found.host}]" if ":" in found.host else found.host
    prepared.headers["Host"] = (
        named if found.port == destinations.DEFAULT_PORTS[found.scheme] else f"{named}:{found.port}"
    )
    failed = None
    for address in sorted(found.addresses, key=lambda a: a.version):
        prepared.url = original._replace(host=f"[{address}]" if address.version == 6 else str(address)).url
        with requests.Session() as pinned:
            pinned.mount(f"{found.scheme}://", _PinnedAdapter(found.host))
            try:
                return pinned.send(
                    prepared,
                    timeout=settings.ALERTS_HTTP_TIMEOUT_S,
                    allow_redirects=False,
                    verify=environment.get("verify", True),
                    cert=environment.get("cert"),
                )
            except requests.ConnectionError as exc:
                if not isinstance(
                    getattr(exc.args[0] if exc.args else None, "reason", None), urllib3.exceptions.NewConnectionError
                ):
                    raise  # it may have been sent: never twice
                failed = exc
    raise failed


def _reason(exc, url):
    """Why a request failed, without its URL: requests' and urllib3's texts quote the URL's path (a Slack-style
    URL's secret), so only the innermost cause's kind and its OS error are kept."""
    cause = exc
    while True:
        inner = getattr(cause, "reason", None) or cause.__cause__ or cause.__context__
        if inner is None or inner is cause or not isinstance(inner, BaseException):
            break
        cause = inner
    errno = getattr(cause, "errno", None)
    strerror = getattr(cause, "strerror", None)
    if strerror:
        return f"{type(cause).__name__} [Errno {errno}] {strerror}"
    if isinstance(cause, TimeoutError) or "timed out" in str(cause).lower():
        return f"{type(cause).__name__}: timed out"
    return type(cause).__name__


def send(channel, payload):
    """Deliver one payload. Returns a Result (ok, HTTP status, error, whether a retry may help, ms)."""
    started = time.monotonic()
    if channel.kind == ChannelKind.EMAIL:
        try:
            EmailMessage(payload["subject"], payload["body"], settings.DEFAULT_FROM_EMAIL, payload["to"]).send(
                fail_silently=False
            )
            result = Result(True)
        except Exception as exc:  # SMTP refused, connection failed...: the next try may work
            result = Result(False, None, f"{type(exc).__name__}: {exc}"[:500])
    elif channel.kind == ChannelKind.PAGERDUTY:
        result = Result(True)
        for event in payload["events"]:  # PagerDuty takes one event per request
            result = _post(channel.url, event, channel)
            if not result.ok:
                break
    elif channel.kind == ChannelKind.ALERTMANAGER:
        result = _post(f"{channel.url.rstrip('/')}/api/v2/alerts", payload["alerts"], channel)
    else:
        result = _post(channel.url, payload, channel)
    result.ms = round((time.monotonic() - started) * 1000, 2)
    return result
