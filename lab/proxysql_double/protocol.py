"""MySQL client/server wire protocol, server side, as much of it as the ProxySQL admin double needs.

Lab double code: this speaks the classic protocol (no CLIENT_DEPRECATE_EOF, no SSL, no compression)
with mysql_native_password authentication, text result sets where every column is VAR_STRING (253),
as ProxySQL's admin interface does.
"""

import hashlib
import os
import struct

# Capability flags (subset).
CLIENT_LONG_PASSWORD = 0x00000001
CLIENT_FOUND_ROWS = 0x00000002
CLIENT_LONG_FLAG = 0x00000004
CLIENT_CONNECT_WITH_DB = 0x00000008
CLIENT_PROTOCOL_41 = 0x00000200
CLIENT_INTERACTIVE = 0x00000400
CLIENT_TRANSACTIONS = 0x00002000
CLIENT_SECURE_CONNECTION = 0x00008000
CLIENT_MULTI_STATEMENTS = 0x00010000
CLIENT_MULTI_RESULTS = 0x00020000
CLIENT_PLUGIN_AUTH = 0x00080000
CLIENT_CONNECT_ATTRS = 0x00100000
CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA = 0x00200000

SERVER_CAPABILITIES = (
    CLIENT_LONG_PASSWORD
    | CLIENT_FOUND_ROWS
    | CLIENT_LONG_FLAG
    | CLIENT_CONNECT_WITH_DB
    | CLIENT_PROTOCOL_41
    | CLIENT_INTERACTIVE
    | CLIENT_TRANSACTIONS
    | CLIENT_SECURE_CONNECTION
    | CLIENT_MULTI_RESULTS
    | CLIENT_PLUGIN_AUTH
    | CLIENT_CONNECT_ATTRS
    | CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA
)

SERVER_STATUS_AUTOCOMMIT = 0x0002
SERVER_STATUS_NO_BACKSLASH_ESCAPES = 0x0200
# ProxySQL's admin sets NO_BACKSLASH_ESCAPES (SQLite has no backslash escapes), so that client
# libraries escape quotes by doubling them; mysqlclient honours it.
STATUS = SERVER_STATUS_AUTOCOMMIT | SERVER_STATUS_NO_BACKSLASH_ESCAPES

# Commands.
COM_QUIT = 0x01
COM_INIT_DB = 0x02
COM_QUERY = 0x03
COM_FIELD_LIST = 0x04
COM_STATISTICS = 0x09
COM_PING = 0x0E
COM_SET_OPTION = 0x1B
COM_RESET_CONNECTION = 0x1F

TYPE_VAR_STRING = 253
CHARSET_UTF8 = 33
NATIVE_PLUGIN = b"mysql_native_password"
MAX_PAYLOAD = 0xFFFFFF


def new_scramble():
    """20 random bytes without NUL (the scramble travels NUL-terminated) and without '$'."""
    out = bytearray()
    while len(out) < 20:
        for b in os.urandom(40):
            if 1 <= b <= 127 and b != 0x24 and len(out) < 20:
                out.append(b)
    return bytes(out)


def native_password_ok(password, scramble, token):
    """Check a mysql_native_password token: SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw)))."""
    if not password:
        return not token
    if len(token) != 20:
        return False
    stage1 = hashlib.sha1(password.encode("utf-8")).digest()
    stage2 = hashlib.sha1(stage1).digest()
    mix = hashlib.sha1(scramble + stage2).digest()
    expected = bytes(a ^ b for a, b in zip(stage1, mix))
    return expected == token


def sqlite_float_text(v):
    """A REAL as SQLite renders it as text ("%!.15g": 15 significant digits, always a dot)."""
    r = "%.15g" % v
    if not any(c in r for c in ".eEn"):
        r += ".0"
    return r


def lenenc_int(n):
    if n < 251:
        return bytes((n,))
    if n < 1 << 16:
        return b"\xfc" + struct.pack("<H", n)
    if n < 1 << 24:
        return b"\xfd" + struct.pack("<I", n)[:3]
    return b"\xfe" + struct.pack("<Q", n)


def lenenc_str(b):
    return lenenc_int(len(b)) + b


def read_lenenc_int(data, pos):
    first = data[pos]
    if first < 251:
        return first, pos + 1
    if first == 0xFC:
        return struct.unpack_from("<H", data, pos + 1)[0], pos + 3
    if first == 0xFD:
        return int.from_bytes(data[pos + 1 : pos + 4], "little"), pos + 4
    if first == 0xFE:
        return struct.unpack_from("<Q", data, pos + 1)[0], pos + 9
    return None, pos + 1  # 0xFB (NULL) or 0xFF


class PacketWriter:
    """Accumulates framed packets with their sequence ids; `take()` returns the bytes to send."""

    def __init__(self, seq=0):
        self.seq = seq
        self.parts = []

    def packet(self, payload):
        # Payloads of 16 MiB or more are split; an exact multiple ends with an empty packet.
        start = 0
        while True:
            chunk = payload[start : start + MAX_PAYLOAD]
            self.parts.append(struct.pack("<I", len(chunk))[:3] + bytes((self.seq & 0xFF,)) + chunk)
            self.seq += 1
            start += MAX_PAYLOAD
            if len(chunk) < MAX_PAYLOAD:
                break

    def take(self):
        data = b"".join(self.parts)
        self.parts = []
        return data

    def pending(self):
        return sum(len(p) for p in self.parts)

    # Generic packets -----------------------------------------------------------------------
    def ok(self, affected=0, insert_id=0, status=STATUS, info=b""):
        self.packet(b"\x00" + lenenc_int(affected) + lenenc_int(insert_id) + struct.pack("<HH", status, 0) + info)

    def err(self, code, message, sqlstate="HY000"):
        msg = message.encode("utf-8", "replace") if isinstance(message, str) else message
        self.packet(b"\xff" + struct.pack("<H", code) + b"#" + sqlstate.encode("ascii")[:5] + msg)

    def eof(self, status=STATUS):
        self.packet(b"\xfe" + struct.pack("<HH", 0, status))

    # Result sets ---------------------------------------------------------------------------
    def column_def(self, name):
        n = name.encode("utf-8", "replace")
        self.packet(
            b"\x03def"
            + b"\x00"
            + b"\x00"
            + b"\x00"
            + lenenc_str(n)
            + lenenc_str(n)
            + b"\x0c"
            + struct.pack("<HIBHB", CHARSET_UTF8, 0xFFFF, TYPE_VAR_STRING, 0, 0)
            + b"\x00\x00"
        )

    def result_set(self, columns, rows):
        """Text result set: every value is sent as a string (or NULL), as ProxySQL admin does."""
        self.packet(lenenc_int(len(columns)))
        for c in columns:
            self.column_def(c)
        self.eof()
        packet = self.packet
        for row in rows:
            buf = []
            for v in row:
                if v is None:
                    buf.append(b"\xfb")
                else:
                    cls = v.__class__
                    if cls is str:
                        v = v.encode("utf-8", "surrogateescape")
                    elif cls is int:
                        v = str(v).encode()
                    elif cls is float:
                        v = sqlite_float_text(v).encode()
                    elif cls is not bytes:
                        v = str(v).encode("utf-8")
                    n = len(v)
                    buf.append((bytes((n,)) if n < 251 else lenenc_int(n)) + v)
            packet(b"".join(buf))
        self.eof()


def handshake_v10(connection_id, scramble, server_version):
    caps = SERVER_CAPABILITIES
    return (
        b"\x0a"
        + server_version.encode("utf-8")
        + b"\x00"
        + struct.pack("<I", connection_id & 0xFFFFFFFF)
        + scramble[:8]
        + b"\x00"
        + struct.pack("<H", caps & 0xFFFF)
        + bytes((CHARSET_UTF8,))
        + struct.pack("<H", STATUS)
        + struct.pack("<H", (caps >> 16) & 0xFFFF)
        + bytes((21,))
        + b"\x00" * 10
        + scramble[8:]
        + b"\x00"
        + NATIVE_PLUGIN
        + b"\x00"
    )


def parse_handshake_response(data):
    """Returns dict(user, auth, db, plugin, caps) from a HandshakeResponse41 payload."""
    caps = struct.unpack_from("<I", data, 0)[0]
    pos = 32
    end = data.index(b"\x00", pos)
    user = data[pos:end].decode("utf-8", "replace")
    pos = end + 1
    if caps & CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA:
        n, pos = read_lenenc_int(data, pos)
        auth = data[pos : pos + n]
        pos += n
    elif caps & CLIENT_SECURE_CONNECTION:
        n = data[pos]
        auth = data[pos + 1 : pos + 1 + n]
        pos += 1 + n
    else:
        end = data.index(b"\x00", pos)
        auth = data[pos:end]
        pos = end + 1
    db = None
    if caps & CLIENT_CONNECT_WITH_DB and pos < len(data):
        end = data.find(b"\x00", pos)
        end = len(data) if end < 0 else end
        db = data[pos:end].decode("utf-8", "replace")
        pos = end + 1
    plugin = None
    if caps & CLIENT_PLUGIN_AUTH and pos < len(data):
        end = data.find(b"\x00", pos)
        end = len(data) if end < 0 else end
        plugin = data[pos:end]
    return {"user": user, "auth": bytes(auth), "db": db, "plugin": plugin, "caps": caps}


def auth_switch_request(scramble):
    return b"\xfe" + NATIVE_PLUGIN + b"\x00" + scramble + b"\x00"
