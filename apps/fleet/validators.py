import ipaddress
import re
import unicodedata

from django.core.exceptions import ValidationError
from cryptography import x509

from apps.clients.credential_hosts import EntryError, parse

_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


def validate_no_nul(value: str | None) -> None:
    """NUL bytes cannot travel in an SQL text statement; refuse them at the door."""
    if value and "\x00" in value:
        raise ValidationError("NUL characters are not allowed.")


def has_invisible(value: str | None) -> bool:
    """Whether a text holds a control character (line breaks, tabs), a format character (zero-width spaces,
    direction overrides, BOM) or a line/paragraph separator: what makes a value read as something it is not."""
    if not value:
        return False
    return any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in value)


def validate_name(value: str) -> None:
    """A name shown in pages, file names and headers: no control or format characters (a CR/LF in a cluster's
    name broke the export's header and its file's comment line)."""
    validate_no_nul(value)
    if has_invisible(value):
        raise ValidationError("Control characters (line breaks, tabs...) are not allowed in a name.")


def validate_hostname(value: str) -> None:
    """An IPv4/IPv6 address or a DNS name (letters, digits, '-', '_', dots)."""
    if not value:
        raise ValidationError("Enter a host name or IP address.")
    try:
        ipaddress.ip_address(value)
        return
    except ValueError:
        pass
    name = value[:-1] if value.endswith(".") else value
    if len(name) > 253 or not all(_HOST_LABEL.match(label) for label in name.split(".")):
        raise ValidationError(f"{value[:80]!r} is not a valid host name or IP address.")


_ENDPOINT = re.compile(r"\[([^\]]+)\]:([0-9]{1,5})|([^:\[\]]+):([0-9]{1,5})")


ID_MAX = 2**63 - 1  # the largest a database's BIGINT (and SQLite's INTEGER) holds


def whole_number(text: object, limit: int = ID_MAX) -> int | None:
    """ASCII digits naming a number from 0 to limit -> that number; anything else (empty, '²', 5,000 digits that
    int() refuses or a database cannot hold) -> None. str.isdigit() alone lets both through to int()."""
    if not (isinstance(text, str) and text.isascii() and text.isdigit()) or len(text) > len(str(limit)):
        return None
    value = int(text)
    return value if value <= limit else None


def parse_endpoint(text: object) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port); ValueError with the reason otherwise."""
    match = _ENDPOINT.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match:
        raise ValueError(f"{str(text)[:80]!r} is not HOST:PORT")
    host, port = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    if not 1 <= int(port) <= 65535:
        raise ValueError(f"port {port} is out of range (1-65535)")
    return host, int(port)


def validate_credential_hosts(value: str | None) -> None:
    """Cluster.credential_hosts: every entry an address, a network or a host name pattern (credential_hosts.py)."""
    try:
        parse(value)
    except EntryError as exc:
        raise ValidationError(str(exc)) from None


TLS_CA_MAX = 64 * 1024


def tls_ca_certificates(value: str) -> list[x509.Certificate]:
    """The certificates of a CA text (PEM, one or more), or ValidationError saying what is wrong with it."""
    if len(value) > TLS_CA_MAX:
        raise ValidationError(f"The CA is {len(value):,} characters: at most {TLS_CA_MAX:,} (PEM certificates).")
    try:
        certificates = x509.load_pem_x509_certificates(value.encode("ascii"))
    except (UnicodeEncodeError, ValueError) as exc:
        raise ValidationError(f"The CA must be PEM certificates (-----BEGIN CERTIFICATE-----...): {exc}") from None
    return certificates


def validate_tls_ca(value: str | None) -> None:
    """Cluster.tls_ca: empty (no TLS) or PEM CA certificates."""
    if value:
        tls_ca_certificates(value)
