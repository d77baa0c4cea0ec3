"""Where alert channels may post: ALERT_CHANNEL_DESTINATIONS (empty: anywhere).

Each entry is a host name (`hooks.slack.com`, `*.example.net` for its subdomains), an address or CIDR
(`10.1.2.3`, `10.0.0.0/8`, `[fd00::]/8`), each optionally with `:port`. A URL's destination is its host and
port (the scheme's default port when it names none); it is allowed when an entry matches both. A host name
matches a CIDR entry only when every address it resolves to lies in it (read when the form is checked and
again at each send, so a name later pointed at another address is refused then). Checked by the channel form
and again before every request (channels.send).
"""
import fnmatch
import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings


def destination(url):
    """(host, port) a URL posts to; (None, None) when it names no host or its port is no number."""
    try:
        parts = urlsplit(url or "")
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return None, None
    return (parts.hostname, port) if parts.hostname else (None, None)


def shown(url):
    """"host:port" for the pages, "" when the URL names none."""
    host, port = destination(url)
    if host is None:
        return ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def refusal(url):
    """None when a channel may post to this URL, else why not (in the admin's terms)."""
    entries = settings.ALERT_CHANNEL_DESTINATIONS
    if not entries:
        return None
    host, port = destination(url)
    if host is None:
        return "the URL names no host and port"
    if any(_matches(entry, host, port) for entry in entries):
        return None
    return (f"{shown(url)} is not among the destinations alert channels may post to "
            f"(ALERT_CHANNEL_DESTINATIONS: {', '.join(entries)})")


def split_entry(entry):
    """(host pattern or network, port or None) of an entry; ValueError when it is neither."""
    entry = entry.strip().lower()
    port = None
    if entry.startswith("["):  # [v6]/len:port or [v6]:port
        close = entry.index("]")
        rest = entry[close + 1:]
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


def _matches(entry, host, port):
    pattern, wanted_port = split_entry(entry)
    if wanted_port is not None and wanted_port != port:
        return False
    if isinstance(pattern, str):
        return fnmatch.fnmatchcase(host.lower(), pattern)
    addresses = _addresses(host)
    return bool(addresses) and all(address in pattern for address in addresses)


def _addresses(host):
    literal = _network(host)
    if literal is not None:
        return [literal.network_address]
    try:
        return list({ipaddress.ip_address(info[4][0].split("%")[0]) for info in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError, ValueError):
        return []
