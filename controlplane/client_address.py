"""The client's address: the peer (REMOTE_ADDR), or, when that peer is one of TRUSTED_PROXY_ADDRESSES (a reverse
proxy named by the operator), the address that proxy put in X-Forwarded-For. A header a client writes itself is
never believed: X-Forwarded-For is read from its right end (the nearest proxy's entry first), trusted proxies
skipped, and the first address no trusted proxy owns is the client."""

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _trusted(address: ipaddress.IPv4Address | ipaddress.IPv6Address | None) -> bool:
    return address is not None and any(
        address in ipaddress.ip_network(n, strict=False) for n in settings.TRUSTED_PROXY_ADDRESSES
    )


def client_address(request: HttpRequest) -> str | None:
    peer = request.META.get("REMOTE_ADDR") or None
    if not settings.TRUSTED_PROXY_ADDRESSES or not _trusted(_address(peer or "")):
        return peer
    for entry in reversed(request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")):
        address = _address(entry)
        if address is None:  # garbage in the header: nothing to its left can be believed
            return peer
        if not _trusted(address):
            return str(address)
    return peer
