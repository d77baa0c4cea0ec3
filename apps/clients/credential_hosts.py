"""Which hosts may receive a cluster's stored credentials (the monitor user's, the admin user's).

Cluster.credential_hosts, set by an admin: entries separated by spaces, commas or line breaks, each
  - an address or a network: 10.0.0.5, 10.0.0.0/8, fd00::/8, ::1 (an address matches only addresses: the name
    "10.1" is no address here, though a resolver may take it for 10.0.0.1);
  - a name pattern: db1.example.net, db-*.example.net ('*' stays within one label), or '*' (any name).
Names compare without case and without a trailing dot; a name is not resolved (the name is what the admin allows).

An empty list (every cluster before this setting) allows the hosts already in the cluster (its backends and nodes,
the inventory's copy of its current configuration version) and loopback: existing clusters keep working, and a
change set can no longer add a host of someone's choosing. No cluster (a new one, at adoption): loopback only.

credentials_allowed() is the one test; every door that sends stored credentials asks it: change sets, adoption's
preview and confirm, and BackendClient.for_server (the polls, operations, re-probes), which refuses before connecting
(NotAllowed). It lives here, in the lowest app, so that the client itself is the last line of defence; `cluster` is a
fleet.Cluster, read by attribute.
"""

import ipaddress
import re
from typing import Any

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))
LOOPBACK_NAMES = ("localhost",)
SETTING = "credential hosts (Cluster.credential_hosts, set by an admin)"

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Entry = ipaddress.IPv4Network | ipaddress.IPv6Network | re.Pattern[str]  # what parse() reads of one entry

_LABEL = re.compile(r"^[a-z0-9_*](?:[a-z0-9_*-]{0,61}[a-z0-9_*])?$")


class EntryError(ValueError):
    pass


def _name(host: str) -> str:
    return host.strip().lower().rstrip(".")


def address(host: str) -> IPAddress | None:
    """The host as an IP address (brackets, zone and IPv4-mapped IPv6 handled), or None for a name."""
    text = host.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.version == 6 and ip.scope_id:
        return ipaddress.ip_address(text.split("%", 1)[0])
    return ip


def parse(text: str | None) -> list[Entry]:
    """[network or compiled name pattern] from the setting's text. Raises EntryError naming the entry."""
    entries: list[Entry] = []
    for raw in re.split(r"[\s,]+", text or ""):
        if not raw:
            continue
        if "/" in raw or address(raw) is not None:
            try:
                entries.append(ipaddress.ip_network(raw.strip("[]"), strict=True))
            except ValueError as exc:
                raise EntryError(f"{raw[:80]!r} is not an address or network: {exc}") from None
            continue
        name = _name(raw)
        labels = name.split(".")
        if not name or len(name) > 253 or not all(_LABEL.match(label) for label in labels):
            raise EntryError(f"{raw[:80]!r} is not a host name pattern (letters, digits, '-', '_', '*' within a label)")
        entries.append(re.compile("^" + r"\.".join(re.escape(label).replace(r"\*", "[^.]*") for label in labels) + "$"))
    return entries


def host_allowed(entries: list[Entry], host: str) -> tuple[bool, str | None]:
    """(True, the entry it matched) or (False, None) for a host against parsed entries."""
    ip = address(host)
    for entry in entries:
        if isinstance(entry, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
            if ip is not None and ip.version == entry.version and ip in entry:
                return True, str(entry)
        elif ip is None and entry.match(_name(host)):
            return True, entry.pattern
    return False, None


def _loopback(host: str) -> bool:
    ip = address(host)
    return ip in LOOPBACK[0] or ip in LOOPBACK[1] if ip is not None else _name(host) in LOOPBACK_NAMES


def _in_cluster(cluster: Any, host: str) -> bool:
    name = _name(host)
    ip = address(host)
    known = list(cluster.servers.values_list("hostname", flat=True))
    known += list(cluster.proxysql_nodes.values_list("admin_host", flat=True))
    return any(_name(k) == name or (ip is not None and address(k) == ip) for k in known)


def credentials_allowed(cluster: Any, host: str, port: int | None = None) -> tuple[bool, str]:
    """(allowed, reason): may `cluster`'s stored credentials be sent to host:port? `cluster` None: a cluster not
    made yet (loopback only). The reason names the host and the setting, for refusals shown to a person."""
    where = f"{host}:{port}" if port is not None else str(host)
    text = getattr(cluster, "credential_hosts", "") if cluster is not None else ""
    if text:
        try:
            entries = parse(text)
        except EntryError as exc:
            return False, f"{cluster}'s {SETTING} cannot be read ({exc}): no credentials are sent"
        ok, entry = host_allowed(entries, host)
        if ok:
            return True, f"{where} matches {entry}"
        return False, f"{where} is not in {cluster}'s {SETTING}: no stored credentials are sent there"
    if _loopback(host):
        return True, f"{where} is loopback"
    if cluster is not None and cluster.pk and _in_cluster(cluster, host):
        return True, f"{where} is already in {cluster}"
    whose = f"{cluster}'s" if cluster is not None else "a new cluster's"
    return False, (
        f"{where} is not a host of {whose} (its {SETTING} is empty: only its current backends, nodes and "
        f"loopback are allowed): no stored credentials are sent there"
    )
