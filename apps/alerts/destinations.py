"""Where alert channels may post: ALERT_CHANNEL_DESTINATIONS (empty: anywhere).

Each entry is a host name (`hooks.slack.com`, `*.example.net` for its subdomains), an address or CIDR
(`10.1.2.3`, `10.0.0.0/8`, `[fd00::]/8`), each optionally with `:port`. A URL's destination is its host and
port (the scheme's default port when it names none); it is allowed when an entry matches both. A host name
matches a CIDR entry only when every address it resolves to lies in it (read when the form is checked and
again at each send, so a name later pointed at another address is refused then). Checked by the channel form
and again before every request (channels.send), which then connects to an address of that same answer: a DNS
that answers a public address to the check and a private one to the connection (rebinding) gets nothing.

A URL is judged as it is sent: prepared by requests and split by urllib3's parse_url, the parser the request's
connection is opened from (Python's urlsplit reads `http://127.0.0.1:9\\@hooks.slack.com/` as hooks.slack.com,
urllib3 as 127.0.0.1:9). A URL with userinfo, a backslash, white space or a control character is refused.
Loopback, link-local, private and other non-public addresses are refused unless a CIDR entry names them or
ALERT_CHANNEL_PRIVATE_ADDRESSES allows them (an internal URL's answer is no business of a channel).
"""

import fnmatch
import ipaddress
import socket
import string

import requests
from django.conf import settings
from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

DEFAULT_PORTS = {"http": 80, "https": 443}
_ODD = set(string.whitespace) | {"\\"} | {chr(c) for c in range(32)} | {chr(127)}


class Target:
    """A URL as it is sent: the prepared URL (what the request opens), its scheme, host and port."""

    def __init__(self, url, scheme, host, port):
        self.url, self.scheme, self.host, self.port = url, scheme, host, port
        self.addresses = []  # filled by checked()


def target(url):
    """The Target a URL is sent to, or a str saying why it cannot be sent."""
    url = url or ""
    if any(c in _ODD for c in url):
        return "the URL holds a backslash, white space or a control character"
    try:
        prepared = requests.Request("POST", url).prepare().url
        parts = parse_url(prepared)
    except (requests.RequestException, LocationParseError, ValueError, UnicodeError):
        return "the URL cannot be read"
    if parts.scheme not in DEFAULT_PORTS:
        return "the URL's scheme is not http or https"
    if parts.auth is not None or "@" in (parts.netloc or ""):
        return "the URL holds a user name or password before its host (put a secret in the Secret field)"
    if not parts.host:
        return "the URL names no host and port"
    host = parts.host.strip("[]").lower()
    return Target(prepared, parts.scheme, host, parts.port or DEFAULT_PORTS[parts.scheme])


def destination(url):
    """(host, port) a URL posts to; (None, None) when it cannot be sent."""
    found = target(url)
    return (found.host, found.port) if isinstance(found, Target) else (None, None)


def public_part(url):
    """ "scheme://host[:port]" of a URL: all of it a page shows (the path of a Slack-style URL is the credential)."""
    found = target(url)
    if not isinstance(found, Target):
        return ""
    host = f"[{found.host}]" if ":" in found.host else found.host
    port = "" if found.port == DEFAULT_PORTS[found.scheme] else f":{found.port}"
    return f"{found.scheme}://{host}{port}"


def shown(url):
    """ "host:port" for the pages, "" when the URL names none."""
    host, port = destination(url)
    if host is None:
        return ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def refusal(url):
    """None when a channel may post to this URL, else why not (in the admin's terms)."""
    found = checked(url)
    return found if isinstance(found, str) else None


def checked(url):
    """The Target a channel may post to, with `addresses`: what its host resolved to when it was judged (the send
    connects to one of those, never to a second answer of the DNS); or a str saying why it may not."""
    found = target(url)
    if not isinstance(found, Target):
        return found
    host, port = found.host, found.port
    found.addresses = _addresses(host)  # resolved once: judged and connected to alike
    entries = settings.ALERT_CHANNEL_DESTINATIONS
    matched = [split_entry(entry)[0] for entry in entries if _matches(entry, host, port, found.addresses)]
    if entries and not matched:
        return (
            f"{shown(url)} is not among the destinations alert channels may post to "
            f"(ALERT_CHANNEL_DESTINATIONS: {', '.join(entries)})"
        )
    named_by_network = any(not isinstance(pattern, str) for pattern in matched)
    if not named_by_network and not settings.ALERT_CHANNEL_PRIVATE_ADDRESSES:
        inner = [a for a in found.addresses if not a.is_global]
        if inner:
            return (
                f"{shown(url)} is a loopback, link-local or private address ({inner[0]}): alert channels post "
                "there only when ALERT_CHANNEL_DESTINATIONS names its network or ALERT_CHANNEL_PRIVATE_ADDRESSES "
                "is on"
            )
    return found


def split_entry(entry):
    """(host pattern or network, port or None) of an entry; ValueError when it is neither."""
    entry = entry.strip().lower()
    port = None
    if entry.startswith("["):  # [v6]/len:port or [v6]:port
        close = entry.index("]")
        rest = entry[close + 1 :]
        host = entry[1:close]
        if rest.startswith("/"):
            length, _, tail = rest[1:].partition(":")
            host, rest = f"{host}/{length}", (":" + tail if tail else "")
        if rest:
            port = int(rest.removeprefix(":"))
    elif entry.count(":") == 1:
        host, port_text = entry.split(":")
        port = int(port_text)
    else:
        host = entry
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"{entry!r}: a port is 1 to 65535")
    if not host:
        raise ValueError(f"{entry!r}: no host")
    return _network(host) or host, port


def _network(text):
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        return None


def _matches(entry, host, port, addresses):
    pattern, wanted_port = split_entry(entry)
    if wanted_port is not None and wanted_port != port:
        return False
    if isinstance(pattern, str):
        return fnmatch.fnmatchcase(host.lower(), pattern)
    return bool(addresses) and all(address in pattern for address in addresses)


def _addresses(host):
    literal = _network(host)
    if literal is not None:
        return [literal.network_address]
    try:
        return list({ipaddress.ip_address(info[4][0].split("%")[0]) for info in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError, ValueError):
        return []
